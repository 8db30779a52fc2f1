"""The ring allreduce schedule as pure data: no MPI, no device, no buffers.

The message of ``count`` elements is cut into ``size * batches`` chunks: mini-batch ``m`` owns
chunks ``m*size .. m*size + size-1``, and inside a mini-batch chunk ``j`` is the ring's j-th
chunk. A ring allreduce runs ``size - 1`` reduce-scatter steps, then ``size - 1`` all-gather
steps; at every step each mini-batch moves one chunk from every rank to the next rank.

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


class Source(enum.Enum):
    """Where a send reads its chunk: the caller's input, or the output being built."""

    INPUT = "input"
    OUTPUT = "output"


@dataclass(frozen=True)
class Transfer:
    """One rank's part of one transfer: the chunk it sends on, and the chunk it takes in.

    ``send_*`` is read from ``source`` and copied into the next rank's receive slot;
    ``recv_*`` arrives in this rank's slot from the previous rank and is folded into the
    output: ``out = in (op) slot`` when ``reduce`` (reduce-scatter), ``out = slot`` when not
    (all-gather). ``depends_on`` is the transfer whose fold produced the chunk being sent
    (None when the send reads the untouched input).
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


@dataclass(frozen=True)
class RingPlan:
    """The full schedule of a ring allreduce of ``count`` elements over ``size`` ranks."""

    size: int
    count: int
    batches: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"ring size must be >= 1, got {self.size}")
        if self.count < 0:
            raise ValueError(f"element count must be >= 0, got {self.count}")
        if self.batches < 1:
            raise ValueError(f"mini-batch count must be >= 1, got {self.batches}")

    @property
    def steps(self) -> int:
        """Reduce-scatter plus all-gather steps."""
        return 2 * (self.size - 1)

    @property
    def num_transfers(self) -> int:
        return self.steps * self.batches

    @cached_property
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """(start, stop) of every chunk, indexed ``batch * size + ring_chunk``."""
        return chunk_bounds(self.count, self.size * self.batches)

    @property
    def max_chunk(self) -> int:
        """Elements in the largest chunk: what one receive slot must hold."""
        return -(-self.count // (self.size * self.batches))

    def chunk(self, batch: int, ring_chunk: int) -> tuple[int, int]:
        """(start, count) of ring chunk ``ring_chunk`` of mini-batch ``batch``."""
        start, stop = self.bounds[batch * self.size + ring_chunk % self.size]
        return start, stop - start

    def transfer(self, rank: int, index: int) -> Transfer:
        """What ``rank`` sends and receives in transfer ``index``."""
        n = self.size
        step, batch = divmod(index, self.batches)
        if step < n - 1:  # reduce-scatter: pass on the partial sum, fold in the neighbour's
            send_chunk, recv_chunk, reduce = rank - step, rank - step - 1, True
        else:  # all-gather: pass on a finished chunk, store the neighbour's
            j = step - (n - 1)
            send_chunk, recv_chunk, reduce = rank + 1 - j, rank - j, False
        send_start, send_count = self.chunk(batch, send_chunk)
        recv_start, recv_count = self.chunk(batch, recv_chunk)
        first = step == 0
        return Transfer(
            index=index,
            step=step,
            batch=batch,
            source=Source.INPUT if first else Source.OUTPUT,
            send_start=send_start,
            send_count=send_count,
            recv_start=recv_start,
            recv_count=recv_count,
            reduce=reduce,
            depends_on=None if first else index - self.batches,
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
