"""The all-to-all copy-engine two-shot's schedule as pure data: no MPI, no device, no buffers.

Where every GPU of a node reaches every other directly (NVLink through NVSwitch), a two-shot
needs no ring: each rank owns one block of the message (block ``r``: rank ``r``'s share, the
ring's split, sizes differing by at most one), cut into *rounds* of at most ``chunk``
elements. In round ``k``:

* **reduce-scatter**: every rank pushes piece ``k`` of every other owner's block, by copy
  engine, into that owner's *inbound* staging (one area per source rank);
* **fold**: the owner reduces the ``n`` pieces **in rank order** (its own read from its input)
  into its output, while the next round's pushes run;
* **all-gather**: the owner pushes the reduced piece into every other rank's *gather* staging
  (one area per owner), and each rank's *collect* copies it into its output.

Staging is double-buffered: round ``k`` uses slot ``(use - 1) % 2``, where ``use`` numbers the
rounds of one stage over every call of one communicator, 1, 2, 3, ... (``done + k + 1``, where
``done`` is that stage's count in the :class:`Rounds` of the earlier calls, the same on every
rank because their counts are). The
reduce-scatter stage (inbound staging, the fold) and the all-gather stage (gather staging, the
collect) count their rounds apart, as a reduce-scatter or an all-gather call runs one. Every
cross-process signal is a monotonic counter in the memory of the rank that waits on it, set
to the round's ``use`` by a stream memory operation of the rank that signals (so a reader that
sees ``use`` also sees everything the writer's stream did before):

==================  ==========  =================================================  ==========
flag                lives at    means                                              written by
==================  ==========  =================================================  ==========
arrived[src]        owner       src's piece of round ``use`` is in my inbound      src (push)
inbound_free[o]     src         owner o folded round ``use``: my area there is     o (fold)
                                free again (round ``use + 2`` may overwrite it)
folded              owner       my fold of round ``use`` is in my output           me (fold)
gathered[o]         rank        owner o's reduced piece of round ``use`` is in     o (push)
                                my gather area
gather_free[r]      owner       rank r collected round ``use``: my area there is   r (collect)
                                free again
pushed[0]           rank        my push to owner 0 of round ``use`` read my input  me (push)
                                (a reduce-scatter in place only: see below)
==================  ==========  =================================================  ==========

A wait is ``flag >= value``; a slot is reused two rounds later, so a push of round ``use``
waits for the fold (or collect) of ``use - 2`` (nothing for the first two rounds). The fold of
a compact reduce-scatter done in place (``Reduce_scatter_block`` with ``MPI.IN_PLACE``: the
result goes to the first ``m`` elements of the buffer that holds the input) overwrites the
buffer's block 0, piece by piece, so a rank other than 0 folds round ``k`` only after its push
of block 0's piece ``k`` read it (``pushed[0]``). Every other overwrite of an input (an
allreduce in place) is ordered by the chain push → arrived → fold → gathered → collect.

Per rank the plan gives one list of operations per stream: ``("rs", o)`` pushes to owner
``o``, ``("ag", o)`` pushes the rank's reduced pieces to rank ``o``, ``"fold"`` and
``"collect"``; operations of one stream run in order, streams run independently. The flags'
values are fixed when a call is planned, so a call cannot be replayed from a CUDA graph
(that needs flags counted on the GPU). ``tests/test_alltoall_schedule.py`` runs these lists
on every interleaving it draws and checks the results bitwise against the rank-ordered
reference, and that dropping any class of wait makes it fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from .schedule import Phase, chunk_bounds

SLOTS = 2  # double buffering: two inbound and two gather slots per rank
# Flags whose values count the all-gather stage's rounds (``g_use``); every other flag counts
# the reduce-scatter stage's (``use``: arrived, inbound_free, folded, pushed).
GATHER_FLAGS = frozenset({"gathered", "gather_free"})

Stream = str | tuple[str, int]  # "fold", "collect", ("rs", owner) or ("ag", rank)
Flag = tuple[str, int, int]  # (name, rank whose memory holds it, index: the peer it is about)
Region = tuple[str, int, int, int]  # (buffer, rank, start, stop): "input"/"output" elements,
# or ("inbound"|"gather", rank, slot, area) -> the area's first stop - start elements


class Wait(NamedTuple):
    flag: Flag
    value: int  # the stream waits until flag >= value


class Signal(NamedTuple):
    flag: Flag
    value: int  # set flag = value once the stream's earlier work is done


class Copy(NamedTuple):
    src: Region
    dst: Region
    elements: int


class Fold(NamedTuple):
    """``dst = sources[0] (op) sources[1] (op) ... `` in this order: rank 0's first."""

    sources: tuple[Region, ...]
    dst: Region
    elements: int


