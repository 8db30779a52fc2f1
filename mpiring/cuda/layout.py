"""Where everything lives in a rank's one IPC staging allocation (pure arithmetic, no CUDA).

Every rank exports a single ``cudaMalloc`` allocation; peers map it once at set-up::

    [ control | ring slot 0 | ring slot 1 | one-shot slot 0 | one-shot slot 1 | two-shot in | two-shot out
      | oneshot-ll slot 0 | oneshot-ll slot 1 ]

Control holds sequence-number flags (64-bit words, each written by exactly one peer, waited
on only by the owner) and the direct kernels' local state:

* ``ring_full[k]``: written by the previous rank after it copied into ring slot k;
* ``ring_free[k]``: written by the next rank after it folded the slot k it received from us;
* ``direct_flags[src][block]``: written by rank ``src``'s block ``block`` at each barrier of
  the one-shot / two-shot kernels (the value names the call and the barrier: ``csrc/direct.cu``);
* ``direct_table``: the direct kernels' addresses of every rank's regions (local only);
* ``ll_state``: the GPU-checked calls begun and the launch's started blocks, one word (local only);
* ``ll_headers[slot][src][2]``: two 16-byte lines written by rank ``src`` at each GPU-checked
  call (its descriptor and call number: ``csrc/agree.cuh``), never cleared (calls two apart differ in flag);
* ``abort``: 0 while the communicator is healthy; ``1 + r`` once rank ``r`` aborted it (after a
  timeout). Written by any rank, read by this rank's kernels, which then stop writing output.

A flag lives in the memory of the rank that waits on it, so every wait polls local memory
and every signal is one remote write.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import settings
from ..core.errors import InvalidArgumentError

ALLOC_ALIGN = 2 << 20  # the granularity CUDA IPC exports anyway
REGION_ALIGN = 64 << 10
WORD = 8
MAX_RANKS = 8  # ranks of one node: the direct kernels' flag table has a row per rank


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


@dataclass(frozen=True)
class StagingLayout:
    """Byte offsets of every region, from the sizes asked for."""

    slot_bytes: int  # one ring slot
    oneshot_bytes: int  # one of the two one-shot slots: the largest one-shot message
    twoshot_bytes: int  # each of the two two-shot halves: the two-shot chunk
    blocks: int  # thread blocks of the direct kernels (fixed, so flags line up across ranks)
    ll_bytes: int = 1 << 20  # each of the two oneshot-ll slots: a row of ll_bytes / ranks per source
    ranks: int = MAX_RANKS  # the ranks of the node that share the staging (rows of a oneshot-ll slot)

    def __post_init__(self) -> None:
        for name in ("slot_bytes", "oneshot_bytes", "twoshot_bytes", "blocks", "ll_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("slot_bytes", "oneshot_bytes", "twoshot_bytes", "ll_bytes"):
            if getattr(self, name) % REGION_ALIGN:
                raise ValueError(f"{name} must be a multiple of {REGION_ALIGN}")
        if not 1 <= self.ranks <= MAX_RANKS:
            raise ValueError(f"ranks must be from 1 to {MAX_RANKS}, got {self.ranks}")

    # -- control words -------------------------------------------------------------------
    RING_FULL = 0
    RING_FREE = 256

    def ring_full(self, slot: int) -> int:
        return self.RING_FULL + WORD * slot

    def ring_free(self, slot: int) -> int:
        return self.RING_FREE + WORD * slot

    ABORT = 512
    RING_FLAGS_END = ABORT  # ring_full and ring_free lie in [0, RING_FLAGS_END)

    @property
    def abort(self) -> int:
        return self.ABORT

    def release_ranges(self) -> list[tuple[int, int]]:
        """(offset, bytes) of every flag a wait of this rank polls: what an abort overwrites
        with a value no wait can exceed, to release waits that a dead peer will never satisfy."""
        return [(0, self.RING_FLAGS_END), (self.direct_flags, WORD * MAX_RANKS * self.blocks)]

    @property
    def direct_flags(self) -> int:
        return 4096

    def direct_flag(self, src: int, block: int) -> int:
        return self.direct_flags + WORD * (src * self.blocks + block)

    TABLE_BYTES = 1024  # the direct kernels' table of addresses (written once at set-up)

    @property
    def direct_table(self) -> int:
        return _align(self.direct_flags + WORD * MAX_RANKS * self.blocks, 256)

    @property
    def ll_state(self) -> int:
        return _align(self.direct_table + self.TABLE_BYTES, 256)

    LL_LINE = 16  # bytes of one oneshot-ll line: two halves of (32-bit flag, 32 bits of payload)
    LL_PAYLOAD = 8  # of which payload

    @property
    def ll_headers(self) -> int:
        return self.ll_state + 256

    def ll_header(self, slot: int, src: int, half: int = 0) -> int:
        return self.ll_headers + self.LL_LINE * (2 * (slot * MAX_RANKS + src) + half)

    @property
    def control_bytes(self) -> int:
        return _align(self.ll_header(2, 0), REGION_ALIGN)

    # -- data regions --------------------------------------------------------------------
    def ring_slot(self, k: int) -> int:
        return self.control_bytes + k * self.slot_bytes

    def oneshot_slot(self, k: int) -> int:
        return self.ring_slot(2) + k * self.oneshot_bytes

    @property
    def twoshot_in(self) -> int:
        return self.oneshot_slot(2)

    @property
    def twoshot_out(self) -> int:
        return self.twoshot_in + self.twoshot_bytes

    def ll_slot(self, k: int) -> int:
        return self.twoshot_out + self.twoshot_bytes + k * self.ll_bytes

    @property
    def ll_row_bytes(self) -> int:
        """One source rank's row of a oneshot-ll slot (lines of 16 bytes): the slot split among
        the node's ranks, so fewer ranks take larger messages (64 KiB on 8, 128 KiB on 4)."""
        return self.ll_bytes // self.ranks // self.LL_LINE * self.LL_LINE

    @property
    def ll_limit(self) -> int:
        """The largest oneshot-ll message in bytes: 8 payload bytes per line of a row."""
        return self.ll_row_bytes // self.LL_LINE * self.LL_PAYLOAD

    @property
    def used_bytes(self) -> int:
        return self.ll_slot(2)

    def zero_ranges(self) -> list[tuple[int, int]]:
        """(offset, bytes) that set-up zeroes: every flag, and every oneshot-ll line (a line's
        flag is its data's only guard)."""
        return [(0, self.control_bytes), (self.ll_slot(0), 2 * self.ll_bytes)]

    @property
    def probe_offset(self) -> int:
        """Where set-up's peer-to-peer probe writes: ring slot 0, unused until the first call."""
        return self.ring_slot(0)

    @property
    def alloc_bytes(self) -> int:
        """What one rank allocates: every region, rounded up to 2 MiB."""
        return _align(self.used_bytes, ALLOC_ALIGN)


