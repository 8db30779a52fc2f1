"""Everything a communicator holds on the GPU: its device, the IPC staging, the copy-engine
ring, the one-shot/two-shot kernels, the NCCL baselines, and the watchdog that bounds them."""

from __future__ import annotations

import contextlib
import os

from mpi4py import MPI

from ..buffers import Buffer
from ..errors import InvalidArgumentError, MpiringError, SetupError
from ..ops import Op
from ..pipeline import RingPipeline
from ..schedule import RingPlan, choose_batches
from ..signals import Waiter
from ..transports.base import CallBuffers
from ..transports.cuda_ipc import CudaIpcTransport
from .device import bind_device, check_device_pointer
from .direct import DirectKernels
from .kernels import FoldKernel
from .layout import StagingLayout
from .memops import StreamMemOps
from .resources import LIVE
from .staging import IpcStaging
from .watchdog import NOT_READY, HostStatus, Watchdog

# Two 128 MiB ring slots per rank: every transfer still costs about 9 us of GPU time, so big
# chunks pay (1 GiB on 4 H200s: 5147 / 4703 / 4480 / 4410 us with 16 / 32 / 64 / 128 MiB slots).
DEFAULT_SLOT_BYTES = 128 << 20
ONESHOT_BYTES = 4 << 20  # a one-shot slot (two per rank): messages up to 4 MiB / ranks
TWOSHOT_BYTES = 32 << 20  # the two-shot chunk (two staging halves of it per rank)
# Grid of the direct kernels (equal on all ranks; set-up checks). Two-shot at 64 MiB on 4 H200s:
# 458 / 425 / 389 us with 32 / 64 / 128 blocks; one-shot latency barely moves (8.1 vs 7.8 us).
DIRECT_BLOCKS = int(os.environ.get("MPIRING_DIRECT_BLOCKS", 128))


