"""The all-to-all two-shot's engine (mpiring.ring.alltoall_engine) over simulated GPUs: every
rank's engine enqueues onto a simulated device whose memory is addressed by bytes (each rank's
staging laid out by AllToAllLayout, the fold tables written as set-up writes them) and whose
streams run in an order drawn at random. So the addresses the engine computes, the flags it
waits on and signals, the copies and the folds through the tables are all exercised as the GPU
would see them, over several calls on one machine (flags and slots carry over), and every
element is compared bitwise with the rank-ordered reference (mpiring.core.reproducible).
The staging starts poisoned, and a drawn order that lets a stream run past a wait it should not
would read poison or a stale round.

Each call is enqueued one of four ways (``via``): the engine's Python walk of the issue order
(the reference), its call shape's program read in Python (Program.issue), that program run
by the compiled executor (mpiring/cuda/_streamprog.c, built here from its source) whose driver
entry points pass every call on to the simulated GPU: so the programs are checked for results;
or the Python walk traced (ce_twoshot.issue_traced: an event recorded on each operation's stream
before and after it, the simulated GPU's events: tests/test_alltoall_tracing.py reads them)."""

from __future__ import annotations

from collections import deque
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring.algorithms.ce_twoshot import issue_call, issue_traced
from mpiring.core.reproducible import reference
from mpiring.cuda.alltoall_layout import AllToAllLayout
from mpiring.cuda.layout import MAX_RANKS
from mpiring.cuda.memops import StreamMemOps
from mpiring.ring.alltoall_engine import AllToAllEngine
from mpiring.ring.alltoall_schedule import AllToAllPlan
from mpiring.ring.alltoall_tracing import AllToAllTracer
from mpiring.ring.schedule import Phase
from tools import streamprog_bench as bench

SPAN = 1 << 32  # address space of one buffer in the simulation
VIAS = ("reference", "program", "compiled", "traced")
CALL_STREAM = 0  # the caller's stream in the simulation (a traced call's reference mark)
_MODULE: list = []  # the executor's extension, built once per session (None: no gcc)


def executor_module():
    if not _MODULE:
        import shutil
        import tempfile
        from pathlib import Path

        _MODULE.append(bench.extension(Path(tempfile.mkdtemp())) if shutil.which("gcc") else None)
    if _MODULE[0] is None:
        pytest.skip("no gcc to build mpiring/cuda/_streamprog.c")
    return _MODULE[0]


class Memory:
    """Buffers at fixed addresses: ``base(kind, rank)``; reads and writes by address."""

    def __init__(self) -> None:
        self.buffers: dict[int, np.ndarray] = {}
        self.tick = 0  # operations run so far on every GPU: the simulation's clock
        self.reached: dict[int, int] = {}  # event -> the tick at which it ran
        self.events = 0  # events recorded so far, on every GPU

    def add(self, index: int, nbytes: int, fill: int = 0xA5) -> int:
        self.buffers[index] = np.full(nbytes, fill, dtype=np.uint8)
        return (index + 1) * SPAN

    def bytes(self, addr: int, nbytes: int) -> np.ndarray:
        index, offset = divmod(addr, SPAN)
        buf = self.buffers[index - 1]
        assert 0 <= offset and offset + nbytes <= buf.size, (hex(addr), nbytes, buf.size)
        return buf[offset:offset + nbytes]

    def u64(self, addr: int) -> int:
        return int(self.bytes(addr, 8).view(np.uint64)[0])

    def set_u64(self, addr: int, value: int) -> None:
        self.bytes(addr, 8).view(np.uint64)[0] = value


