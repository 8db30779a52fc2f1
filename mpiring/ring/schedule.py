"""The ring schedule as pure data: no MPI, no device, no buffers.

The message of ``count`` elements is cut into ``size`` blocks (block ``r`` is rank ``r``'s
share, sizes differing by at most one), and every block into ``batches`` pieces: a chunk is
one piece of one block, and mini-batch ``m`` moves piece ``m`` of every block. A ring
allreduce runs ``size - 1`` reduce-scatter steps, then ``size - 1`` all-gather steps; at every
step each mini-batch moves one chunk from every rank to the next rank. The ring's chunk ``j``
is block ``(j - 1) % size``, so reduce-scatter leaves rank ``r`` holding block ``r`` reduced
over all ranks (``Reduce_scatter_block``'s result), which is what all-gather starts from.

A plan runs one :class:`Phase`: both halves (allreduce), or one of them alone
(reduce-scatter, all-gather: the phases a hierarchical allreduce puts an inter-node step
between). A *compact* reduce-scatter writes into an output that holds only block ``r``
(``Reduce_scatter_block`` out of place): its partial sums live in the output's piece of
their mini-batch, so a fold may overwrite a piece only after the send that reads it ran
(:attr:`RingPlan.fold_after_send`).

Transfers are numbered step-major, ``t = step * batches + batch``: consecutive transfers
belong to different mini-batches, so the send of transfer t+1 never needs the fold of
transfer t when ``batches >= 2``. That independence is what lets the copy of one transfer
run while the previous one is being reduced.
"""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass
from functools import cached_property

# Sequence numbers of slot uses start at 1; a freshly created slot counts as freed at 0.
FIRST_SEQ = 1
SLOTS = 2  # double buffering: two receive slots per rank


class Phase(enum.Enum):
    """Which steps of the ring a plan runs."""

    ALLREDUCE = "allreduce"  # reduce-scatter, then all-gather: every rank ends with everything
    REDUCE_SCATTER = "reduce_scatter"  # rank r ends with block r reduced over all ranks
    ALLGATHER = "allgather"  # rank r starts with block r in its output; ends with all blocks


class Source(enum.Enum):
    """Where a send reads its chunk: the caller's input, or the output being built."""

    INPUT = "input"
    OUTPUT = "output"


@dataclass(frozen=True)
class Transfer:
    """One rank's part of one transfer: the chunk it sends on, and the chunk it takes in.

    ``send_count`` elements are read from ``source`` at ``send_start`` and copied into the
    next rank's receive slot; ``recv_count`` arrive in this rank's slot from the previous rank
    and are folded into the output at ``out_start``: ``out = in[recv_start:] (op) slot`` when
    ``reduce`` (reduce-scatter), ``out = slot`` when not (all-gather). Offsets are elements
    into the buffer they address (``out_start == recv_start`` except in a compact plan).
    ``depends_on`` is the transfer whose fold produced the chunk being sent (None when the send
    reads the untouched input, or the block an all-gather starts from).
    """

    index: int
    step: int
    batch: int
    source: Source
    send_start: int
    send_count: int
    recv_start: int
    recv_count: int
    reduce: bool
    depends_on: int | None
    out_start: int