def staging_layout(slot_bytes: int | None) -> StagingLayout:
    """The staging of one communicator, from the ring slot size asked for (64 KiB multiples)."""
    slot = DEFAULT_SLOT_BYTES if slot_bytes is None else int(slot_bytes)
    if slot <= 0:
        raise InvalidArgumentError(f"slot_bytes must be positive, got {slot_bytes}")
    slot = -(-slot // (64 << 10)) * (64 << 10)
    return StagingLayout(slot, ONESHOT_BYTES, TWOSHOT_BYTES, DIRECT_BLOCKS)


class GpuContext:
    """The GPU side of one communicator. Staging memory per rank: ``layout.alloc_bytes``
    (2 ring slots + 2 one-shot slots + 2 two-shot halves + 64 KiB of flags, rounded to
    2 MiB: 330 MiB by default), plus ``slot_bytes`` for nccl-ring once that is used, plus
    64 bytes of pinned host memory for the status block.

    Failures: :meth:`failure` returns what the watchdog or a kernel reported (a wait past
    ``timeout``, or an abort by a peer); the communicator checks it before every call.
    """

    def __init__(self, comm: MPI.Intracomm, node: MPI.Intracomm, device: int | None,
                 slot_bytes: int | None, timeout: float) -> None:
        import cupy

        self._cupy = cupy
        self._rt = cupy.cuda.runtime
        self.comm = comm
        self.rank = comm.rank
        self.timeout = timeout
        self.layout = staging_layout(slot_bytes)
        self.slot_bytes = self.layout.slot_bytes
        self.device_id = bind_device(node, device, timeout)
        self.staging = None
        self.status = None
        self.transport: CudaIpcTransport | None = None
        self.watchdog: Watchdog | None = None
        self._nccl = None
        self._events: list[int] = []
        self._last_stream = None
        try:
            self.status = HostStatus()
            self.staging = IpcStaging(node, self.layout, timeout)
            abort_word = self.staging.addr(self.rank, self.layout.abort)
            self.kernel = FoldKernel(self.device_id, abort_word, self.status.ptr)
            self.memops = StreamMemOps(self.device_id)
            self.transport = CudaIpcTransport(self.staging, self.memops, self.kernel)
            self.pipeline = RingPipeline(self.transport)
            self.direct = DirectKernels(self.staging, self.layout, self.status.ptr, timeout)
            self._switch_event, self._sync_event = (
                self._new_event() for _ in range(2))
            self.watchdog = Watchdog(self.device_id, self.staging, self.memops, timeout)
        except BaseException as err:  # a SetupError came on every rank alike: then meet to free
            with contextlib.suppress(MpiringError):  # the set-up error is the one to report
                self.close(abandon=not isinstance(err, SetupError))
            raise

    def _new_event(self) -> int:
        event = self._rt.eventCreateWithFlags(self._rt.eventDisableTiming)
        self._events.append(event)
        LIVE["events"] += 1
        return event

    @property
    def oneshot_limit(self) -> int:
        """The largest message, in bytes, the one-shot kernel takes."""
        return self.direct.oneshot_limit

    def failure(self) -> MpiringError | None:
        """What went wrong on the GPU (a wait past the timeout, an abort by a peer), or None."""
        if self.watchdog is not None and self.watchdog.error is not None:
            return self.watchdog.error
        return self.status.error(self.rank, self.timeout)

    def current_stream(self):
        """The caller's current CuPy stream, on which calls are ordered."""
        return self._cupy.cuda.get_current_stream()

    def ordered_stream(self):
        """The caller's stream, made to wait for the previous call if that ran on another
        stream: mpiring's own calls share flags and staging, so they must never overlap."""
        stream = self.current_stream()
        last = self._last_stream
        if last is not None and last.ptr != stream.ptr:
            self._rt.eventRecord(self._switch_event, last.ptr)
            self._rt.streamWaitEvent(stream.ptr, self._switch_event, 0)
        self._last_stream = stream  # holding it keeps the stream alive for the next switch
        return stream

    def capturing(self) -> bool:
        """Whether the caller's stream is being captured into a CUDA graph."""
        return self.current_stream().is_capturing()

    def check_buffer(self, buf: Buffer, role: str) -> None:
        """Raise unless ``buf`` is plain device memory on this rank's GPU."""
        check_device_pointer(buf, self.device_id, role)

    def run_ring(self, plan: RingPlan, call: CallBuffers) -> None:
        """Enqueue one ring call on the caller's (ordered) stream, followed by the watchdog."""
        events = self.watchdog.events()
        stream = call.stream.ptr
        self._rt.eventRecord(events[0], stream)
        base = self.pipeline.next_seq
        try:
            self.pipeline.run(plan, call)
        except BaseException:
            self.watchdog.give_back(events)
            raise
        self._rt.eventRecord(events[1], stream)
        self.watchdog.watch(events, plan, base)

    def direct_call(self, kind: str, send: Buffer | None, recv: Buffer, op: Op) -> None:
        """Run the one-shot or two-shot kernel on the caller's stream (one launch)."""
        src = recv.address if send is None else send.address
        self.direct.launch(kind, src, recv.address, recv.count, recv.dtype, op, self.ordered_stream())

    def baseline(self, algo: str, send: Buffer | None, recv: Buffer, op: Op,
                 batches: int | None) -> None:
        """Run ``nccl`` or ``nccl-ring`` on the caller's stream."""
        from ..baselines.nccl import NcclBaselines

        if self._nccl is None:  # collective: every rank agreed on the algorithm before this
            self._nccl = NcclBaselines(self.comm, self.slot_bytes, self.kernel)
        stream = self.ordered_stream()  # nccl-ring reuses one staging buffer across calls
        src = recv.address if send is None else send.address
        if algo == "nccl":
            self._nccl.allreduce(src, recv.address, recv.count, recv.dtype, op, stream)
            return
        if self.comm.size == 1:
            if send is not None:
                self._rt.memcpyAsync(recv.address, send.address, recv.nbytes,
                                     self._rt.memcpyDeviceToDevice, stream.ptr)
            return
        nb = self.ring_batches(recv.count, recv.dtype, batches)
        self._nccl.ring(RingPlan(self.comm.size, recv.count, nb), src, recv.address, recv.dtype,
                        op, stream)

    def ring_batches(self, count: int, dtype, batches: int | None) -> int:
        """Mini-batches of nccl-ring: as asked (default 1), raised so a chunk fits the staging."""
        capacity = self.slot_bytes // dtype.itemsize
        return choose_batches(count, self.comm.size, capacity, batches, 1)

    def synchronize(self) -> None:
        """Wait until this rank's calls on this communicator have finished on the GPU.

        Bounded: the watchdog and the kernels' own clocks end every wait for a peer within the
        timeout; past twice that (plus 5 s for work queued ahead on the stream) this raises.
        """
        waiter = Waiter(2 * self.timeout + 5.0, self.rank)
        streams = {s.ptr for s in (self._last_stream, self.current_stream()) if s is not None}
        for ptr in streams:
            self._rt.eventRecord(self._sync_event, ptr)
            waiter.until(lambda: self._rt.eventQuery(self._sync_event) != NOT_READY,
                         lambda: "this rank's GPU work on the communicator to finish",
                         hint="work queued ahead of it on the stream is slow, or the GPU hangs")
        waiter.until(self.watchdog.idle, lambda: "the watchdog to retire this rank's ring calls")

    def close(self, abandon: bool = False) -> MpiringError | None:
        """Collective (bounded): drain this rank's GPU work, then unmap and free. Returns the
        failure the drained work met (see :meth:`failure`), if any.

        ``abandon`` (the communicator failed), or a failure seen while draining: peers may be
        gone or still running work the abort released, so the staging is unmapped but not
        freed, and no rank is waited for. If the drain itself expires, nothing the GPU may
        still touch is released (it stays until the process exits) and the timeout is raised.
        """
        drained = True
        error: BaseException | None = None
        seen = None
        if self.watchdog is not None:
            try:
                self.synchronize()
            except MpiringError as err:
                drained, abandon, error = False, True, err
            seen = self.failure()
            abandon = abandon or seen is not None
        if self._nccl is not None:
            if abandon:
                self._nccl.abort()
            else:
                self._nccl.close()
            self._nccl = None
        self._last_stream = None
        if self.watchdog is not None:
            self.watchdog.close(drained)
            self.watchdog = None
        if self.transport is not None:
            self.transport.close()
            self.transport = None
        for event in self._events:
            self._rt.eventDestroy(event)
            LIVE["events"] -= 1
        self._events.clear()
        if self.status is not None and drained:
            self.status.close()
        if self.staging is not None and drained:
            self.staging.close(abandon=abandon)
        if error is not None:
            raise error
        return seen
