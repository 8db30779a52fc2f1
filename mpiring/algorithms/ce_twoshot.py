"""``ce-twoshot``: the all-to-all two-shot on copy engines, for nodes where every GPU reaches
every other directly (NVLink through NVSwitch).

Each rank owns one block of the message (the ring's split). Round by round, every rank pushes
its piece of every other owner's block into that owner's staging with a copy engine, to all
peers at once (one stream per peer); the owner folds the ``n`` pieces in rank order with
``csrc/fold_n.cu`` (widened, rounded once: the bits of oneshot and twoshot) while the next
round's pushes run; then it pushes the reduced piece into every peer's staging, and each rank
copies the pieces it gathered into its output. The SMs do only the fold: it reads the ``n``
copies once and writes one, ``(n + 1) / n`` of the message in memory traffic per rank (the
ring's folds: about ``3 (n - 1) / n``). The copies, waits and signals are copy-engine copies and
stream memory operations: the host enqueues a call and returns.

* schedule: :mod:`mpiring.ring.alltoall_schedule` (pure data; every interleaving tested);
* device work: :mod:`mpiring.ring.alltoall_engine` (tested over simulated GPUs);
* staging: :mod:`mpiring.cuda.alltoall_layout`, a second IPC allocation per rank made at the
  row's first call (collective: every rank's first call of the row is the same call), of
  ``4 (n - 1)`` areas of ``MPIRING_CE_AREA_MIB`` (:func:`area_bytes`; 32 MiB by default: 130 MiB
  per rank on 2 GPUs, 386 MiB on 4, 898 MiB on 8);
* the host path: a call's operations (about ``4 (n - 1) + 7`` per round: waits, writes,
  copies, one fold) are issued by one C call (:class:`~mpiring.cuda.streamprog.Executor`) from
  the call shape's program (:meth:`~mpiring.ring.alltoall_engine.AllToAllEngine.program`),
  else one Python driver call each (:meth:`AllToAllEngine.enqueue
  <mpiring.ring.alltoall_engine.AllToAllEngine.enqueue>`, the reference);
* its timeline: inside :func:`mpiring.trace.alltoall_timeline` the communicator's
  :func:`trace_hook` holds a tracer, and each call is issued by the Python walk with a CUDA
  event before and after each operation (:func:`issue_traced`); otherwise a call tests that
  one attribute and nothing more;
* a stall: the communicator's watchdog follows each call and, past the timeout, aborts the
  communicator, releasing this staging's flags too (the fold then writes nothing).

Not capturable in a CUDA graph: a call's flag values are fixed when it is enqueued. Serves
``Reduce_scatter_block`` and ``Allgather`` with the same schedule's phases.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..core import settings
from ..core.ops import Op
from ..cuda import sources, streamprog
from ..cuda.alltoall_layout import AllToAllLayout
from ..cuda.grids import fold_blocks
from ..cuda.launcher import PackedLaunch, function_handle
from ..cuda.memops import StreamMemOps
from ..cuda.resources import LIVE
from ..cuda.staging import IpcStaging
from ..cuda.status import ABORT_HINT
from ..cuda.streamprog import FOLD_PARAMS, fold_grid
from ..cuda.watchdog import FlagReader
from ..ring.alltoall_engine import AllToAllEngine
from ..ring.alltoall_schedule import AllToAllPlan
from ..ring.alltoall_tracing import AllToAllTracer, TraceHook
from ..ring.schedule import Phase
from ..ring.transports.cuda_ipc import high_priority_stream
from .base import GPU, Algorithm, Call, CallShape, SmWork

if TYPE_CHECKING:
    from ..context.base import Backend
    from ..context.gpu import GpuBackend

log = logging.getLogger(__name__)
NAME = "ce-twoshot"
HOOK = "ce-twoshot trace hook"  # the backend's state that holds the row's TraceHook
CODE = 12
THREADS = 256
_SOURCE = "fold_n.cu"


def area_bytes(environ: dict[str, str] | None = None) -> int:
    """One staging area (one round's piece per peer), from ``MPIRING_CE_AREA_MIB``: a power of two
    from 1 to 64 MiB (default 32: on 2 and 4 H200s fewer, larger rounds ran faster than 8 MiB
    ones from 16 MiB on 2 GPUs and from 256 MiB on 4, at four times the memory). Every rank
    must give the same: the communicator's set-up compares it (``Options.setup_values``), and
    so does the staging's (the ranks' layouts)."""
    return cast(int, settings.get("MPIRING_CE_AREA_MIB", environ)) << 20


@functools.cache
def _fold_function(dtype: str, op: Op) -> int:
    """The ``CUfunction`` of ``fold_n`` for ``dtype`` and ``op``, compiled alone at first use."""
    import cupy

    name = sources.kernel_name("fold_n", dtype, op)
    module = cupy.RawModule(code=sources.source(_SOURCE), options=sources.OPTIONS, name_expressions=[name])
    return function_handle(module.get_function(name))


def fold_guard(gpu: GpuBackend) -> tuple[int, int]:
    """``fold_n``'s last parameters: the communicator's abort word and its host status block."""
    staging, status = gpu.staging, gpu.status
    assert staging is not None and status is not None  # made with the context
    return staging.addr(staging.rank, gpu.layout.abort), status.ptr


class CudaDevice:
    """:class:`mpiring.ring.alltoall_engine.Device` on CUDA: stream memory operations and
    copy-engine copies (``memops``), ``fold_n`` launches (``launch``, with the last arguments
    ``guard``, at most ``max_blocks`` blocks). :meth:`prepare` fixes the call's kernel and item
    size."""

    def __init__(self, memops: StreamMemOps, launch: PackedLaunch, guard: tuple[int, int],
                 max_blocks: int) -> None:
        self._memops, self._launch, self._guard, self._max_blocks = memops, launch, guard, max_blocks
        self._fn, self._itemsize = 0, 1

    def prepare(self, fn: int, itemsize: int) -> None:
        self._fn, self._itemsize = fn, itemsize

    def wait_geq(self, stream: int, addr: int, value: int) -> None:
        self._memops.wait_geq(stream, addr, value)

    def write(self, stream: int, addr: int, value: int) -> None:
        self._memops.write(stream, addr, value)

    def copy(self, stream: int, dst: int, src: int, nbytes: int) -> None:
        self._memops.copy(stream, dst, src, nbytes)

    def fold(self, stream: int, out: int, mine: int, table: int, me: int, ranks: int, count: int) -> None:
        if count == 0:
            return
        blocks, vectorized = fold_grid(out, mine, count, self._itemsize, THREADS, self._max_blocks)
        self._launch(self._fn, blocks, stream, out, mine, table, me, ranks, count, int(vectorized),
                     *self._guard)


class _State:
    """What the row keeps per communicator (made at its first call): its staging, streams,
    events and engine. Closed with the communicator (:meth:`close`)."""

    def __init__(self, gpu: GpuBackend) -> None:
        import cupy

        self._rt = rt = cupy.cuda.runtime
        self.gpu = gpu
        self._hook = trace_hook(gpu)  # a tracer there: calls are issued by the traced Python walk
        me, n = gpu.node_rank, gpu.node_size
        self.layout = AllToAllLayout(n, area_bytes())
        # Collective (every rank's first call of the row is the same call: the agreement check
        # saw to it) and bounded; a failure is the same SetupError on every rank.
        self.staging = IpcStaging(gpu.groups.node, self.layout, gpu.timeouts.seconds)
        self._streams: dict[Any, Any] = {}
        self._distinct: list[Any] = []
        self._start, self._ends = 0, []
        try:
            guard = fold_guard(gpu)
            self.device = CudaDevice(gpu.memops, PackedLaunch(FOLD_PARAMS, THREADS), guard,
                                     gpu.kernel.max_blocks)
            # One C call per call where the extension is built (MPIRING_HOTPATH=0: never).
            self.executor = make_executor(gpu.memops, guard, gpu.kernel.max_blocks)
            peers = [p for p in range(n) if p != me]
            # One copy stream pushed at 385 GB/s on 4 x H200 where three at once moved 236 GB/s
            # together (tools.ce_patterns): by default each phase's pushes share one stream. The
            # issue order is safe either way (it completes on one queue per GPU).
            if settings.text("MPIRING_CE_PUSH_STREAMS") == "peer":
                streams: dict[Any, Any] = {("rs", p): cupy.cuda.Stream(non_blocking=True) for p in peers}
                streams.update({("ag", p): cupy.cuda.Stream(non_blocking=True) for p in peers})
            else:
                rs, ag = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
                streams = {("rs", p): rs for p in peers} | {("ag", p): ag for p in peers}
            streams["fold"] = high_priority_stream(cupy)  # beside a GEMM a fold must not wait long
            streams["collect"] = cupy.cuda.Stream(non_blocking=True)
            self._streams = streams
            self._distinct = list({id(x): x for x in streams.values()}.values())  # each stream once
            LIVE["streams"] += len(self._distinct)
            local = rt.eventDisableTiming
            self._start = rt.eventCreateWithFlags(local)
            LIVE["events"] += 1
            for _ in self._distinct:
                self._ends.append(rt.eventCreateWithFlags(local))
                LIVE["events"] += 1
            self.engine = AllToAllEngine(me, self.layout, self.staging.addr, self.device,
                                         {key: s.ptr for key, s in self._streams.items()})
            for slot in range(2):  # the fold tables: written once, the areas never move
                words = np.array(self.engine.fold_table(slot), dtype=np.uint64)
                rt.memcpy(self.staging.addr(me, self.layout.fold_table(slot)), words.ctypes.data,
                          words.nbytes, rt.memcpyHostToDevice)
            assert gpu.watchdog is not None  # made with the context, before any call
            gpu.watchdog.also_release(self.staging)  # an abort must end this staging's waits too
            self._reader = FlagReader(self.staging, self.layout.flags_end, lambda w: tuple(int(x) for x in w))
        except BaseException:
            self.close(abandon=True)  # peers may have succeeded: wait for no one
            raise

    def enqueue(self, plan: AllToAllPlan, call: Call, stream: Any) -> None:
        """``plan`` on this rank's streams, after what ``stream`` holds; ``stream`` then waits
        for all of it. The watchdog follows the call."""
        rt, recv, watchdog = self._rt, call.recv, self.gpu.watchdog
        assert watchdog is not None  # made with the context, before any call
        function = _fold_function(recv.dtype.name, call.op)
        self.device.prepare(function, recv.dtype.itemsize)
        pair = watchdog.events()
        rt.eventRecord(pair[0], stream.ptr)
        rt.eventRecord(self._start, stream.ptr)
        for s in self._distinct:
            rt.streamWaitEvent(s.ptr, self._start, 0)
        before = self.engine.done  # the rounds of the earlier calls: this call's flags go on from there
        try:
            tracer = self._hook.tracer  # the only test of tracing (mpiring.trace.alltoall_timeline)
            if tracer is None:
                issue_call(self.engine, self.executor, plan, call.source.address, recv.address,
                           recv.dtype.itemsize, function)
            else:
                issue_traced(self.engine, tracer, stream.ptr, plan, call.source.address, recv.address,
                             recv.dtype.itemsize)
        except BaseException:
            watchdog.give_back(pair)
            raise
        finally:
            for s, end in zip(self._distinct, self._ends, strict=True):
                rt.eventRecord(end, s.ptr)
                rt.streamWaitEvent(stream.ptr, end, 0)
        rt.eventRecord(pair[1], stream.ptr)
        engine, timeout, names = self.engine, self.gpu.timeouts.seconds, self.gpu.groups.node_ranks
        # The watchdog reads this staging's flags: they move as the call does (progress), and
        # where they stop says which peer is late.
        diagnose = lambda words: engine.stall_error(plan, before, cast(tuple, words), timeout,  # noqa: E731
                                                    ABORT_HINT, names)
        watchdog.watch(pair, before.scatter + before.gather, diagnose, reader=self._reader, algorithm=NAME)

    @property
    def compiled(self) -> bool:
        """Whether calls are issued by the compiled executor (else by the Python reference)."""
        return self.executor is not None

    def close(self, abandon: bool = False) -> None:
        """Drop the streams and events (the context drained the calls first) and close the
        staging (collective, bounded; ``abandon``: keep our allocation, wait for no one)."""
        for event in (self._start, *self._ends):
            if event:
                self._rt.eventDestroy(event)
                LIVE["events"] -= 1
        self._start, self._ends = 0, []
        LIVE["streams"] -= len(self._distinct)
        self._streams.clear()
        self._distinct = []
        self.staging.close(abandon=abandon)


def make_executor(memops: StreamMemOps, guard: tuple[int, int], max_blocks: int,
                  environ: dict[str, str] | None = None) -> streamprog.Executor | None:
    """The compiled executor of this row's programs, or None where calls go through the Python
    reference (the extension is not built, ``MPIRING_HOTPATH=0``, no ``libcuda.so.1``)."""
    module = streamprog.compiled(environ)
    if module is None:
        return None
    try:
        return streamprog.Executor(module, memops, THREADS, max_blocks, guard)
    except OSError as err:  # no driver library to call: the Python reference issues the calls
        log.warning("ce-twoshot's compiled stream programs are off: %s", err)
        return None


def issue_call(engine: AllToAllEngine, executor: streamprog.Executor | None, plan: AllToAllPlan,
               input_addr: int, output_addr: int, itemsize: int, function: int) -> None:
    """Enqueue ``plan`` on ``engine``'s streams: through its program and ``executor`` where there
    is one, else by the engine's Python path (its device prepared for ``function`` already)."""
    if executor is None:
        engine.enqueue(plan, input_addr, output_addr, itemsize)
        return
    run = executor.run
    engine.enqueue_program(plan, input_addr, output_addr, itemsize,
                           lambda program, i, o, s, g: run(program, i, o, s, g, function))