class SimDevice:
    """One rank's GPU: operations queued per stream, run by :func:`run_all`."""

    def __init__(self, memory: Memory, dtype: np.dtype, serial: bool = False) -> None:
        self.memory, self.dtype = memory, dtype
        self.serial = serial  # every stream on one queue, in enqueue order: the worst case
        self.queues: dict[int, deque] = {}
        self.log: list[tuple[int, tuple]] = []  # (stream, operation) of everything enqueued

    def _put(self, stream: int, op: tuple) -> None:
        self.log.append((stream, op))
        self.queues.setdefault(-1 if self.serial else stream, deque()).append(op)

    def record_event(self, stream: int) -> int:
        """cudaEventRecord: an event reached once the stream's earlier work ran."""
        mem = self.memory
        mem.events += 1
        self._put(stream, ("event", mem.events))
        return mem.events

    def wait_event(self, stream: int, event: int) -> None:
        """cudaStreamWaitEvent: the stream's later work waits until ``event`` was reached."""
        self._put(stream, ("wait event", event))

    def wait_geq(self, stream: int, addr: int, value: int) -> None:
        # cuStreamWaitValue64 takes an unsigned value; a wait that always holds is not issued.
        assert 0 < value < 1 << 64, f"a device wait for {value}"
        self._put(stream, ("wait", addr, value))

    def write(self, stream: int, addr: int, value: int) -> None:
        assert 0 < value < 1 << 64, f"a device write of {value}"
        self._put(stream, ("write", addr, value))

    def copy(self, stream: int, dst: int, src: int, nbytes: int) -> None:
        self._put(stream, ("copy", dst, src, nbytes))

    def fold(self, stream: int, out: int, mine: int, table: int, me: int, ranks: int, count: int) -> None:
        self._put(stream, ("fold", out, mine, table, me, ranks, count))

    def ready(self, op: tuple) -> bool:
        if op[0] == "wait event":
            return op[1] in self.memory.reached
        return op[0] != "wait" or self.memory.u64(op[1]) >= op[2]

    def run(self, op: tuple, ufunc_op: str) -> None:
        mem, item = self.memory, self.dtype.itemsize
        mem.tick += 1
        if op[0] == "event":
            mem.reached[op[1]] = mem.tick
        elif op[0] == "write":
            assert op[2] > mem.u64(op[1]), f"{op}: flags only grow"
            mem.set_u64(op[1], op[2])
        elif op[0] == "copy":
            _, dst, src, nbytes = op
            mem.bytes(dst, nbytes)[...] = mem.bytes(src, nbytes).copy()
        elif op[0] == "fold":  # csrc/fold_n.cu: mine for rank me, the table's areas for the others
            _, out, mine, table, me, ranks, count = op
            sources = [mine if r == me else mem.u64(table + 8 * r) for r in range(ranks)]
            assert all(sources), f"fold: an empty table entry: {sources}"
            parts = [mem.bytes(a, count * item).view(self.dtype).copy() for a in sources]
            mem.bytes(out, count * item)[...] = reference(parts, ufunc_op).view(np.uint8)


class SimMarks:
    """The tracer's marks (mpiring.ring.alltoall_tracing.Marks) on a simulated GPU: its events,
    whose time is the simulation's tick when they ran."""

    def __init__(self, device: SimDevice) -> None:
        self.device = device

    def record(self, stream: int) -> int:
        return self.device.record_event(stream)

    def wait(self, stream: int, mark: int) -> None:
        self.device.wait_event(stream, mark)

    def seconds(self, reference: int, mark: int) -> float:
        reached = self.device.memory.reached
        return float(reached[mark] - reached[reference])

    def close(self) -> None:
        pass


