"""CUDA IPC transport: receive slots in device memory, interprocess events, two streams.

Set-up (collective, once per communicator):
  * each rank allocates its two receive slots as one dedicated ``cudaMalloc`` (not CuPy's
    pool: an IPC handle names a whole allocation), rounded to 2 MiB;
  * it creates four interprocess events: FULL[k], recorded on its copy stream after it copied
    into the next rank's slot k, and FREE[k], recorded on its fold stream after it folded its
    own slot k;
  * the memory and event handles travel in one ``allgather`` on the node communicator; each
    rank opens every peer's slots and its neighbours' events, and keeps them until ``close``;
  * a write-and-read-back through the opened mappings proves peer access really works.

Per call, copies run on the copy stream and folds on the fold stream. ``cudaStreamWaitEvent``
waits for the most recent record made *before the call*, so each event record is followed
by a counter post in node shared memory, and each wait first waits (on the host) for that
post: no rank waits on an event before the peer recorded it. The pipeline's rule that a
writer reuses a slot only after the reader posted "free" (which it posts after enqueueing its
wait on FULL) makes sure no event is re-recorded before its waiter has enqueued its wait.

Staging memory per rank: ``2 * slot_bytes`` rounded up to 2 MiB.
"""

from __future__ import annotations

import logging

import numpy as np
from mpi4py import MPI

from ..errors import SetupError
from ..schedule import Source
from ..signals import FREE, FULL, SharedBoard, Waiter
from .base import CallBuffers, RingTransport

log = logging.getLogger(__name__)

ALLOC_ALIGN = 2 << 20
SLOT_ALIGN = 4096


