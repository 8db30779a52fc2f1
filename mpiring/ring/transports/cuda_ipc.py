"""CUDA IPC ring transport: copy engines fill the next rank's slots, the GPU itself signals.

Each rank owns two receive slots in its IPC staging (see :mod:`mpiring.cuda.layout`). Per call,
copies run on a copy stream and folds on a fold stream; every wait and signal of the ring
protocol is a stream memory operation on a sequence flag, executed by the GPU:

* ``wait_slot_free``: the copy stream waits until our ``ring_free[k]`` (written by the next
  rank) reaches ``seq - 2``; then the copy-engine copy into the next rank's slot k;
* ``post_slot_full``: the copy stream writes ``seq`` into the next rank's ``ring_full[k]``
  (after the copy, behind a system-wide fence);
* ``wait_slot_full``: the fold stream waits until our ``ring_full[k]`` reaches ``seq``;
* ``post_slot_free``: after the fold, the fold stream writes ``seq`` into the previous rank's
  ``ring_free[k]``.

Flags only grow, so a wait can never be satisfied by an older signal, and the host never
waits: it enqueues a whole call and returns. A chunk that is sent after being folded
waits for that fold through a local event. Deadlock freedom is the schedule's: the issue
order runs to completion even when every operation of a rank executes strictly in that order
(see tests/test_schedule.py), which is the worst case of streams sharing a hardware queue.
"""

from __future__ import annotations

import logging

import numpy as np

from ...cuda.memops import StreamMemOps
from ...cuda.resources import LIVE
from ...cuda.staging import IpcStaging
from ..schedule import Source
from .base import CallBuffers, RingTransport

log = logging.getLogger(__name__)


def high_priority_stream(cupy):
    """A stream whose kernels are scheduled before other streams' waiting blocks: beside a
    GEMM that fills every SM, a fold queued behind its blocks stalls the whole ring."""
    try:
        _, highest = cupy.cuda.runtime.deviceGetStreamPriorityRange()
        return cupy.cuda.Stream(non_blocking=True, priority=highest)
    except (AttributeError, TypeError):  # a CuPy without stream priorities
        log.debug("stream priorities unavailable: folds run at default priority")
        return cupy.cuda.Stream(non_blocking=True)