class Node:
    """``size`` simulated GPUs with their all-to-all staging and engines, kept across calls."""

    def __init__(self, size: int, area_bytes: int, dtype: Any, serial: bool = False,
                 via: str = "reference") -> None:
        self.size, self.dtype, self.via = size, np.dtype(dtype), via
        self.memory = Memory()
        self.layout = AllToAllLayout(size, area_bytes)
        bases = [self.memory.add(r, self.layout.used_bytes) for r in range(size)]
        for r in range(size):  # flags start at 0; areas and tables keep the poison
            self.memory.bytes(bases[r], self.layout.flags_end)[...] = 0
        addr = lambda rank, offset: bases[rank] + offset  # noqa: E731 - every rank maps every staging
        self.devices = [SimDevice(self.memory, self.dtype, serial) for _ in range(size)]
        streams = {("rs", p): 10 + p for p in range(size)} | {("ag", p): 20 + p for p in range(size)}
        streams |= {"fold": 1, "collect": 2}
        self.engines = [AllToAllEngine(r, self.layout, addr, self.devices[r], streams) for r in range(size)]
        for r, engine in enumerate(self.engines):  # set-up: the fold tables, written once
            for slot in range(2):
                words = np.array(engine.fold_table(slot), dtype=np.uint64)
                assert len(words) == MAX_RANKS
                table = self.memory.bytes(addr(r, self.layout.fold_table(slot)), 8 * MAX_RANKS)
                table[...] = words.view(np.uint8)
        self.next_buffer = size
        self.tracers = [AllToAllTracer(SimMarks(d)) for d in self.devices]  # used by via="traced"
        self.executors: list = []
        if via == "compiled":
            module = executor_module()
            memops = StreamMemOps(0, bench.FakeDriver(bench.DriverCalls()))  # the flags only
            for device in self.devices:
                forward = bench.Forwarding(device)
                self.executors.append(bench.Executor(module, memops, 256, 64, bench.GUARD, forward.addresses,
                                                     keep=forward))

    def enqueue(self, rank: int, plan: AllToAllPlan, input_addr: int, output_addr: int) -> None:
        """Rank ``rank``'s part of ``plan``, enqueued :attr:`via` its way."""
        engine, device, item = self.engines[rank], self.devices[rank], self.dtype.itemsize
        if self.via == "reference":
            engine.enqueue(plan, input_addr, output_addr, item)
        elif self.via == "program":
            engine.enqueue_program(plan, input_addr, output_addr, item,
                                   lambda p, i, o, s, g: p.issue(device, i, o, s, g))
        elif self.via == "traced":
            issue_traced(engine, self.tracers[rank], CALL_STREAM, plan, input_addr, output_addr, item)
        else:
            issue_call(engine, self.executors[rank], plan, input_addr, output_addr, item, bench.FUNCTION)

    def buffer(self, array: np.ndarray) -> int:
        """Place ``array``'s bytes in simulated memory; its address."""
        addr = self.memory.add(self.next_buffer, array.nbytes)
        self.memory.bytes(addr, array.nbytes)[...] = array.view(np.uint8)
        self.next_buffer += 1
        return addr

    def read(self, addr: int, count: int) -> np.ndarray:
        return self.memory.bytes(addr, count * self.dtype.itemsize).view(self.dtype).copy()

    def run_all(self, rng: np.random.Generator, op: str) -> None:
        queues = [(d, s) for d in self.devices for s in d.queues]
        while queues:
            runnable = [(d, s) for d, s in queues if d.ready(d.queues[s][0])]
            if not runnable:
                raise AssertionError("deadlock: every stream waits")
            d, s = runnable[rng.integers(len(runnable))]
            d.run(d.queues[s].popleft(), op)
            if not d.queues[s]:
                del d.queues[s]
                queues.remove((d, s))


def draw(rng: np.random.Generator, dtype: np.dtype, count: int) -> np.ndarray:
    if dtype.kind == "f" or dtype == ml_dtypes.bfloat16:
        return rng.standard_normal(count).astype(dtype)
    return rng.integers(-1000, 1000, count).astype(dtype)


def one_call(node: Node, phase: Phase, block: int, extra: int, in_place: bool, op: str,
             rng: np.random.Generator) -> None:
    n, dtype = node.size, node.dtype
    count = n * block + (extra if phase is Phase.ALLREDUCE else 0)
    inputs = [draw(rng, dtype, block if phase is Phase.ALLGATHER else count) for _ in range(n)]
    if phase is Phase.ALLREDUCE:
        want = [reference(inputs, op)] * n
    elif phase is Phase.REDUCE_SCATTER:
        total = reference(inputs, op)
        want = [total[r * block:(r + 1) * block] for r in range(n)]
    else:
        want = [np.concatenate(inputs)] * n
    out_count = block if phase is Phase.REDUCE_SCATTER and not in_place else count
    outs, ins = [], []
    for r in range(n):
        out = np.zeros(out_count, dtype) + draw(rng, dtype, out_count)  # stale data, not the answer
        if in_place:
            if phase is Phase.ALLGATHER:
                out[r * block:(r + 1) * block] = inputs[r]
            else:
                out = inputs[r].copy()
        outs.append(node.buffer(out))
        ins.append(outs[-1] if in_place else node.buffer(inputs[r]))
    chunk = node.engines[0].chunk(dtype.itemsize)
    chunk = int(rng.integers(1, chunk + 1))  # pieces of any size up to an area
    plan = AllToAllPlan(n, count, chunk, phase, in_place)
    for r in range(n):
        node.enqueue(r, plan, ins[r], outs[r])
    node.run_all(rng, op)
    for r in range(n):
        got = node.read(outs[r], len(want[r]))
        assert got.tobytes() == want[r].tobytes(), (
            f"rank {r}, {phase.value}, in place {in_place}, count {count}, chunk {chunk}: "
            f"{int((got != want[r]).sum())} of {len(got)} elements differ")
        if not in_place:
            assert node.read(ins[r], len(inputs[r])).tobytes() == inputs[r].tobytes(), "an input was written"


