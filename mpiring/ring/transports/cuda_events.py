"""The event-signalled ring transport (``ring-events``): the seed's protocol.

Copies run on a copy stream, folds on a fold stream, as in ``cuda_ipc``; the signals are
interprocess CUDA events (see :mod:`mpiring.cuda.event_staging`) instead of flags:

* ``post_slot_full``: record our ``full[k]`` on the copy stream after the copy, **then** post
  ``seq`` in the next rank's ``EV_FULL[k]`` counter in node shared memory;
* ``wait_slot_full``: wait on the host until our ``EV_FULL[k]`` counter reaches ``seq``, **then**
  ``cudaStreamWaitEvent(fold stream, previous rank's full[k])``;
* ``post_slot_free`` / ``wait_slot_free``: the same with ``free[k]`` and ``EV_FREE[k]``.

Ordering rule: ``cudaStreamWaitEvent`` waits for the most recent record made *before the wait
is enqueued*, so every wait is enqueued only after the host saw the record's counter (the
record precedes the post, at the line that does it). And no event is re-recorded before its
waiter enqueued its wait: a writer re-records ``full[k]`` for use ``seq + 2`` only after
waiting for ``EV_FREE[k] >= seq``, which the reader posts after enqueueing its wait on
``full[k]`` for ``seq``; the reader re-records ``free[k]`` for ``seq + 2`` only after its
wait on ``EV_FULL[k] >= seq + 2``, which the writer posts after enqueueing its wait on
``free[k]`` for ``seq``. Counters only grow.

The host thus follows the pipeline step by step (each host wait is bounded by the timeout and
names the late peer); the GPU waits on events cannot be released by an abort, so a peer whose
GPU stops leaves this rank's streams waiting (the watchdog still reports it).
"""

from __future__ import annotations

import numpy as np

from ...cuda.event_staging import EventStaging
from ...cuda.resources import LIVE
from ...node.signals import EV_FREE, EV_FULL, SharedBoard
from ...node.timeouts import TimeoutPolicy
from ..schedule import Source
from .base import CallBuffers, RingTransport
from .cuda_ipc import high_priority_stream


