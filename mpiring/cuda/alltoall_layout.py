"""Where everything of the all-to-all copy-engine two-shot lives in a rank's own IPC staging
(pure arithmetic, no CUDA): a second allocation per rank, made at the row's first call::

    [ control: flags, fold tables | inbound areas: slot 0, slot 1 | gather areas: slot 0, slot 1 ]

Each slot holds one area per *peer* (``ranks - 1`` of them, in rank order skipping this rank:
:meth:`AllToAllLayout.area_index`), each of ``area_bytes``: the inbound areas receive the peers'
pieces of this rank's block (round ``k``'s reduce-scatter pushes), the gather areas the peers'
reduced pieces (round ``k``'s all-gather pushes). Every flag of
:mod:`mpiring.ring.alltoall_schedule` is one 64-bit word in the memory of the rank that waits on
it, written by one stream memory operation of the rank that signals:

* ``arrived[src]``, ``gathered[src]``: rank ``src`` pushed its piece / its reduced piece here;
* ``inbound_free[owner]``, ``gather_free[rank]``: that rank consumed what this rank pushed into
  its area, which may be overwritten two rounds later;
* ``folded``: this rank's fold of the round is in its output (waited on by its own gather pushes);
* ``pushed``: this rank's push of block 0's piece read its input (a reduce-scatter in place).

The fold tables (``fold_table(slot)``: ``MAX_RANKS`` device pointers, entry ``r`` the inbound
area of source ``r`` in that slot, entry ``rank`` unused) are written once when the staging
is made, so a call passes ``csrc/fold_n.cu`` a pointer, never a table.

Memory per rank: ``control_bytes + 4 * (ranks - 1) * area_bytes`` rounded up to 2 MiB (4 ×
H200 with the default 32 MiB areas: 386 MiB). :meth:`AllToAllLayout.release_ranges` is every
flag a wait polls, which an abort overwrites so that waits a dead peer will never satisfy finish.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import ALLOC_ALIGN, MAX_RANKS, REGION_ALIGN, WORD

AREA_ALIGN = 256  # areas start on 256-byte boundaries: 16-byte folds, whole copy-engine bursts

SLOTS = 2  # double buffering, as the schedule's SLOTS
FLAG_ARRAYS = ("arrived", "inbound_free", "gathered", "gather_free")  # one word per rank each
SINGLE_FLAGS = ("folded", "pushed")  # one word each


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class AllToAllLayout:
    """Byte offsets in one rank's all-to-all staging, for ``ranks`` ranks of a node and areas
    of ``area_bytes`` (one round's piece of a block: the schedule's ``chunk`` times the item size)."""

    ranks: int
    area_bytes: int

    def __post_init__(self) -> None:
        if not 2 <= self.ranks <= MAX_RANKS:
            raise ValueError(f"ranks must be from 2 to {MAX_RANKS}, got {self.ranks}")
        if self.area_bytes <= 0 or self.area_bytes % AREA_ALIGN:
            raise ValueError(f"area_bytes must be a positive multiple of {AREA_ALIGN}, got {self.area_bytes}")

    # -- control -------------------------------------------------------------------------
    def flag(self, name: str, index: int = 0) -> int:
        """Offset of flag ``name`` (about rank ``index`` for the per-rank arrays)."""
        if name in FLAG_ARRAYS:
            if not 0 <= index < self.ranks:
                raise ValueError(f"flag {name}[{index}]: index out of 0..{self.ranks - 1}")
            return WORD * (FLAG_ARRAYS.index(name) * MAX_RANKS + index)
        if name in SINGLE_FLAGS:
            return WORD * (len(FLAG_ARRAYS) * MAX_RANKS + SINGLE_FLAGS.index(name))
        raise KeyError(f"no all-to-all flag {name!r}")

    @property
    def flags_end(self) -> int:
        """Flags lie in ``[0, flags_end)``."""
        return WORD * (len(FLAG_ARRAYS) * MAX_RANKS + len(SINGLE_FLAGS))

    def fold_table(self, slot: int) -> int:
        """Offset of slot ``slot``'s table of inbound areas (``MAX_RANKS`` device pointers)."""
        return _align(self.flags_end, 256) + WORD * MAX_RANKS * slot

    @property
    def control_bytes(self) -> int:
        return _align(self.fold_table(SLOTS), REGION_ALIGN)

    def release_ranges(self) -> list[tuple[int, int]]:
        """(offset, bytes) of every flag a wait of this rank polls (all of them)."""
        return [(0, self.flags_end)]

    # -- areas ---------------------------------------------------------------------------
    def area_index(self, holder: int, peer: int) -> int:
        """Where ``holder``'s areas keep ``peer``'s: peers in rank order, ``holder`` skipped."""
        if peer == holder or not (0 <= peer < self.ranks and 0 <= holder < self.ranks):
            raise ValueError(f"rank {holder} holds no area for rank {peer} (of {self.ranks})")
        return peer if peer < holder else peer - 1

    def inbound(self, holder: int, slot: int, src: int) -> int:
        """Offset, in ``holder``'s staging, of the inbound area of ``src`` in slot ``slot``."""
        return self.control_bytes + (slot * (self.ranks - 1) + self.area_index(holder, src)) * self.area_bytes

    def gather(self, holder: int, slot: int, owner: int) -> int:
        """Offset, in ``holder``'s staging, of the gather area of ``owner`` in slot ``slot``."""
        first = self.control_bytes + SLOTS * (self.ranks - 1) * self.area_bytes
        return first + (slot * (self.ranks - 1) + self.area_index(holder, owner)) * self.area_bytes

    def zero_ranges(self) -> list[tuple[int, int]]:
        """(offset, bytes) that set-up zeroes: the flags (the fold tables are written after)."""
        return [(0, self.control_bytes)]

    @property
    def probe_offset(self) -> int:
        """Where set-up's peer-to-peer probe writes: the first inbound area, unused until a call."""
        return self.control_bytes

    @property
    def used_bytes(self) -> int:
        return self.control_bytes + 2 * SLOTS * (self.ranks - 1) * self.area_bytes

    @property
    def alloc_bytes(self) -> int:
        """What one rank allocates: every region, rounded up to 2 MiB."""
        return _align(self.used_bytes, ALLOC_ALIGN)