CALL = st.tuples(st.sampled_from(list(Phase)), st.integers(0, 40), st.integers(0, 7), st.booleans())


@settings(max_examples=200, deadline=None)
@given(size=st.integers(2, 6), dtype=st.sampled_from(["float32", "float16", "bfloat16", "int32", "float64"]),
       op=st.sampled_from(["sum", "max", "min", "prod"]),
       calls=st.lists(CALL, min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1),
       via=st.sampled_from(VIAS))
def test_the_engine_gives_the_rank_ordered_result_in_any_order(size, dtype, op, calls, seed, via) -> None:
    rng = np.random.default_rng(seed)
    dt = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    node = Node(size, 256, dt, via=via)
    for phase, block, extra, in_place in calls:
        one_call(node, phase, block, extra, in_place, op, rng)


@settings(max_examples=60, deadline=None)
@given(size=st.integers(2, 6), calls=st.lists(CALL, min_size=1, max_size=4), seed=st.integers(0, 2**32 - 1),
       via=st.sampled_from(VIAS))
def test_the_engine_enqueues_an_order_that_completes_on_one_queue_per_gpu(size, calls, seed, via) -> None:
    """Every stream of a GPU on one hardware queue, run in the order the engine enqueued: no
    deadlock (the engine follows the plan's issue order), exact results."""
    rng = np.random.default_rng(seed)
    node = Node(size, 256, np.dtype(np.float32), serial=True, via=via)
    for phase, block, extra, in_place in calls:
        one_call(node, phase, block, extra, in_place, "sum", rng)


@pytest.mark.parametrize("via", VIAS)
def test_many_rounds_and_calls_at_eight_ranks(via: str) -> None:
    """Blocks of many areas each, calls one after the other: slots reused across calls."""
    rng = np.random.default_rng(8)
    node = Node(8, 256, np.float32, via=via)
    for k in range(6):
        one_call(node, list(Phase)[k % 3], 64 * 5 + k, k, k % 2 == 1, "sum", rng)
    assert node.engines[0].done.scatter > 20


def test_a_plan_that_does_not_fit_the_staging_is_refused() -> None:
    node = Node(3, 256, np.float32)
    with pytest.raises(ValueError, match="does not fit"):
        node.engines[0].enqueue(AllToAllPlan(3, 999, 65), 0, 0, 4)  # 65 elements: over 256 bytes
    with pytest.raises(ValueError, match="does not fit"):
        node.engines[0].enqueue(AllToAllPlan(4, 999, 8), 0, 0, 4)


