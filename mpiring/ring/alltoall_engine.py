"""The all-to-all copy-engine two-shot's schedule (:mod:`.alltoall_schedule`) turned into device
work: every operation of a rank's plan, enqueued on that operation's stream.

* ``Wait(flag, v)``: a stream memory operation that holds the stream until ``flag >= v``;
* ``Signal(flag, v)``: a stream memory operation that writes ``v`` once the stream's earlier
  work is done (behind a system-wide fence: a peer that sees the flag sees the data);
* ``Copy``: a copy-engine copy (``cudaMemcpyAsync``) from this rank's buffers or staging into
  a peer's staging, or from this rank's staging into its output;
* ``Fold``: ``csrc/fold_n.cu``, the rank-ordered fold of this rank's own piece and its peers'
  pieces in the inbound areas of one slot.

Addresses come from :class:`~mpiring.cuda.alltoall_layout.AllToAllLayout` and the staging's
``addr(rank, offset)`` (each peer's staging mapped here through CUDA IPC). The engine holds no
CUDA object itself: a :class:`Device` does the enqueuing, so the CPU tests run the very same
engine over simulated memory and streams (``tests/test_alltoall_engine.py``), every
interleaving the streams allow, against the rank-ordered reference.

The rounds each stage ran (:class:`~.alltoall_schedule.Rounds`) carry over from call to call:
flags only grow, and a slot is reused two rounds later whatever call that round belongs to.

Two ways to enqueue a call, the same operations in the same order:

* :meth:`AllToAllEngine.enqueue` walks the plan's issue order and calls the :class:`Device` once
  per operation: the reference (and the path wherever no compiled executor runs, or a tracer
  marks each operation: :class:`OpTrace`, :mod:`.alltoall_tracing`);
* :meth:`AllToAllEngine.enqueue_program` issues the call's :class:`~mpiring.cuda.streamprog.Program`
  (:meth:`AllToAllEngine.program`): the issue order compiled once per call shape into records
  where only the call's buffers and the rounds before it are left open. A flag's value is an
  offset from the rounds of its stage (:data:`~.alltoall_schedule.GATHER_FLAGS`), an input or
  output address an offset from the call's buffer; the staging's addresses are fixed. What else
  depends on the rounds before the call, the slots (their parity) and which "slot free" waits
  are dropped (the first two rounds'), is in the cache's key: the rounds, or for 2 and more,
  2 plus their parity. The cache keeps :data:`PROGRAMS_KEPT` programs and at most
  :data:`PROGRAM_BYTES_KEPT` bytes of them, least recently used out first (64 bytes per
  operation: a 32 MiB round at 4 ranks is 38 operations, an 8 GiB call 256 rounds, 608 KiB).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from ..core.errors import MpiringTimeoutError
from ..cuda import streamprog
from ..cuda.alltoall_layout import FLAG_ARRAYS, AllToAllLayout
from ..cuda.layout import MAX_RANKS
from ..cuda.streamprog import Program
from .alltoall_schedule import (
    GATHER_FLAGS,
    SLOTS,
    AllToAllPlan,
    Copy,
    Flag,
    Fold,
    Operation,
    Region,
    Rounds,
    Signal,
    Stream,
    Wait,
)

PROGRAMS_KEPT = 32  # call shapes whose programs an engine keeps
PROGRAM_BYTES_KEPT = 64 << 20  # ... and the most bytes of them (the newest is kept whatever its size)
# Issues a program: (program, input address, output address, scatter rounds, gather rounds).
Issue = Callable[[Program, int, int, int, int], None]

# What a wait on each flag waits for, in a timeout's words ({peer}: the rank it names).
WAITS_FOR = {
    "arrived": "rank {peer} to push its piece of this rank's block (round {use})",
    "inbound_free": "rank {peer} to fold round {use}, freeing this rank's area there",
    "gathered": "rank {peer} to push its reduced piece (round {use})",
    "gather_free": "rank {peer} to collect round {use}, freeing this rank's area there",
    "folded": "this rank's own fold of round {use} (no peer is late: the GPU is busy or hung)",
    "pushed": "this rank's own push of block 0's piece of round {use} (the GPU is busy or hung)",
}


class Device(Protocol):
    """What the engine asks of a device, per stream (handles are ints)."""

    def wait_geq(self, stream: int, addr: int, value: int) -> None: ...

    def write(self, stream: int, addr: int, value: int) -> None: ...

    def copy(self, stream: int, dst: int, src: int, nbytes: int) -> None: ...

    def fold(self, stream: int, out: int, mine: int, table: int, me: int, ranks: int, count: int) -> None:
        """``out[:count] = the ranks' pieces in rank order``: ``mine`` for rank ``me``, entry
        ``r`` of the device table at ``table`` for every other rank ``r``."""
        ...


class OpTrace(Protocol):
    """What :meth:`AllToAllEngine.enqueue` tells a tracer (:mod:`.alltoall_tracing`): a mark on
    an operation's stream before and after it is enqueued, and what the operation was."""

    def mark(self, stream: int) -> Any:
        """A mark on ``stream``, reached once the work enqueued there so far ran."""
        ...

    def add(self, stream: Stream, k: int, op: Operation, before: Any, after: Any) -> None:
        """``op`` of round ``k`` was enqueued on the plan's ``stream`` between these marks."""
        ...