Operation = Wait | Signal | Copy | Fold


def _wait(flag: Flag, value: int) -> list[Operation]:
    """A wait for ``flag >= value``, or none where it always holds: flags start at 0, and a
    device wait takes an unsigned value (the first rounds' "slot free" waits are for round
    ``use - SLOTS`` <= 0)."""
    return [Wait(flag, value)] if value > 0 else []


class Rounds(NamedTuple):
    """Rounds each stage ran in the earlier calls of one communicator (flags count from them)."""

    scatter: int = 0
    gather: int = 0


@dataclass(frozen=True)
class AllToAllPlan:
    """The schedule of one call: ``count`` elements (allreduce) or blocks of ``count // size``
    (reduce-scatter's input, all-gather's output) over ``size`` ranks, in rounds of at most
    ``chunk`` elements per block. ``in_place``: the call's input is its output buffer."""

    size: int
    count: int
    chunk: int
    phase: Phase = Phase.ALLREDUCE
    in_place: bool = False

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"rank count must be >= 1, got {self.size}")
        if self.count < 0:
            raise ValueError(f"element count must be >= 0, got {self.count}")
        if self.chunk < 1:
            raise ValueError(f"chunk must be >= 1 element, got {self.chunk}")
        if self.phase is not Phase.ALLREDUCE and self.count % self.size:
            raise ValueError(f"a {self.phase.value} moves equal blocks: {self.count} elements do not "
                             f"divide by {self.size} ranks")

    @cached_property
    def blocks(self) -> tuple[tuple[int, int], ...]:
        """(start, stop) of every owner's block in the full message."""
        return chunk_bounds(self.count, self.size)

    @property
    def rounds(self) -> int:
        """Rounds of this call: what ``base`` grows by."""
        longest = max(stop - start for start, stop in self.blocks)
        return -(-longest // self.chunk)

    def piece(self, owner: int, k: int) -> tuple[int, int]:
        """(start, stop) of round ``k``'s piece of ``owner``'s block in the full message."""
        start, stop = self.blocks[owner]
        return min(start + k * self.chunk, stop), min(start + (k + 1) * self.chunk, stop)

    def _source(self, rank: int, owner: int, k: int) -> Region:
        """Where ``rank`` reads its contribution to ``owner``'s piece ``k``."""
        lo, hi = self.piece(owner, k)
        if self.phase is Phase.ALLGATHER and not self.in_place:  # the input is block `rank` alone
            lo, hi = lo - self.blocks[rank][0], hi - self.blocks[rank][0]
        return ("output" if self.in_place else "input", rank, lo, hi)

    def _result(self, rank: int, owner: int, k: int) -> Region:
        """Where ``rank``'s output holds ``owner``'s reduced piece ``k``."""
        lo, hi = self.piece(owner, k)
        if self.phase is Phase.REDUCE_SCATTER:  # compact: the output holds block `rank` alone
            lo, hi = lo - self.blocks[owner][0], hi - self.blocks[owner][0]
        return ("output", rank, lo, hi)

    def after(self, done: Rounds) -> Rounds:
        """The rounds done once this call ran, after ``done``."""
        return Rounds(done.scatter + self.rounds * self.scatters, done.gather + self.rounds * self.gathers)

    @property
    def scatters(self) -> bool:
        return self.phase is not Phase.ALLGATHER

    @property
    def gathers(self) -> bool:
        return self.phase is not Phase.REDUCE_SCATTER

    def streams(self, rank: int, done: Rounds) -> dict[Stream, list[Operation]]:
        """``rank``'s operations per stream for this call, after the rounds ``done`` before it."""
        plan: dict[Stream, list[Operation]] = {}
        for stream, op in self.issue_order(rank, done):
            plan.setdefault(stream, []).append(op)
        return plan

    def issue_order(self, rank: int, done: Rounds) -> list[tuple[Stream, Operation]]:
        """``rank``'s operations in the order to enqueue them (:meth:`issue_rounds` without the
        rounds)."""
        return [(stream, op) for _, stream, op in self.issue_rounds(rank, done)]

    def issue_rounds(self, rank: int, done: Rounds) -> list[tuple[int, Stream, Operation]]:
        """``rank``'s operations in the order to enqueue them, each with its round ``k`` in this
        call (0, 1, ...): round by round (a round's pushes, its fold, its gather pushes, its
        collects). Enqueued so, the call completes even where every operation of a rank runs
        strictly in this order, one after the other: the worst case of streams sharing a
        hardware queue (more streams than ``CUDA_DEVICE_MAX_CONNECTIONS``). Why: a wait of
        round ``k`` needs only work of rounds before ``k`` on any rank, or work of round ``k``
        that comes earlier in its rank's order and waits on nothing of round ``k`` itself (the
        pushes before the fold, the fold and the gather pushes before the collects);
        ``tests/test_alltoall_schedule.py`` runs it so."""
        order: list[tuple[int, Stream, Operation]] = []
        k = 0  # the round that add() tags operations with: the loop over rounds below sets it

        def add(stream: Stream, ops: list[Operation]) -> None:
            order.extend((k, stream, op) for op in ops)

        n, me = self.size, rank
        # Peers from the next rank on: in each round rank r pushes first to r + 1, so the ranks'
        # first pushes go to different GPUs (a shared push stream then spreads the load).
        peers = [(me + j) % n for j in range(1, n)]
        scatter, gather = self.scatters, self.gathers
        # In place, a reduce-scatter's fold writes block 0's pieces (see the module docstring).
        compact_in_place = self.in_place and self.phase is Phase.REDUCE_SCATTER
        for k in range(self.rounds):
            use, g_use = done.scatter + k + 1, done.gather + k + 1
            slot, g_slot = (use - 1) % SLOTS, (g_use - 1) % SLOTS
            mine = self.piece(me, k)
            width = mine[1] - mine[0]
            if scatter:
                for o in peers:
                    lo, hi = self.piece(o, k)
                    add(("rs", o), [*_wait(("inbound_free", me, o), use - SLOTS),
                                    Copy(self._source(me, o, k), ("inbound", o, slot, me), hi - lo),
                                    Signal(("arrived", o, me), use)])
                    if compact_in_place and o == 0:
                        add(("rs", o), [Signal(("pushed", me, 0), use)])
                fold: list[Operation] = [Wait(("arrived", me, src), use) for src in peers]
                if compact_in_place and me != 0:
                    fold.append(Wait(("pushed", me, 0), use))  # the fold overwrites block 0's piece
                sources = tuple(self._source(me, me, k) if src == me else ("inbound", me, slot, src)
                                for src in range(n))
                fold.append(Fold(sources, self._result(me, me, k), width))
                fold += [Signal(("inbound_free", src, me), use) for src in peers]
                fold.append(Signal(("folded", me, me), use))
                add("fold", fold)
            if gather:
                # What the owner pushes: its reduced piece, or (all-gather) its input piece, which
                # out of place is also copied into its own output.
                held = self._result(me, me, k) if scatter else self._source(me, me, k)
                if not scatter and not self.in_place:
                    add("collect", [Copy(held, self._result(me, me, k), width)])
                for o in peers:
                    push: list[Operation] = [Wait(("folded", me, me), use)] if scatter else []
                    push += [*_wait(("gather_free", me, o), g_use - SLOTS),
                             Copy(held, ("gather", o, g_slot, me), width),
                             Signal(("gathered", o, me), g_use)]
                    add(("ag", o), push)
                for o in peers:
                    lo, hi = self.piece(o, k)
                    add("collect", [Wait(("gathered", me, o), g_use),
                                    Copy(("gather", me, g_slot, o), self._result(me, o, k), hi - lo),
                                    Signal(("gather_free", o, me), g_use)])
        return order

    def staging_elements(self) -> int:
        """Elements of staging one rank holds: inbound and gather areas, per slot, per peer."""
        areas = self.scatters + self.gathers
        return areas * SLOTS * (self.size - 1) * self.chunk