def test_the_layout_keeps_areas_and_flags_apart() -> None:
    for ranks in range(2, MAX_RANKS + 1):
        lay = AllToAllLayout(ranks, 1 << 20)
        words = [lay.flag(name, i) for name in ("arrived", "inbound_free", "gathered", "gather_free")
                 for i in range(ranks)] + [lay.flag("folded"), lay.flag("pushed")]
        assert len(set(words)) == len(words) and max(words) + 8 <= lay.flags_end <= lay.fold_table(0)
        per_holder: dict[int, list[int]] = {}
        for h in range(ranks):
            for s in range(2):
                for p in range(ranks):
                    if p != h:
                        per_holder.setdefault(h, []).extend([lay.inbound(h, s, p), lay.gather(h, s, p)])
        for offs in per_holder.values():  # a holder's areas: distinct, disjoint, inside the staging
            offs.sort()
            assert len(set(offs)) == 4 * (ranks - 1)
            assert all(b - a >= lay.area_bytes for a, b in zip(offs, offs[1:], strict=False))
            assert offs[0] >= lay.control_bytes and offs[-1] + lay.area_bytes <= lay.used_bytes
        assert lay.release_ranges() == [(0, lay.flags_end)]
    with pytest.raises(ValueError):
        AllToAllLayout(1, 1 << 20)
    with pytest.raises(ValueError):
        AllToAllLayout(4, 100)
    assert AllToAllLayout(4, 8 << 20).alloc_bytes == 98 << 20  # the memory the docs state


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_missing_rank_is_named_by_every_peer_stuck_on_it(size: int, phase: Phase) -> None:
    """One rank never enqueues its part of call 2: the others run until nothing can move, and
    the diagnosis of each, from its own flags as the watchdog reads them, names that rank."""
    rng = np.random.default_rng(size)
    node = Node(size, 256, np.dtype(np.float32))
    one_call(node, Phase.ALLREDUCE, 70, 1, False, "sum", rng)  # a first call: flags carry over
    victim, block = size - 1, 150
    count = size * block
    plan = AllToAllPlan(size, count, 64, phase)
    before = node.engines[0].done
    for r, engine in enumerate(node.engines):
        if r != victim:
            n_in = block if phase is Phase.ALLGATHER else count
            out = block if phase is Phase.REDUCE_SCATTER else count
            ins, outs = node.buffer(np.ones(n_in, np.float32)), node.buffer(np.zeros(out, np.float32))
            engine.enqueue(plan, ins, outs, 4)
    with pytest.raises(AssertionError, match="deadlock"):
        node.run_all(rng, "sum")
    for r, engine in enumerate(node.engines):
        if r == victim:
            continue
        words = node.memory.bytes(engine.addr(r, 0), node.layout.flags_end).view(np.uint64)
        err = engine.stall_error(plan, before, tuple(int(w) for w in words), 1.0, "hint")
        assert err.peer == victim and f"waiting for rank {victim} " in str(err), str(err)
        assert str(err).startswith(f"rank {r} timed out after 1 s in the ce-twoshot algorithm"), str(err)


@pytest.mark.parametrize("size", [2, 3, 4])
@pytest.mark.parametrize("flag, phase, in_place", [("folded", Phase.ALLREDUCE, False),
                                                   ("pushed", Phase.REDUCE_SCATTER, True)])
def test_a_rank_stuck_on_its_own_work_names_no_peer(size: int, flag: str, phase: Phase,
                                                    in_place: bool) -> None:
    """Where the first wait a rank's flags leave unmet is for its own work (its fold; in an
    in-place reduce-scatter, its push of block 0's piece, which the fold overwrites): the
    diagnosis blames no peer and says the GPU is busy or hung; where no wait is unmet, it says
    that too."""
    rng = np.random.default_rng(size)
    node = Node(size, 256, np.dtype(np.float32))
    one_call(node, Phase.ALLREDUCE, 70, 1, False, "sum", rng)  # a first call: flags carry over
    engine = node.engines[1]  # (rank 0 never waits for its own push: block 0 is its own)
    plan, before = AllToAllPlan(size, size * 150, 64, phase, in_place=in_place), engine.done
    satisfied = [1 << 62] * (node.layout.flags_end // 8)
    err = engine.stall_error(plan, before, tuple(satisfied), 1.0, "hint")
    assert err.peer is None and "no wait for a peer is pending: the GPU is busy or hung" in str(err), str(err)
    own = [op for _, op in plan.issue_order(1, before) if getattr(op, "flag", ("",))[0] == flag]
    assert own, f"the plan waits for {flag}"
    words = list(satisfied)
    for op in own:
        words[node.layout.flag(flag, op.flag[2]) // 8] = 0
    err = engine.stall_error(plan, before, tuple(words), 1.0, "hint")
    assert err.peer is None and "this rank's own" in str(err) and "busy or hung" in str(err), str(err)
    assert err.seq == own[0].value