class AllToAllEngine:
    """Enqueues the calls of one communicator's all-to-all two-shot on this rank.

    Args:
        rank: this rank's place in the node (the staging's rank).
        layout: the staging's layout (the same on every rank).
        addr: ``addr(rank, offset)``: the address, mapped here, of ``offset`` in ``rank``'s staging.
        device: what enqueues (:class:`Device`).
        streams: the stream handle of each of the plan's streams (``("rs", peer)``,
            ``("ag", peer)``, ``"fold"``, ``"collect"``).
    """

    def __init__(self, rank: int, layout: AllToAllLayout, addr: Callable[[int, int], int],
                 device: Device, streams: Mapping[Stream, int]) -> None:
        self.rank, self.layout, self.addr, self.device = rank, layout, addr, device
        self.streams = dict(streams)
        self.done = Rounds()  # rounds every stage ran in this communicator's earlier calls
        self._programs: OrderedDict[tuple, Program] = OrderedDict()  # least recently used first
        self._program_bytes = 0

    def fold_table(self, slot: int) -> list[int]:
        """The words of this rank's fold table of ``slot`` (:meth:`AllToAllLayout.fold_table`),
        which set-up writes once: entry ``r`` the address of ``r``'s inbound area, 0 for this rank
        and past the node's ranks."""
        me, lay = self.rank, self.layout
        return [0 if r == me or r >= lay.ranks else self.addr(me, lay.inbound(me, slot, r))
                for r in range(MAX_RANKS)]

    def chunk(self, itemsize: int) -> int:
        """Elements of one round's piece: what one staging area holds."""
        return self.layout.area_bytes // itemsize

    def _check_fits(self, plan: AllToAllPlan, itemsize: int) -> None:
        if plan.size != self.layout.ranks or plan.chunk > self.chunk(itemsize):
            raise ValueError(f"a plan of {plan.size} ranks and pieces of {plan.chunk} elements does not fit "
                             f"this staging ({self.layout.ranks} ranks, {self.chunk(itemsize)} elements)")

    def enqueue(self, plan: AllToAllPlan, input_addr: int, output_addr: int, itemsize: int,
                trace: OpTrace | None = None) -> None:
        """Enqueue ``plan`` for this rank on the engine's streams (the caller orders them after
        its own stream before, and its stream after them). ``trace``: a mark on each
        operation's stream before and after each operation the device is asked for (an empty
        copy is not), told to ``trace.add`` (:mod:`mpiring.ring.alltoall_tracing`)."""
        self._check_fits(plan, itemsize)
        buffers = {"input": input_addr, "output": output_addr}
        # In the plan's issue order (round by round), not stream by stream: streams may share
        # a hardware queue, and only this order cannot deadlock then (AllToAllPlan.issue_order).
        for k, key, op in plan.issue_rounds(self.rank, self.done):
            if isinstance(op, Copy) and not op.elements:
                continue  # nothing to copy: nothing issued
            stream = self.streams[key]
            before = None if trace is None else trace.mark(stream)
            if isinstance(op, Wait):
                self.device.wait_geq(stream, self._flag(op.flag), op.value)
            elif isinstance(op, Signal):
                self.device.write(stream, self._flag(op.flag), op.value)
            elif isinstance(op, Copy):
                self.device.copy(stream, self._region(op.dst, buffers, itemsize),
                                 self._region(op.src, buffers, itemsize), op.elements * itemsize)
            elif isinstance(op, Fold):
                self._fold(stream, op, buffers, itemsize)
            else:  # pragma: no cover - the schedule has no other operation
                raise TypeError(f"unknown operation {op!r}")
            if trace is not None:
                trace.add(key, k, op, before, trace.mark(stream))
        # Every rank's plan counts the same rounds: the next call's flags go on from here.
        self.done = plan.after(self.done)

    def enqueue_program(self, plan: AllToAllPlan, input_addr: int, output_addr: int, itemsize: int,
                        issue: Issue) -> None:
        """What :meth:`enqueue` does, through ``plan``'s :meth:`program`: ``issue`` enqueues it
        (the compiled executor, or a reader of the records)."""
        self._check_fits(plan, itemsize)
        issue(self.program(plan, itemsize), input_addr, output_addr, self.done.scatter, self.done.gather)
        self.done = plan.after(self.done)  # as enqueue: only once every operation is enqueued

    def program(self, plan: AllToAllPlan, itemsize: int) -> Program:
        """``plan``'s operations for this rank after the rounds :attr:`done`, as a
        :class:`~mpiring.cuda.streamprog.Program`: made once per call shape and kept (the
        module docstring says what the key holds and how much is kept)."""
        key = (plan, itemsize, _canonical(self.done.scatter), _canonical(self.done.gather))
        found = self._programs.get(key)
        if found is not None:
            self._programs.move_to_end(key)
            return found
        made = self._build(plan, itemsize, Rounds(key[2], key[3]))
        self._programs[key] = made
        self._program_bytes += made.nbytes
        while len(self._programs) > PROGRAMS_KEPT or (self._program_bytes > PROGRAM_BYTES_KEPT
                                                      and len(self._programs) > 1):
            _, old = self._programs.popitem(last=False)
            self._program_bytes -= old.nbytes
        return made

    @property
    def programs_held(self) -> tuple[int, int]:
        """(programs, bytes of their records) in this engine's cache."""
        return len(self._programs), self._program_bytes

    def _build(self, plan: AllToAllPlan, itemsize: int, done: Rounds) -> Program:
        """The records of ``plan``'s issue order after ``done`` (what :meth:`enqueue` would call
        the device with, the call's buffers and rounds left open)."""
        rows: list[tuple[int, ...]] = []
        for key, op in plan.issue_order(self.rank, done):
            stream = self.streams[key]
            if isinstance(op, Wait | Signal):
                if isinstance(op, Wait):  # a device wait takes an unsigned value: none is for <= 0
                    assert op.value > 0, f"a wait for {op.value}: {op}"
                gather = op.flag[0] in GATHER_FLAGS
                base, offset = ((streamprog.GATHER, op.value - done.gather) if gather
                                else (streamprog.SCATTER, op.value - done.scatter))
                code = streamprog.WAIT if isinstance(op, Wait) else streamprog.WRITE
                rows.append((code, stream, streamprog.FIXED, self._flag(op.flag), base, offset, 0, 0))
            elif isinstance(op, Copy):
                if op.elements:  # as enqueue: an empty copy is not issued
                    rows.append((streamprog.COPY, stream, *self._place(op.dst, itemsize),
                                 *self._place(op.src, itemsize), op.elements * itemsize, 0))
            elif isinstance(op, Fold):
                rows.append((streamprog.FOLD, stream, *self._place(op.dst, itemsize),
                             *self._place(op.sources[self.rank], itemsize), self._fold_table(op),
                             op.elements))
            else:  # pragma: no cover - the schedule has no other operation
                raise TypeError(f"unknown operation {op!r}")
        records = np.array(rows, dtype=np.int64).reshape(len(rows), streamprog.WIDTH)
        return Program(records, self.rank, self.layout.ranks, itemsize)

    def _place(self, region: Region, itemsize: int) -> tuple[int, int]:
        """(base, offset) of ``region``'s first byte: the call's input or output and a byte
        offset in it, or :data:`~mpiring.cuda.streamprog.FIXED` and a staging address."""
        kind, holder, a, _ = region
        if kind in ("input", "output"):
            if holder != self.rank:
                raise ValueError(f"rank {self.rank} cannot address rank {holder}'s {kind}")
            return streamprog.INPUT if kind == "input" else streamprog.OUTPUT, a * itemsize
        return streamprog.FIXED, self._region(region, {}, itemsize)

    def stall(self, plan: AllToAllPlan, before: Rounds, words: Sequence[int]) -> tuple[Stream, Wait] | None:
        """Where a call of ``plan`` that began after the rounds ``before`` is stuck, given this
        rank's flags (``words``: its staging's first ``layout.flags_end`` bytes as 64-bit
        words; every flag a rank waits on lives in its own memory): the first wait of its
        issue order they do not satisfy, or None. Flags only grow, so the latest values say
        it all."""
        for stream, op in plan.issue_order(self.rank, before):
            if isinstance(op, Wait) and words[self._offset(op.flag) // 8] < op.value:
                return stream, op
        return None

    def stall_error(self, plan: AllToAllPlan, before: Rounds, words: Sequence[int], timeout: float,
                    hint: str, names: Sequence[int] | None = None) -> MpiringTimeoutError:
        """The timeout error of a call stuck as ``words`` say (:meth:`stall`); ``names[p]`` is
        the communicator rank at place ``p`` of the node."""
        name = list(names) if names is not None else list(range(self.layout.ranks))
        stuck = self.stall(plan, before, words)
        if stuck is None:
            busy = ("the ce-twoshot call to finish on the GPU (no wait for a peer is pending: the GPU "
                    "is busy or hung)")
            err = MpiringTimeoutError(name[self.rank], timeout, busy, hint=hint)
            return err.locate("in the ce-twoshot algorithm", algorithm="ce-twoshot")
        stream, wait = stuck
        flag, holder, peer = wait.flag
        own = flag in ("folded", "pushed")
        what = WAITS_FOR[flag].format(peer=name[peer], use=wait.value)
        err = MpiringTimeoutError(name[self.rank], timeout, what, peer=None if own else name[peer], hint=hint)
        where = f"in the ce-twoshot algorithm, {stream if isinstance(stream, str) else stream[0]} stream"
        return err.locate(where, algorithm="ce-twoshot", seq=wait.value)

    def _offset(self, flag: Flag) -> int:
        name, _, index = flag
        return self.layout.flag(name, index) if name in FLAG_ARRAYS else self.layout.flag(name)

    def _flag(self, flag: Flag) -> int:
        return self.addr(flag[1], self._offset(flag))

    def _region(self, region: Region, buffers: dict[str, int], itemsize: int) -> int:
        kind, holder, a, b = region
        if kind in buffers:  # ("input" | "output", rank, start, stop): this rank's own buffers
            if holder != self.rank:
                raise ValueError(f"rank {self.rank} cannot address rank {holder}'s {kind}")
            return buffers[kind] + a * itemsize
        slot, peer = a, b
        offset = (self.layout.inbound if kind == "inbound" else self.layout.gather)(holder, slot, peer)
        return self.addr(holder, offset)

    def _fold(self, stream: int, op: Fold, buffers: dict[str, int], itemsize: int) -> None:
        self.device.fold(stream, self._region(op.dst, buffers, itemsize),
                         self._region(op.sources[self.rank], buffers, itemsize), self._fold_table(op),
                         self.rank, self.layout.ranks, op.elements)

    def _fold_table(self, op: Fold) -> int:
        """The address of the fold table ``op`` reads its peers' pieces through."""
        me, n = self.rank, self.layout.ranks
        peers = [op.sources[r] for r in range(n) if r != me]
        slots = {region[2] for region in peers}
        # The kernel reads peers' pieces through the slot's fixed table: the plan must name
        # exactly those areas (source r from r's inbound area in this rank's staging).
        if (len(op.sources) != n or len(slots) != 1
                or any(region != ("inbound", me, region[2], r)
                       for r, region in ((r, op.sources[r]) for r in range(n) if r != me))):
            raise ValueError(f"rank {me}: a fold the staging's tables cannot express: {op}")
        return self.addr(me, self.layout.fold_table(slots.pop()))


def _canonical(done: int) -> int:
    """What of a stage's rounds before a call its program depends on (beyond offsets): the
    rounds themselves below :data:`SLOTS` (their first "slot free" waits are dropped), else
    :data:`SLOTS` plus their parity (the slots a round uses)."""
    return done if done < SLOTS else SLOTS + done % SLOTS