class CudaIpcTransport(RingTransport):
    """Two device receive slots per rank, written by the previous rank over NVLink/PCIe."""

    def __init__(self, staging: IpcStaging, memops: StreamMemOps, fold_kernel) -> None:
        import cupy

        self._rt = rt = cupy.cuda.runtime
        self.rank, self.size = staging.rank, staging.size
        self.next, self.prev = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        layout = staging.layout
        self.slot_bytes = layout.slot_bytes
        self.kernel = fold_kernel
        self.memops = memops
        me, nxt, prv = self.rank, self.next, self.prev
        self.own_slots = [staging.addr(me, layout.ring_slot(k)) for k in range(2)]
        self.next_slots = [staging.addr(nxt, layout.ring_slot(k)) for k in range(2)]
        self.my_full = [staging.addr(me, layout.ring_full(k)) for k in range(2)]
        self.my_free = [staging.addr(me, layout.ring_free(k)) for k in range(2)]
        self.next_full = [staging.addr(nxt, layout.ring_full(k)) for k in range(2)]
        self.prev_free = [staging.addr(prv, layout.ring_free(k)) for k in range(2)]
        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.fold_stream = high_priority_stream(cupy)
        local = rt.eventDisableTiming
        self.start_event = rt.eventCreateWithFlags(local)
        self.copy_done = rt.eventCreateWithFlags(local)
        self.fold_done = rt.eventCreateWithFlags(local)
        self.fold_mark = rt.eventCreateWithFlags(local)
        # Compact plans: send t's event, waited for by fold t. Issue order runs at most one send
        # ahead of the folds, so two events alternate (send t+2 comes after fold t is enqueued).
        self.sent = [rt.eventCreateWithFlags(local) for _ in range(2)]
        self._events = [self.start_event, self.copy_done, self.fold_done, self.fold_mark, *self.sent]
        LIVE["events"] += len(self._events)
        LIVE["streams"] += 2
        self._fold_since_send = False
        self._call: CallBuffers | None = None

    # -- the seam ------------------------------------------------------------------------

    def slot_capacity(self, dtype: np.dtype) -> int:
        return self.slot_bytes // np.dtype(dtype).itemsize

    def begin(self, call: CallBuffers) -> None:
        rt = self._rt
        self._call = call
        self._itemsize = call.dtype.itemsize
        self._out = call.recv.address
        self._in = call.recv.address if call.in_place else call.send.address
        self._fn = self.kernel.function(call.dtype, call.op)
        self._copy, self._fold = self.copy_stream.ptr, self.fold_stream.ptr
        rt.eventRecord(self.start_event, call.stream.ptr)
        rt.streamWaitEvent(self._copy, self.start_event, 0)
        rt.streamWaitEvent(self._fold, self.start_event, 0)
        self._fold_since_send = False

    def end(self) -> None:
        rt = self._rt
        stream = self._call.stream.ptr
        rt.eventRecord(self.copy_done, self._copy)
        rt.eventRecord(self.fold_done, self._fold)
        rt.streamWaitEvent(stream, self.copy_done, 0)
        rt.streamWaitEvent(stream, self.fold_done, 0)
        self._call = None

    def wait_slot_free(self, slot: int, seq: int) -> None:
        self.memops.wait_geq(self._copy, self.my_free[slot], seq)

    def send(self, slot: int, source: Source, start: int, count: int) -> None:
        rt = self._rt
        if self._fold_since_send:
            # The chunk may come from a fold: order after the latest fold enqueued so far.
            rt.streamWaitEvent(self._copy, self.fold_mark, 0)
            self._fold_since_send = False
        if count:
            # One copy engine per transfer: splitting it over 2 or 3 copy streams was slower
            # on 4 H200s (1 GiB: 4480 / 4613 / 4749 us).
            src = (self._in if source is Source.INPUT else self._out) + start * self._itemsize
            rt.memcpyAsync(self.next_slots[slot], src, count * self._itemsize,
                           rt.memcpyDeviceToDevice, self._copy)

    def post_slot_full(self, slot: int, seq: int) -> None:
        self.memops.write(self._copy, self.next_full[slot], seq)

    def wait_slot_full(self, slot: int, seq: int) -> None:
        self.memops.wait_geq(self._fold, self.my_full[slot], seq)

    def mark_sent(self, index: int) -> None:
        self._rt.eventRecord(self.sent[index % 2], self._copy)

    def wait_sent(self, index: int) -> None:
        self._rt.streamWaitEvent(self._fold, self.sent[index % 2], 0)

    def fold(self, slot: int, start: int, count: int, reduce: bool, out_start: int) -> None:
        if not count:
            return
        out = self._out + out_start * self._itemsize
        if reduce:
            self.kernel.launch(self._fn, out, self._in + start * self._itemsize,
                               self.own_slots[slot], count, self._itemsize, self.fold_stream)
        else:  # a kernel, not the copy engine: it skips the write once the communicator is
            # aborted (an SM copy measured the same as the copy engine: 4640 vs 4648 us, 1 GiB)
            self.kernel.copy(out, self.own_slots[slot], count * self._itemsize, self.fold_stream)

    def post_slot_free(self, slot: int, seq: int) -> None:
        self.memops.write(self._fold, self.prev_free[slot], seq)
        self._rt.eventRecord(self.fold_mark, self._fold)
        self._fold_since_send = True

    def copy_input(self) -> None:
        call = self._call
        nbytes = call.count * call.dtype.itemsize
        self._rt.memcpyAsync(call.recv.address, call.send.address, nbytes,
                             self._rt.memcpyDeviceToDevice, call.stream.ptr)

    # -- tear-down -----------------------------------------------------------------------

    def close(self, abandon: bool = False) -> None:
        """Destroy the events and streams (local: the staging is the context's, and the context
        drained the calls first; should work still be queued, CUDA frees them after it)."""
        for event in self._events:
            self._rt.eventDestroy(event)
        LIVE["events"] -= len(self._events)
        self._events.clear()
        if self.copy_stream is not None:
            self.copy_stream = self.fold_stream = None
            LIVE["streams"] -= 2