class CudaIpcTransport(RingTransport):
    """Two device receive slots per rank, written by the previous rank over NVLink/PCIe."""

    def __init__(self, node: MPI.Intracomm, device_id: int, slot_bytes: int, timeout: float,
                 fold_kernel) -> None:
        import cupy

        rt = cupy.cuda.runtime
        self._rt = rt
        self.rank, self.size = node.rank, node.size
        self.next, self.prev = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        self.device_id = device_id
        self.node = node
        self.slot_bytes = max(SLOT_ALIGN, -(-slot_bytes // SLOT_ALIGN) * SLOT_ALIGN)
        self.alloc_bytes = -(-2 * self.slot_bytes // ALLOC_ALIGN) * ALLOC_ALIGN
        self.kernel = fold_kernel
        self.waiter = Waiter(timeout, self.rank)
        self.board = SharedBoard(node)
        self._opened_mem: list[int] = []
        self._opened_events: list[int] = []
        self._own_events: list[int] = []
        self.base = 0
        try:
            self._setup(cupy, rt, node)
        except BaseException:
            self._release_local()
            raise

    # -- set-up --------------------------------------------------------------------------

    def _setup(self, cupy, rt, node: MPI.Intracomm) -> None:
        self.base = rt.malloc(self.alloc_bytes)
        if self.base % ALLOC_ALIGN:
            log.debug("slot allocation at %#x is not 2 MiB aligned", self.base)
        self.own_slots = [self.base + k * self.slot_bytes for k in range(2)]
        flags = rt.eventDisableTiming | rt.eventInterprocess
        self.full_events = [rt.eventCreateWithFlags(flags) for _ in range(2)]
        self.free_events = [rt.eventCreateWithFlags(flags) for _ in range(2)]
        self._own_events = self.full_events + self.free_events
        mine = (rt.ipcGetMemHandle(self.base),
                [rt.ipcGetEventHandle(e) for e in self._own_events])
        handles = node.allgather(mine)  # the one exchange of handles: no files, no mutex

        problem = None
        self.peer_bases: dict[int, int] = {}
        try:
            for r, (mem, _) in enumerate(handles):
                if r != self.rank:
                    ptr = rt.ipcOpenMemHandle(mem)
                    self._opened_mem.append(ptr)
                    self.peer_bases[r] = ptr
            if self.size > 1:
                prev_events, next_events = handles[self.prev][1], handles[self.next][1]
                self.prev_full = [self._open_event(h) for h in prev_events[:2]]
                self.next_free = [self._open_event(h) for h in next_events[2:]]
        except cupy.cuda.runtime.CUDARuntimeError as err:
            problem = f"rank {self.rank} could not open a peer's IPC handle ({err})"
        self.peer_slots = {r: [b + k * self.slot_bytes for k in range(2)]
                           for r, b in self.peer_bases.items()}
        self._agree(node, problem)

        self.copy_stream = cupy.cuda.Stream(non_blocking=True)
        self.fold_stream = cupy.cuda.Stream(non_blocking=True)
        local = rt.eventDisableTiming
        self.start_event = rt.eventCreateWithFlags(local)
        self.copy_done = rt.eventCreateWithFlags(local)
        self.fold_done = rt.eventCreateWithFlags(local)
        self._own_events += [self.start_event, self.copy_done, self.fold_done]
        self._last_fold_event: int | None = None
        self._call: CallBuffers | None = None
        self._agree(node, self._probe_peers(cupy, rt, node))

    def _open_event(self, handle: bytes) -> int:
        event = self._rt.ipcOpenEventHandle(handle)
        self._opened_events.append(event)
        return event

    @staticmethod
    def _agree(node: MPI.Intracomm, problem: str | None) -> None:
        problems = [p for p in node.allgather(problem) if p]
        if problems:
            raise SetupError("; ".join(problems))

    def _probe_peers(self, cupy, rt, node: MPI.Intracomm) -> str | None:
        """Write a rank-specific pattern into every peer's slot and read back what arrives.

        Drivers can report peer access that does not work; this catches it at set-up.
        """
        if self.size == 1:
            return None
        words = 16  # 64 bytes per rank, at the start of slot 0: unused until the first call
        probe = 0
        patterns = {
            r: (np.arange(words, dtype=np.uint32) * 2654435761 + 97 * r + 1).astype(np.uint32)
            for r in range(self.size)
        }
        try:
            src = cupy.asarray(patterns[self.rank])
            for base in self.peer_bases.values():
                rt.memcpy(base + probe + 64 * self.rank, src.data.ptr, 64, rt.memcpyDeviceToDevice)
            cupy.cuda.runtime.deviceSynchronize()  # set-up only: make the writes land
        except cupy.cuda.runtime.CUDARuntimeError as err:
            return f"rank {self.rank} could not write into a peer's GPU memory ({err})"
        node.Barrier()
        got = np.empty(words * self.size, dtype=np.uint32)
        rt.memcpy(got.ctypes.data, self.base + probe, got.nbytes, rt.memcpyDeviceToHost)
        bad = [r for r in range(self.size)
               if r != self.rank and not np.array_equal(got[r * words:(r + 1) * words], patterns[r])]
        node.Barrier()
        if bad:
            return (f"rank {self.rank} did not receive what ranks {bad} wrote through CUDA IPC: "
                    "peer-to-peer access is reported but does not work (check the GPU topology, "
                    "IOMMU/ACS settings, or run with NCCL instead)")
        return None

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
            self.board, self.next, FREE[slot], seq,
            lambda: f"rank {self.next} to free slot {slot} (seq {seq}, ring algorithm)",
        )
        self._rt.streamWaitEvent(self.copy_stream.ptr, self.next_free[slot], 0)

    def send(self, slot: int, source: Source, start: int, count: int) -> None:
        rt = self._rt
        if self._last_fold_event is not None:
            # The chunk may come from a fold: order after the latest fold enqueued so far.
            rt.streamWaitEvent(self.copy_stream.ptr, self._last_fold_event, 0)
            self._last_fold_event = None
        if count:
            src = (self._in if source is Source.INPUT else self._out) + start * self._itemsize
            rt.memcpyAsync(self.peer_slots[self.next][slot], src, count * self._itemsize,
                           rt.memcpyDeviceToDevice, self.copy_stream.ptr)

    def post_slot_full(self, slot: int, seq: int) -> None:
        self._rt.eventRecord(self.full_events[slot], self.copy_stream.ptr)
        self.board.post(self.next, FULL[slot], seq)  # after the record: see the module docstring

    def wait_slot_full(self, slot: int, seq: int) -> None:
        self.waiter.counter_at_least(
            self.board, self.rank, FULL[slot], seq,
            lambda: f"rank {self.prev} to fill slot {slot} (seq {seq}, ring algorithm)",
        )
        self._rt.streamWaitEvent(self.fold_stream.ptr, self.prev_full[slot], 0)

    def fold(self, slot: int, start: int, count: int, reduce: bool) -> None:
        if not count:
            return
        offset = start * self._itemsize
        if reduce:
            self.kernel.launch(self._fn, self._out + offset, self._in + offset,
                               self.own_slots[slot], count, self._itemsize, self.fold_stream)
        else:  # an SM copy kernel here measured the same as the copy engine (4640 vs 4648 us, 1 GiB)
            self._rt.memcpyAsync(self._out + offset, self.own_slots[slot], count * self._itemsize,
                                 self._rt.memcpyDeviceToDevice, self.fold_stream.ptr)

    def post_slot_free(self, slot: int, seq: int) -> None:
        event = self.free_events[slot]
        self._rt.eventRecord(event, self.fold_stream.ptr)
        self.board.post(self.rank, FREE[slot], seq)
        # The same record marks "every fold so far has run" for this rank's next send.
        self._last_fold_event = event

    def copy_input(self) -> None:
        call = self._call
        nbytes = call.count * call.dtype.itemsize
        self._rt.memcpyAsync(call.recv.address, call.send.address, nbytes,
                             self._rt.memcpyDeviceToDevice, call.stream.ptr)

    # -- tear-down -----------------------------------------------------------------------

    def close(self) -> None:
        """Collective: drain both streams, unmap peers' memory, then free what this rank exported."""
        if not self.base:
            return
        self.copy_stream.synchronize()
        self.fold_stream.synchronize()
        self.node.Barrier()  # no rank still copies into a peer's slots
        for ptr in self._opened_mem:
            self._rt.ipcCloseMemHandle(ptr)
        for event in self._opened_events:
            self._rt.eventDestroy(event)
        self._opened_mem.clear()
        self._opened_events.clear()
        self.node.Barrier()  # every peer has unmapped this rank's slots: now they may go
        self._release_local()
        self.board.close()

    def _release_local(self) -> None:
        for event in self._own_events:
            self._rt.eventDestroy(event)
        self._own_events.clear()
        if self.base:
            self._rt.free(self.base)
            self.base = 0