# Two 128 MiB ring slots per rank: every transfer still costs about 9 us of GPU time, so big
# chunks pay (1 GiB on 4 H200s: 5147 / 4703 / 4480 / 4410 us with 16 / 32 / 64 / 128 MiB slots).
DEFAULT_SLOT_BYTES = 128 << 20
ONESHOT_BYTES = 4 << 20  # a one-shot slot (two per rank): messages up to 4 MiB / ranks
TWOSHOT_BYTES = 32 << 20  # the two-shot chunk (two staging halves of it per rank)
# Grid of the direct kernels (equal on all ranks; set-up checks). Two-shot at 64 MiB on 4 H200s:
# 458 / 425 / 389 us with 32 / 64 / 128 blocks; one-shot latency barely moves (8.1 vs 7.8 us).
DIRECT_BLOCKS = settings.integer("MPIRING_DIRECT_BLOCKS") or 128  # parsed, at least 1 (settings.TABLE)


def staging_layout(slot_bytes: int | None, sm_budget: int | None = None,
                   ranks: int = MAX_RANKS) -> StagingLayout:
    """The staging of one communicator, from the ring slot size asked for (64 KiB multiples);
    the direct kernels' grid is ``DIRECT_BLOCKS``, at most ``sm_budget`` blocks (which every rank
    shares: set-up checks); ``ranks``: the ranks of the node, which share each oneshot-ll slot."""
    slot = DEFAULT_SLOT_BYTES if slot_bytes is None else int(slot_bytes)
    if slot <= 0:
        raise InvalidArgumentError(f"slot_bytes must be positive, got {slot_bytes}")
    slot = -(-slot // (64 << 10)) * (64 << 10)
    return StagingLayout(slot, ONESHOT_BYTES, TWOSHOT_BYTES, direct_blocks(sm_budget), ranks=ranks)


def direct_blocks(sm_budget: int | None) -> int:
    """The one-shot and two-shot kernels' grid: ``DIRECT_BLOCKS``, at most ``sm_budget`` blocks
    (the budget as asked, so that ranks on different GPUs agree)."""
    return DIRECT_BLOCKS if sm_budget is None else min(DIRECT_BLOCKS, sm_budget)