@dataclass(frozen=True)
class RingPlan:
    """The schedule of one ring call: ``count`` elements over ``size`` ranks in ``batches``
    mini-batches, running ``phase``; ``compact`` (reduce-scatter only): the output holds block
    ``r`` alone, so ``count`` must divide by ``size``."""

    size: int
    count: int
    batches: int
    phase: Phase = Phase.ALLREDUCE
    compact: bool = False

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"ring size must be >= 1, got {self.size}")
        if self.count < 0:
            raise ValueError(f"element count must be >= 0, got {self.count}")
        if self.batches < 1:
            raise ValueError(f"mini-batch count must be >= 1, got {self.batches}")
        if self.compact and (self.phase is not Phase.REDUCE_SCATTER or self.count % self.size):
            raise ValueError("a compact plan is a reduce-scatter of a count that divides by the size")

    @property
    def steps(self) -> int:
        """Ring steps: reduce-scatter plus all-gather, or one of them."""
        return (2 if self.phase is Phase.ALLREDUCE else 1) * (self.size - 1)

    @property
    def num_transfers(self) -> int:
        return self.steps * self.batches

    @property
    def fold_after_send(self) -> bool:
        """Whether a fold must wait until the send of the same transfer ran: in a compact plan
        both touch the output's piece of their mini-batch (the send reads the old partial sum,
        the fold writes the new one)."""
        return self.compact

    @cached_property
    def blocks(self) -> tuple[tuple[int, int], ...]:
        """(start, stop) of every rank's block."""
        return chunk_bounds(self.count, self.size)

    @cached_property
    def pieces(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Per block, the (start, stop) of its mini-batch pieces, relative to the block."""
        return tuple(chunk_bounds(stop - start, self.batches) for start, stop in self.blocks)

    @property
    def max_chunk(self) -> int:
        """Elements in the largest chunk: what one receive slot must hold."""
        block = -(-self.count // self.size)  # ceiling divisions
        return -(-block // self.batches)

    def block_of(self, ring_chunk: int) -> int:
        """The block that the ring's chunk ``ring_chunk`` (any integer, taken modulo the size)
        is a piece of: shifted by one so that reduce-scatter ends with block r on rank r."""
        return (ring_chunk - 1) % self.size

    def chunk(self, batch: int, ring_chunk: int) -> tuple[int, int]:
        """(start, count) of ring chunk ``ring_chunk`` of mini-batch ``batch``."""
        block = self.block_of(ring_chunk)
        lo, hi = self.pieces[block][batch]
        start = self.blocks[block][0] + lo
        return start, hi - lo

    def _out(self, batch: int, ring_chunk: int, start: int) -> int:
        """Where a chunk lives in the output: in place, or (compact) at its piece of the block."""
        return self.pieces[self.block_of(ring_chunk)][batch][0] if self.compact else start

    def transfer(self, rank: int, index: int) -> Transfer:
        """What ``rank`` sends and receives in transfer ``index``."""
        n = self.size
        step, batch = divmod(index, self.batches)
        gather_step = step - (n - 1) if self.phase is Phase.ALLREDUCE else step
        if self.phase is Phase.ALLGATHER or (self.phase is Phase.ALLREDUCE and step >= n - 1):
            # all-gather: pass on a finished chunk, store the neighbour's
            send_chunk, recv_chunk, reduce = rank + 1 - gather_step, rank - gather_step, False
        else:  # reduce-scatter: pass on the partial result, fold in the neighbour's
            send_chunk, recv_chunk, reduce = rank - step, rank - step - 1, True
        send_start, send_count = self.chunk(batch, send_chunk)
        recv_start, recv_count = self.chunk(batch, recv_chunk)
        first = step == 0
        from_input = first and self.phase is not Phase.ALLGATHER
        return Transfer(
            index=index,
            step=step,
            batch=batch,
            source=Source.INPUT if from_input else Source.OUTPUT,
            send_start=send_start if from_input else self._out(batch, send_chunk, send_start),
            send_count=send_count,
            recv_start=recv_start,
            recv_count=recv_count,
            reduce=reduce,
            depends_on=None if first else index - self.batches,
            out_start=self._out(batch, recv_chunk, recv_start),
        )

    def transfers(self, rank: int) -> list[Transfer]:
        """Every transfer of ``rank``, in order."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is outside a ring of {self.size}")
        return [self.transfer(rank, t) for t in range(self.num_transfers)]


def chunk_bounds(count: int, parts: int) -> tuple[tuple[int, int], ...]:
    """Split ``range(count)`` into ``parts`` contiguous pieces whose sizes differ by at most one."""
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return tuple(bounds)


def issue_order(plan: RingPlan) -> list[tuple[str, int]]:
    """The order in which one rank issues its sends and folds: ``[("send", t) | ("fold", t)]``.

    Send t+1 is issued before fold t when it does not depend on it, and never earlier: with
    two slots, a send two transfers ahead would wait for a slot the neighbour frees only
    after it, too, has issued its next fold, and around the ring that wait closes a cycle.
    """
    order: list[tuple[str, int]] = []
    total = plan.num_transfers
    if total:
        order.append(("send", 0))
    for t in range(total):
        nxt = t + 1
        send_first = nxt < total and (nxt - plan.batches) < t  # its source fold is issued already
        if send_first:
            order.append(("send", nxt))
        order.append(("fold", t))
        if nxt < total and not send_first:
            order.append(("send", nxt))
    return order


def choose_batches(
    count: int, size: int, slot_elems: int, requested: int | None, default: int
) -> int:
    """Mini-batches to run: the request (or default), raised so one chunk fits a receive slot,
    and lowered so no mini-batch is empty when the message is tiny."""
    if slot_elems < 1:
        raise ValueError(f"a receive slot must hold at least one element, got {slot_elems}")
    wanted = default if requested is None else requested
    if wanted < 1:
        raise ValueError(f"mini-batch count must be >= 1, got {wanted}")
    # A chunk is a piece of a block of ceil(count / size) elements, and for integers
    # ceil(ceil(count / size) / b) <= slot exactly when b >= ceil(count / (size * slot)).
    needed = math.ceil(count / (size * slot_elems)) if count else 1
    if requested is None:
        wanted = min(wanted, max(1, count // size))
    return max(wanted, needed)


def default_batches(nbytes: int, size: int) -> int:
    """A mini-batch count by message size.

    Each transfer costs ~20 us of host work while a fold runs ~10x faster than the copy it
    overlaps, so extra mini-batches pay only for large messages (measured on 4 H200s: at
    64 MiB one batch took 471 us and four 645 us; at 1 GiB the slot size forces 4 anyway).
    """
    per_rank = nbytes // max(size, 1)
    return 1 if per_rank < 32 * 1024 * 1024 else 2


@functools.lru_cache(maxsize=256)
def rank_script(plan: RingPlan, rank: int) -> tuple[tuple[bool, Transfer], ...]:
    """``(is_send, transfer)`` in issue order for one rank; cached, since calls repeat sizes."""
    transfers = plan.transfers(rank)
    return tuple((kind == "send", transfers[t]) for kind, t in issue_order(plan))
