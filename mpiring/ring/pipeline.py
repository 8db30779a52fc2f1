"""The double-buffered ring pipeline, written once for every transport.

Ordering rules, per transfer t with sequence number ``seq`` and slot ``seq % 2``:

1. Before writing into the next rank's slot, wait until that rank has folded the previous use
   of the slot (``seq - 2``): a slot is never overwritten before its reader is done.
2. After the copy, post "full"; the next rank folds only after waiting for it.
3. After the fold, post "free"; that is what step 1 of the writer two transfers later waits for.
4. In a compact reduce-scatter, a fold waits until the send of its own transfer ran: the send
   reads the partial sum that the fold overwrites (``RingPlan.fold_after_send``).

Signals are sequence numbers that only grow, so a wait is never satisfied by an older
signal. The host transport executes each step at once (waits spin on the host); the CUDA IPC
transport enqueues every step on GPU streams, and the GPU itself waits and signals.

The issue order comes from :func:`mpiring.ring.schedule.issue_order`: send t+1 goes out before
fold t whenever it does not depend on it, so the copy of one mini-batch overlaps the fold of
another.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

from ..core.errors import MpiringTimeoutError
from .schedule import FIRST_SEQ, SLOTS, RingPlan, rank_script
from .stall import locate
from .transports.base import CallBuffers, RingTransport

Wrapper = TypeVar("Wrapper", bound=RingTransport)

log = logging.getLogger(__name__)


class RingPipeline:
    """Runs ring plans over one transport, keeping the sequence counter across calls."""

    def __init__(self, transport: RingTransport) -> None:
        self.transport = transport
        self.next_seq = FIRST_SEQ  # sequence number of the next transfer; grows forever

    @contextlib.contextmanager
    def wrapped(self, wrap: Callable[[RingTransport], Wrapper]) -> Iterator[Wrapper]:
        """Inside the block, run this pipeline's calls through ``wrap(transport)`` (yielded): the
        hook of :func:`mpiring.trace.ring_timeline`. Not nested: a second wrap raises."""
        inner = self.transport
        if getattr(self, "_wrapped", False):
            raise RuntimeError("this communicator's ring is already being traced")
        outer = wrap(inner)
        self.transport, self._wrapped = outer, True
        try:
            yield outer
        finally:
            self.transport, self._wrapped = inner, False

    def run(self, plan: RingPlan, call: CallBuffers) -> None:
        """Run ``plan`` (an allreduce, or one of its phases) on ``call``; returns once all work
        is enqueued."""
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
                    if plan.fold_after_send:
                        link.mark_sent(tr.index)
                    link.post_slot_full(slot, seq)
                else:
                    link.wait_slot_full(slot, seq)
                    if plan.fold_after_send:  # rule 4: the send of this transfer read our piece
                        link.wait_sent(tr.index)
                    link.fold(slot, tr.recv_start, tr.recv_count, tr.reduce, tr.out_start)
                    link.post_slot_free(slot, seq)
        except MpiringTimeoutError as err:  # the waiter knows whom it waited for; we know where
            locate(err, plan, tr, is_send, seq)
            raise
        self.next_seq = base + plan.num_transfers
        link.end()
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "rank %d: ring of %d elements, %d batches, seq %d..%d",
                rank, plan.count, plan.batches, base, self.next_seq - 1,
            )