class CudaEventTransport(RingTransport):
    """Two device receive slots per rank, signalled by interprocess events."""

    def __init__(self, staging: EventStaging, board: SharedBoard, fold_kernel,
                 timeouts: TimeoutPolicy) -> None:
        import cupy

        self._rt = rt = cupy.cuda.runtime
        self.staging, self.board, self.kernel = staging, board, fold_kernel
        self.rank, self.size = staging.rank, staging.size
        self.next, self.prev = staging.next, staging.prev
        self.slot_bytes = staging.slot_bytes
        self.waiter = timeouts.waiter(self.rank)
        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.fold_stream = high_priority_stream(cupy)
        local = rt.eventDisableTiming
        self.start_event, self.copy_done, self.fold_done = (rt.eventCreateWithFlags(local) for _ in range(3))
        self.sent = [rt.eventCreateWithFlags(local) for _ in range(2)]  # as in cuda_ipc: compact plans
        self._events = [self.start_event, self.copy_done, self.fold_done, *self.sent]
        LIVE["events"] += len(self._events)
        LIVE["streams"] += 2
        self._last_fold_event: int | None = None
        self._call: CallBuffers | None = None

    def slot_capacity(self, dtype: np.dtype) -> int:
        return self.slot_bytes // np.dtype(dtype).itemsize

    def begin(self, call: CallBuffers) -> None:
        rt = self._rt
        self._call = call
        self._itemsize = call.dtype.itemsize
        self._out = call.recv.address
        self._in = call.recv.address if call.in_place else call.send.address
        self._fn = self.kernel.function(call.dtype, call.op)
        rt.eventRecord(self.start_event, call.stream.ptr)
        rt.streamWaitEvent(self.copy_stream.ptr, self.start_event, 0)
        rt.streamWaitEvent(self.fold_stream.ptr, self.start_event, 0)
        self._last_fold_event = None

    def end(self) -> None:
        rt = self._rt
        stream = self._call.stream.ptr
        rt.eventRecord(self.copy_done, self.copy_stream.ptr)
        rt.eventRecord(self.fold_done, self.fold_stream.ptr)
        rt.streamWaitEvent(stream, self.copy_done, 0)
        rt.streamWaitEvent(stream, self.fold_done, 0)
        self._call = None

    def wait_slot_free(self, slot: int, seq: int) -> None:
        self.waiter.counter_at_least(
            self.board, self.next, EV_FREE[slot], seq,
            lambda: f"rank {self.next} to free slot {slot} (seq {seq}, ring-events)", peer=self.next)
        # Only now: the record this wait means has been enqueued by the next rank.
        self._rt.streamWaitEvent(self.copy_stream.ptr, self.staging.next_free[slot], 0)

    def send(self, slot: int, source: Source, start: int, count: int) -> None:
        rt = self._rt
        if self._last_fold_event is not None:
            # The chunk may come from a fold: order after the latest fold enqueued so far.
            rt.streamWaitEvent(self.copy_stream.ptr, self._last_fold_event, 0)
            self._last_fold_event = None
        if count:
            src = (self._in if source is Source.INPUT else self._out) + start * self._itemsize
            rt.memcpyAsync(self.staging.next_slots[slot], src, count * self._itemsize,
                           rt.memcpyDeviceToDevice, self.copy_stream.ptr)

    def post_slot_full(self, slot: int, seq: int) -> None:
        self._rt.eventRecord(self.staging.full_events[slot], self.copy_stream.ptr)
        self.board.post(self.next, EV_FULL[slot], seq)  # after the record: the waiter relies on it

    def wait_slot_full(self, slot: int, seq: int) -> None:
        self.waiter.counter_at_least(
            self.board, self.rank, EV_FULL[slot], seq,
            lambda: f"rank {self.prev} to fill slot {slot} (seq {seq}, ring-events)", peer=self.prev)
        self._rt.streamWaitEvent(self.fold_stream.ptr, self.staging.prev_full[slot], 0)

    def mark_sent(self, index: int) -> None:
        self._rt.eventRecord(self.sent[index % 2], self.copy_stream.ptr)

    def wait_sent(self, index: int) -> None:
        self._rt.streamWaitEvent(self.fold_stream.ptr, self.sent[index % 2], 0)

    def fold(self, slot: int, start: int, count: int, reduce: bool, out_start: int) -> None:
        if not count:
            return
        out = self._out + out_start * self._itemsize
        own = self.staging.own_slots[slot]
        if reduce:
            self.kernel.launch(self._fn, out, self._in + start * self._itemsize, own, count,
                               self._itemsize, self.fold_stream)
        else:  # a kernel, like the memops ring's: it skips the write once the communicator aborted
            self.kernel.copy(out, own, count * self._itemsize, self.fold_stream)

    def post_slot_free(self, slot: int, seq: int) -> None:
        event = self.staging.free_events[slot]
        self._rt.eventRecord(event, self.fold_stream.ptr)
        self.board.post(self.rank, EV_FREE[slot], seq)  # after the record
        self._last_fold_event = event  # also marks "every fold so far ran" for the next send

    def progress(self) -> tuple[int, ...]:
        """The counters this rank's waits watch (the previous rank's EV_FULL posts, the next
        rank's EV_FREE posts): they move as the peers' hosts enqueue the call, which is all of
        its progress the host can see (the watchdog's clock restarts on it)."""
        mine, nxt = self.board.counters[self.rank], self.board.counters[self.next]
        return (*(int(mine[i]) for i in EV_FULL), *(int(nxt[i]) for i in EV_FREE))

    def copy_input(self) -> None:
        call = self._call
        self._rt.memcpyAsync(call.recv.address, call.send.address, call.count * call.dtype.itemsize,
                             self._rt.memcpyDeviceToDevice, call.stream.ptr)

    def close(self, abandon: bool = False) -> None:
        """Local: destroy this transport's own events and streams (the staging is closed by
        its owner after the drain)."""
        for event in self._events:
            self._rt.eventDestroy(event)
        LIVE["events"] -= len(self._events)
        self._events.clear()
        if self.copy_stream is not None:
            self.copy_stream = self.fold_stream = None
            LIVE["streams"] -= 2