def issue_traced(engine: AllToAllEngine, tracer: AllToAllTracer, call_stream: int, plan: AllToAllPlan,
                 input_addr: int, output_addr: int, itemsize: int) -> None:
    """What :func:`issue_call` enqueues, by the engine's Python walk, with ``tracer``'s marks
    (:mod:`mpiring.ring.alltoall_tracing`): the call's reference mark on ``call_stream`` (after
    the start event its streams wait for), which every one of its streams waits for too, then a
    mark before and after each operation on the operation's stream (the engine's device
    prepared for the call's fold already)."""
    tracer.begin(call_stream, engine.streams.values())
    engine.enqueue(plan, input_addr, output_addr, itemsize, tracer)


def trace_hook(backend: Backend) -> TraceHook:
    """The communicator's :class:`~mpiring.ring.alltoall_tracing.TraceHook`, which this row's
    calls read (made at the first ask, per rank: nothing collective, no staging)."""
    return backend.state(HOOK, TraceHook)


def _run(backend: Backend, call: Call, phase: Phase) -> None:
    gpu = cast("GpuBackend", backend)
    recv, n = call.recv, gpu.node_size
    stream = gpu.ordered_stream()
    in_place = call.send is None
    if phase is Phase.ALLREDUCE:
        count = recv.count
    elif phase is Phase.REDUCE_SCATTER:  # the input holds n blocks; in place, recv does
        count = recv.count if in_place else call.source.count
    else:  # all-gather: the output holds n blocks
        count = recv.count
    if count == 0:
        return
    if n == 1:  # one rank: the result is the input
        if not in_place:
            gpu.copy(recv.address, call.source.address, call.source.nbytes, stream)
        return
    state = gpu.state(NAME, lambda: _State(gpu))
    chunk = state.engine.chunk(recv.dtype.itemsize)
    state.enqueue(AllToAllPlan(n, count, chunk, phase, in_place), call, stream)


