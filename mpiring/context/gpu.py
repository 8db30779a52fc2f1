"""GPU arrays: everything a communicator holds on the GPU — its device, the IPC staging, the
copy-engine rings, the one-shot/two-shot kernels, the NCCL baselines, and the watchdog that
bounds them. The pieces are in ``mpiring/cuda`` (the toolkit) and ``mpiring/ring/transports``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
from mpi4py import MPI

from ..core import settings
from ..core.buffers import Buffer, Memory
from ..core.descriptor import Descriptor
from ..core.errors import MpiringError, SetupError
from ..cuda.contract import MM_COUNT, STATE
from ..cuda.grids import GridLimits
from ..cuda.layout import MAX_RANKS, staging_layout
from ..cuda.status import ABORT_HINT
from ..node.control import ControlBoard
from ..node.timeouts import TimeoutPolicy
from ..ring.pipeline import RingPipeline
from ..ring.schedule import RingPlan, choose_batches, default_batches
from ..ring.stall import RingFlags, stall_error
from ..ring.transports.base import CallBuffers
from ..ring.transports.cuda_events import CudaEventTransport
from ..ring.transports.cuda_ipc import CudaIpcTransport
from .base import Backend, ring_shape

if TYPE_CHECKING:
    from ..core.collective import Call, Collective
    from ..cuda.direct_kernels import DirectKernels
    from ..cuda.event_staging import EventStaging
    from ..cuda.fold_kernel import FoldKernel
    from ..cuda.layout import StagingLayout
    from ..cuda.memops import StreamMemOps
    from ..cuda.staging import IpcStaging
    from ..cuda.watchdog import HostStatus, Watchdog
    from ..node.groups import Groups
    from .nccl import NcclBaselines


class ReplayHooks(NamedTuple):
    """What the compiled replay (:mod:`mpiring.call.hot_replay`) reads of a GPU backend at every
    call instead of asking it: addresses of int64 words, valid while the backend is open (the
    communicator drops every replay before it closes the backend), and the stream order."""

    gpu_state: int  # the status block's STATE word: nonzero once a kernel reported a failure
    watchdog_failed: int  # nonzero once the watchdog recorded an error (failure() reads both)
    skipped: int  # the status block's MM_COUNT: calls the GPU-side agreement check skipped
    stream_order: list[Any]  # GpuBackend.stream_order: [latest call's stream, its handle]
    current_stream: Callable[[], Any]  # CuPy's get_current_stream: the caller's stream


class GpuBackend(Backend):
    """The GPU side of one communicator. Staging memory per rank: ``layout.alloc_bytes``
    (2 ring slots + 2 one-shot slots + 2 two-shot halves + 2 oneshot-ll slots + 64 KiB of
    flags, rounded to 2 MiB: 332 MiB by default), plus ``2 * slot_bytes`` for ring-events and ``slot_bytes``
    for nccl-ring once those are used, plus 64 bytes of pinned host memory (the status block).

    Failures: :meth:`failure` returns what the watchdog or a kernel reported (a wait past
    the timeout, or an abort by a peer); the communicator checks it before every call.

    SMs: with ``sm_budget``, no kernel of mpiring's launches more blocks (a block runs on one
    SM): fold/copy/average loop over their grid, the one-/two-shot grid is set at set-up, and
    oneshot-ll's largest message shrinks to ``sm_budget * 8 KiB`` (a block per 8 KiB). NCCL's
    kernels are NCCL's (``NCCL_MAX_NCHANNELS``).
    """

    memory = Memory.CUDA

    def __init__(self, groups: Groups, board: ControlBoard, device: int | None,
                 slot_bytes: int | None, timeouts: TimeoutPolicy, inter: str = "auto",
                 sm_budget: int | None = None) -> None:
        import cupy

        from ..cuda.device import bind_device
        from ..cuda.direct_kernels import DirectKernels
        from ..cuda.fold_kernel import FoldKernel
        from ..cuda.memops import StreamMemOps
        from ..cuda.resources import LIVE
        from ..cuda.staging import IpcStaging
        from ..cuda.watchdog import HostStatus, Watchdog
        from .rails import check_inter

        self._cupy = cupy
        self._rt = cupy.cuda.runtime
        self._live = LIVE
        check_inter(inter, groups)  # before anything is allocated: the same verdict on every rank
        self.groups, self.board, self.inter = groups, board, inter
        self.comm: MPI.Intracomm = groups.comm
        self.node: MPI.Intracomm = groups.node
        self.rank, self.size = self.comm.rank, self.comm.size
        self.timeouts = timeouts
        # oneshot-ll's slots split among the node's ranks (IpcStaging refuses more than
        # MAX_RANKS with its own message, so the layout is not the one to refuse them).
        self.layout: StagingLayout = staging_layout(slot_bytes, sm_budget, min(self.node.size, MAX_RANKS))
        self.slot_bytes: int = self.layout.slot_bytes
        self.device_id, self.shares_gpu, self.node_buses = bind_device(
            self.node, groups.shared.rank, device, timeouts.seconds)
        sms = cupy.cuda.Device(self.device_id).attributes["MultiProcessorCount"]
        # At most the GPU's SMs (per rank; only the direct grid, from the budget as given, must agree).
        self.sm_budget: int | None = None if sm_budget is None else min(sm_budget, sms)
        # What bounds the kernels' grids (the rows' SM statements read it: Algorithm.sm_work).
        self.grids: GridLimits = GridLimits.of(sms, sm_budget, settings.integer("MPIRING_LL_BLOCK_LINES"))
        self.staging: IpcStaging | None = None
        self.status: HostStatus | None = None
        self.transport: CudaIpcTransport | None = None
        self.watchdog: Watchdog | None = None
        self._events_ring: tuple[EventStaging, CudaEventTransport, RingPipeline] | None = None
        self._nccl: NcclBaselines | None = None
        self._events: list[int] = []
        # The stream the latest call was enqueued on and its handle, as ordered_stream() leaves
        # them: a list, so that the compiled replay reads both with two loads (ReplayHooks).
        self.stream_order: list[Any] = [None, 0]
        try:
            self.status = HostStatus()
            self.staging = IpcStaging(self.node, self.layout, timeouts.seconds)
            abort_word = self.staging.addr(self.staging.rank, self.layout.abort)
            self.kernel: FoldKernel = FoldKernel(self.device_id, abort_word, self.status.ptr,
                                                 self.grids.fold_cap)
            self.memops: StreamMemOps = StreamMemOps(self.device_id)
            self.transport = CudaIpcTransport(self.staging, self.memops, self.kernel)
            self.pipeline = RingPipeline(self.transport)
            self.direct: DirectKernels = DirectKernels(self.staging, self.layout, self.status.ptr,
                                                       timeouts.seconds, self.grids.ll_max_blocks,
                                                       self.grids.ll_block_lines)
            self._switch_event, self._sync_event = (self._new_event() for _ in range(2))
            self.watchdog = Watchdog(self.device_id, self.staging, self.memops, timeouts.seconds,
                                     groups.node_ranks)
        except BaseException as err:  # a SetupError came on every rank alike: then meet to free
            with contextlib.suppress(MpiringError):  # the set-up error is the one to report
                self.close(abandon=not isinstance(err, SetupError))
            raise

    def _new_event(self) -> int:
        event = self._rt.eventCreateWithFlags(self._rt.eventDisableTiming)
        self._events.append(event)
        self._live["events"] += 1
        return event

    # -- what the communicator asks ------------------------------------------------------

    def failure(self) -> MpiringError | None:
        """What went wrong on the GPU (a wait past the timeout, an abort by a peer), or None."""
        if self.watchdog is not None and self.watchdog.error is not None:
            return self.watchdog.error
        return self.status.error(self.rank, self.timeouts.seconds)

    def current_stream(self) -> Any:
        """The caller's current CuPy stream, on which calls are ordered."""
        return self._cupy.cuda.get_current_stream()

    def ordered_stream(self) -> Any:
        """The caller's stream, made to wait for the previous call if that ran on another
        stream: mpiring's own calls share flags and staging, so they must never overlap."""
        stream = self.current_stream()
        order = self.stream_order
        last = order[0]
        if last is not stream:
            if last is not None and last.ptr != stream.ptr:
                self._rt.eventRecord(self._switch_event, last.ptr)
                self._rt.streamWaitEvent(stream.ptr, self._switch_event, 0)
            # Holding it keeps the stream alive for the next switch (and its identity unique:
            # the compiled replay compares the current stream with it by identity).
            order[0], order[1] = stream, stream.ptr
        return stream

    @property
    def last_stream(self) -> Any:
        """The stream :meth:`ordered_stream` last handed out: where the latest call was
        enqueued (None before the first)."""
        return self.stream_order[0]

    def replay_hooks(self) -> ReplayHooks:
        """What the compiled replay reads instead of calling :meth:`failure`, :meth:`skipped`
        and :meth:`ordered_stream` (:class:`ReplayHooks`)."""
        assert self.status is not None and self.watchdog is not None  # made by set-up
        return ReplayHooks(self.status.ptr + 8 * STATE, self.watchdog.failed_address,
                           self.status.ptr + 8 * MM_COUNT, self.stream_order,
                           self._cupy.cuda.get_current_stream)

    def capturing(self) -> bool:
        return self.current_stream().is_capturing()

    def nccl_unavailable(self) -> str | None:
        """Why NCCL cannot run on this communicator's GPUs, or None."""
        if self.shares_gpu:
            return "NCCL refuses several ranks on one GPU (MPIRING_SHARE_GPU=1, a testing mode)"
        return None

    def check_buffer(self, buf: Buffer, role: str) -> None:
        """Raise unless ``buf`` is plain device memory on this rank's GPU."""
        from ..cuda.device import check_device_pointer

        check_device_pointer(buf, self.device_id, role)

    # -- what algorithms call ------------------------------------------------------------

    def run_ring(self, call: Call, collective: Collective, events: bool = False) -> None:
        """Enqueue one ring call of ``collective`` on the caller's (ordered) stream."""
        recv = call.recv
        shape = ring_shape(collective, call, self.node_rank, self.node_size)
        stream = self.ordered_stream()
        m, r, item = shape.block, self.node_rank, recv.dtype.itemsize
        if shape.gather_first:  # all-gather out of place: our block first, then the ring
            self._rt.memcpyAsync(recv.address + r * m * item, call.send.address, m * item,
                                 self._rt.memcpyDeviceToDevice, stream.ptr)
        nb = self.ring_batches(shape.count, recv.dtype, call.batches)
        plan = RingPlan(self.node_size, shape.count, nb, shape.phase, shape.compact)
        send = None if shape.in_place else call.send
        self.ring_call(plan, CallBuffers(send, recv, recv.count, recv.dtype, call.op, stream), events)
        if shape.front:  # reduce-scatter in place: MPI's result is the start of recvbuf
            self._rt.memcpyAsync(recv.address, recv.address + r * m * item, m * item,
                                 self._rt.memcpyDeviceToDevice, stream.ptr)

    def ring_call(self, plan: RingPlan, buffers: CallBuffers, events: bool = False) -> None:
        """Enqueue ``plan`` on ``buffers.stream`` (work there before it runs first, work after
        it sees the result), followed by the watchdog."""
        stream = buffers.stream
        pipeline = self._event_pipeline() if events else self.pipeline
        pair = self.watchdog.events()
        self._rt.eventRecord(pair[0], stream.ptr)
        base = pipeline.next_seq
        try:
            pipeline.run(plan, buffers)
        except BaseException:
            self.watchdog.give_back(pair)
            raise
        self._rt.eventRecord(pair[1], stream.ptr)
        # The watchdog diagnoses a stall of the memops ring from its flags; the event ring has
        # no flags to read (its host waits name the late peer themselves): it watches the
        # counters of the event ring's host waits for progress instead.
        if events:
            assert self._events_ring is not None  # made by _event_pipeline() above
            self.watchdog.watch(pair, base, None, self._events_ring[1].progress)
        else:
            names, rank, timeout = self.groups.node_ranks, self.node_rank, self.timeouts.seconds
            self.watchdog.watch(pair, base, lambda flags: stall_error(
                plan, rank, base, *cast(RingFlags, flags), timeout=timeout, hint=ABORT_HINT, names=names))

    def ring_batches(self, count: int, dtype: np.dtype, asked: int | None) -> int:
        capacity = self.slot_bytes // np.dtype(dtype).itemsize
        size = self.node_size
        return choose_batches(count, size, capacity, asked,
                              default_batches(count * np.dtype(dtype).itemsize, size))

    def _event_pipeline(self) -> RingPipeline:
        """The event-signalled ring, set up on first use (collective: every rank agreed on the
        algorithm before this; bounded by the timeout)."""
        if self._events_ring is None:
            from ..cuda.event_staging import EventStaging

            staging = EventStaging(self.node, self.slot_bytes, self.timeouts.seconds)
            try:
                transport = CudaEventTransport(staging, self.board.shared, self.kernel, self.timeouts)
            except BaseException:
                staging.close(abandon=True)
                raise
            self._events_ring = (staging, transport, RingPipeline(transport))
        return self._events_ring[2]

    @property
    def event_ring(self) -> RingPipeline | None:
        """The event-signalled ring's pipeline (``ring-events``), or None until that row's first
        call made it (collectively)."""
        return None if self._events_ring is None else self._events_ring[2]

    def disable_timeouts(self) -> None:
        """This rank's GPU timeouts off for good: the watchdog never gives a ring call a verdict,
        and the direct kernels' clocks never expire (``Communicator.disable_gpu_timeouts``, a
        testing aid). Host waits keep theirs."""
        assert self.watchdog is not None  # made by set-up
        self.watchdog.timeout = float("inf")
        self.direct.disable_timeout()

    def notice(self, desc: Descriptor) -> None:
        """This rank's part in a GPU-checked call that it cannot run (``desc``: a notice of
        :mod:`mpiring.core.descriptor`), on the caller's stream: its peers' kernels then skip the call.
        Not while a CUDA graph is being captured (it would run only at replay)."""
        if not self.capturing():
            self.direct.notice(desc, self.ordered_stream())

    def skipped(self, describe: Callable[[str, int], str]) -> MpiringError | None:
        """The error of the calls that the GPU-side agreement check skipped since the last one
        raised (``PeerArgumentError`` or ``RankMismatchError``), or None. The communicator stays
        usable: the kernels left every rank in the same state."""
        return self.status.skipped(self.rank, describe)

    def copy(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        """Copy ``nbytes`` of device memory from ``src`` to ``dst`` on ``stream``."""
        self._rt.memcpyAsync(dst, src, nbytes, self._rt.memcpyDeviceToDevice, stream.ptr)

    def average(self, buf: Buffer, ranks: int) -> None:
        """``buf /= ranks`` on the caller's stream, after the call (one launch, capturable)."""
        self.kernel.average(buf.address, buf.count, buf.dtype, ranks, self.ordered_stream())

    def nccl_baselines(self) -> NcclBaselines:
        """The NCCL communicators of every rank, made at first use."""
        if self._nccl is None:  # collective: every rank agreed on the algorithm before this
            from .nccl import NcclBaselines

            self._nccl = NcclBaselines(self.comm, self.slot_bytes, self.kernel)
        return self._nccl

    # -- waiting and closing -------------------------------------------------------------

    def synchronize(self) -> None:
        """Wait until this rank's calls on this communicator have finished on the GPU.

        Bounded: the watchdog and the kernels' own clocks end every wait for a peer that goes
        the timeout without progress; past :attr:`TimeoutPolicy.drain_seconds` without a ring
        call finishing (progress: the clock restarts), this raises.
        """
        from ..cuda.watchdog import NOT_READY

        waiter = TimeoutPolicy(self.timeouts.drain_seconds).waiter(self.rank)
        streams = {s.ptr for s in (self.stream_order[0], self.current_stream()) if s is not None}
        for ptr in streams:
            self._rt.eventRecord(self._sync_event, ptr)
            waiter.until(lambda: self._rt.eventQuery(self._sync_event) != NOT_READY,
                         lambda: "this rank's GPU work on the communicator to finish",
                         hint="work queued ahead of it on the stream is slow, or the GPU hangs",
                         progress=lambda: self.watchdog.retired)
        waiter.until(self.watchdog.idle, lambda: "the watchdog to retire this rank's ring calls",
                     progress=lambda: self.watchdog.retired)

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
            self._nccl.abort() if abandon else self._nccl.close()
        self._nccl = None
        self.close_states(abandon)  # the rows' own state (hier's rail engine), once drained
        self.stream_order[:] = [None, 0]
        if self.watchdog is not None:
            self.watchdog.close(drained)
            self.watchdog = None
        if self._events_ring is not None:
            staging, transport, _ = self._events_ring
            self._events_ring = None
            transport.close()
            if drained:
                staging.close(abandon=abandon)
        if self.transport is not None:
            self.transport.close()
            self.transport = None
        for event in self._events:
            self._rt.eventDestroy(event)
            self._live["events"] -= 1
        self._events.clear()
        if self.status is not None and drained:
            self.status.close()
        if self.staging is not None and drained:
            self.staging.close(abandon=abandon)
        if error is not None:
            raise error
        return seen
