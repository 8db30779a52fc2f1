"""The double-buffered ring pipeline, written once for every transport.

Ordering rules, per transfer t with sequence number ``seq`` and slot ``seq % 2``:

1. Before writing into the next rank's slot, wait until that rank has folded the previous use
   of the slot (``seq - 2``): a slot is never overwritten before its reader is done.
2. After the copy, post "full"; the next rank folds only after waiting for it.
3. After the fold, post "free"; that is what step 1 of the writer two transfers later waits for.

Signals are sequence numbers that only grow, so a wait is never satisfied by an older
signal. The host transport executes each step at once (waits spin on the host); the CUDA IPC
transport enqueues every step on GPU streams, and the GPU itself waits and signals.

The issue order comes from :func:`mpiring.schedule.issue_order`: send t+1 goes out before
fold t whenever it does not depend on it, so the copy of one mini-batch overlaps the fold of
another.
"""

from __future__ import annotations

import functools
import logging

from .errors import MpiringTimeoutError
from .schedule import FIRST_SEQ, SLOTS, RingPlan, Transfer, issue_order
from .transports.base import CallBuffers, RingTransport

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=256)
def rank_script(plan: RingPlan, rank: int) -> tuple[tuple[bool, Transfer], ...]:
    """``(is_send, transfer)`` in issue order for one rank; cached, since calls repeat sizes."""
    transfers = plan.transfers(rank)
    return tuple((kind == "send", transfers[t]) for kind, t in issue_order(plan))


def _locate(err: MpiringTimeoutError, plan: RingPlan, tr: Transfer, is_send: bool, seq: int) -> None:
    """Add to a timed-out wait where in the ring call it happened."""
    phase = "reduce-scatter" if tr.step < plan.size - 1 else "all-gather"
    step = f"{tr.step + 1} of {plan.steps} ({phase})"
    where = (f"in the ring algorithm, step {step}, batch {tr.batch + 1} of {plan.batches}, "
             f"{'send' if is_send else 'fold'} of transfer seq {seq}")
    err.locate(where, algorithm="ring", step=step, seq=seq)


def ring_stall(plan: RingPlan, rank: int, base: int, full: tuple[int, int],
               free: tuple[int, int]) -> tuple[bool, Transfer, int] | None:
    """Where a ring call of ``rank`` whose first transfer is ``base`` is stuck, given the
    latest values of its flags (``full[k]``/``free[k]``: what slot k's signals last said):
    ``(is_send, transfer, seq)`` of the first wait in issue order that they do not satisfy,
    or None if none is waiting. Flags only grow, so one value per slot says it all."""
    if plan.size == 1:
        return None
    for is_send, tr in rank_script(plan, rank):
        seq = base + tr.index
        slot = seq % SLOTS
        if is_send and seq - SLOTS >= FIRST_SEQ and free[slot] < seq - SLOTS:
            return True, tr, seq
        if not is_send and full[slot] < seq:
            return False, tr, seq
    return None


def stall_error(plan: RingPlan, rank: int, base: int, full: tuple[int, int], free: tuple[int, int],
                timeout: float, hint: str) -> MpiringTimeoutError:
    """The timeout error of a ring call stuck as the flags say (see :func:`ring_stall`)."""
    stall = ring_stall(plan, rank, base, full, free)
    if stall is None:
        err = MpiringTimeoutError(rank, timeout, "the ring call to finish on the GPU (no wait for a "
                                  "peer is pending: the GPU itself is busy or hung)", hint=hint)
        return err.locate(f"in the ring algorithm, transfers seq {base}..{base + plan.num_transfers - 1}",
                          algorithm="ring")
    is_send, tr, seq = stall
    slot = seq % SLOTS
    nxt, prv = (rank + 1) % plan.size, (rank - 1) % plan.size
    if is_send:
        err = MpiringTimeoutError(rank, timeout, f"rank {nxt} to free slot {slot} (seq {seq - SLOTS})",
                                  peer=nxt, hint=hint)
    else:
        err = MpiringTimeoutError(rank, timeout, f"rank {prv} to fill slot {slot} (seq {seq})",
                                  peer=prv, hint=hint)
    _locate(err, plan, tr, is_send, seq)
    return err


class RingPipeline:
    """Runs ring plans over one transport, keeping the sequence counter across calls."""

    def __init__(self, transport: RingTransport) -> None:
        self.transport = transport
        self.next_seq = FIRST_SEQ  # sequence number of the next transfer; grows forever

    def run(self, plan: RingPlan, call: CallBuffers) -> None:
        """Allreduce ``call`` following ``plan``; returns once all work is enqueued."""
        link = self.transport
        link.begin(call)
        if plan.size == 1:
            if not call.in_place:
                link.copy_input()
            link.end()
            return
        rank = link.rank
        base = self.next_seq
        try:
            for is_send, tr in rank_script(plan, rank):
                seq = base + tr.index
                slot = seq % SLOTS
                if is_send:
                    if seq - SLOTS >= FIRST_SEQ:  # a slot's first use has nothing to wait for
                        link.wait_slot_free(slot, seq - SLOTS)
                    link.send(slot, tr.source, tr.send_start, tr.send_count)
                    link.post_slot_full(slot, seq)
                else:
                    link.wait_slot_full(slot, seq)
                    link.fold(slot, tr.recv_start, tr.recv_count, tr.reduce)
                    link.post_slot_free(slot, seq)
        except MpiringTimeoutError as err:  # the waiter knows whom it waited for; we know where
            _locate(err, plan, tr, is_send, seq)
            raise
        self.next_seq = base + plan.num_transfers
        link.end()
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "rank %d: ring of %d elements, %d batches, seq %d..%d",
                rank, plan.count, plan.batches, base, self.next_seq - 1,
            )