def sm_work(shape: CallShape) -> SmWork:
    """ce-twoshot's SM work: only ``fold_n`` runs on SMs, one launch per round, whose largest
    grid is stated (copy engines move everything else; nothing on one rank, where the call is a
    copy). The fold of each round reads the ``n`` pieces of this rank's block (its own from its
    input, the peers' from its staging: local) and writes one, into its output: over the ranks
    ``(n + 1) / n`` bytes per byte (0 on one rank)."""
    n, count = shape.ranks, shape.count
    traffic = ((n + 1) / n if n > 1 else 0.0) if count else None
    if n < 2 or not count:
        return SmWork(0, traffic)
    if shape.grids is None:
        return SmWork(None, traffic)
    plan = AllToAllPlan(n, count, area_bytes() // shape.itemsize)
    most = 0
    for owner in range(n):
        for k in range(plan.rounds):
            lo, hi = plan.piece(owner, k)
            if hi > lo:  # the staging is aligned and the buffers taken as 16-byte aligned
                vectorized = lo * shape.itemsize % 16 == 0
                most = max(most, fold_blocks(hi - lo, shape.itemsize, vectorized, shape.grids.fold_cap,
                                             THREADS))
    return SmWork(most, traffic)


def run(backend: Backend, call: Call) -> None:
    _run(backend, call, Phase.ALLREDUCE)


def reduce_scatter(backend: Backend, call: Call) -> None:
    _run(backend, call, Phase.REDUCE_SCATTER)


def allgather(backend: Backend, call: Call) -> None:
    _run(backend, call, Phase.ALLGATHER)


ROW = Algorithm(
    NAME, CODE, GPU, run,
    summary="all-to-all two-shot on copy engines: every rank pushes each owner's piece to it at "
            "once, the owner folds the n pieces in rank order (one kernel), then pushes the "
            "result to every rank; GPU-signalled",
    best_for="large messages on NVSwitch nodes, leaving the SMs to compute",
    # Every element is reduced in rank order (csrc/fold_n.cu), but the row is not marked
    # rank_ordered: reproducible=True would then run it (the only GPU row with a reduce-scatter),
    # and the GPU test of every allowed row's bits (tests/gpu/test_gpu_reproducible.py) has not.
    reduce_scatter=reduce_scatter, allgather=allgather, sm_work=sm_work,
)
