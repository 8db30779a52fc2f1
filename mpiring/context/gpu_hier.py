"""The hierarchical allreduce on GPUs: the copy-engine ring inside each node, an existing engine
(NCCL, or a CUDA-aware MPI) between nodes, pipelined in pieces.

Per piece ``k`` of the message (the hier row's ``batches``: :func:`pieces`):

    RS(k)   ring reduce-scatter over the node: this rank's block of piece k is the node's sum
    NET(k)  allreduce of that block on this rank's rail (the same place on every node)
    AG(k)   ring all-gather over the node

Issue order ``RS0 NET0 RS1 NET1 AG0 RS2 NET2 AG1 ... AG(K-1)``. The ring's streams run in
order ``RS0 RS1 AG0 RS2 AG1 ...``, so while the network carries piece k the copy engines
reduce-scatter piece k+1 (NVLink and network busy at once). Ordering, by events:

* NET(k) after RS(k): RS(k) runs from the caller's stream (its end makes that stream wait for
  the ring), and the net stream waits for an event recorded there right after;
* AG(k) after NET(k): the gather stream waits for ``net_done[k % 2]``, recorded after NET(k),
  and AG(k) runs from the gather stream. Two events alternate: NET(k+2) records the event of
  NET(k) again only after AG(k)'s wait was enqueued (issue order above);
* the caller's stream waits for the gather stream at the end.

Every rank issues the same ring plans and rail collectives in the same order, so sequence
numbers and NCCL's collective order agree. Uneven nodes (shards would not line up) run a flat
``ncclAllReduce`` over every rank instead: the documented fallback.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from mpi4py import MPI

from ..core import settings
from ..core.errors import InvalidArgumentError, SetupError, UnavailableError
from ..core.install import cuda_choices
from ..core.mpi_ops import builtin_op
from ..ring.schedule import Phase, RingPlan, chunk_bounds
from ..ring.transports.base import CallBuffers

if TYPE_CHECKING:
    from ..core.collective import Call
    from ..core.ops import Op
    from ..node.groups import Groups
    from ..node.timeouts import TimeoutPolicy
    from ..ring.schedule import RingPlan as Plan
    from .nccl import NcclBaselines

PIECE_BYTES = 32 << 20  # pipelining pays once each piece keeps NVLink and network busy a while
MAX_PIECES = 8
INTERS = ("auto", "nccl", "mpi")
CUDA_AWARE_ENV = "MPIRING_CUDA_AWARE_MPI"


class NodeRing(Protocol):
    """What the hierarchical allreduce uses of the GPU context it runs in
    (:class:`mpiring.context.gpu.GpuBackend` is one): the node's ring and its NCCL fallback."""

    groups: Groups
    timeouts: TimeoutPolicy
    rank: int

    @property
    def node_rank(self) -> int: ...
    @property
    def node_size(self) -> int: ...
    def ordered_stream(self) -> Any: ...
    def ring_batches(self, count: int, dtype: np.dtype, asked: int | None) -> int: ...
    def ring_call(self, plan: Plan, buffers: CallBuffers, events: bool = False) -> None: ...
    def nccl_baselines(self) -> NcclBaselines: ...


def pieces(count: int, itemsize: int, asked: int | None, gpus: int = 2, nodes: int = 2) -> int:
    """Pieces of a hierarchical allreduce: as asked, else one per 32 MiB, at most 8, where
    there are two stages to overlap (several GPUs per node and several nodes; else one)."""
    if asked is not None:
        return max(1, min(asked, count or 1))
    if gpus == 1 or nodes == 1:
        return 1
    return max(1, min(MAX_PIECES, count * itemsize // PIECE_BYTES, count or 1))


def cuda_aware_mpi() -> bool:
    """Whether the MPI library moves device memory: ``MPIRING_CUDA_AWARE_MPI=0|1`` if set, else
    the library's own answer (Open MPI's ``MPIX_Query_cuda_support``, MPICH's
    ``MPIX_GPU_query_support``), else False."""
    told = settings.flag(CUDA_AWARE_ENV)
    if told is not None:
        return told
    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        return bool(query())
    lib = ctypes.CDLL(None)
    if hasattr(lib, "MPIX_Query_cuda_support"):
        return bool(lib.MPIX_Query_cuda_support())
    if hasattr(lib, "MPIX_GPU_query_support"):
        answer = ctypes.c_int(0)
        lib.MPIX_GPU_query_support(0, ctypes.byref(answer))  # MPIX_GPU_SUPPORT_CUDA
        return bool(answer.value)
    return False


def check_inter(inter: str, groups: Groups) -> None:
    """Refuse an unknown engine, and ``inter="mpi"`` across nodes where the MPI cannot move
    device memory (the same answer on every rank: one MPI library)."""
    if inter not in INTERS:
        raise InvalidArgumentError(f"inter={inter!r}: choose one of {', '.join(map(repr, INTERS))}")
    if inter == "mpi" and groups.spans_nodes and not cuda_aware_mpi():
        raise SetupError(mpi_not_cuda_aware())


def mpi_not_cuda_aware() -> str:
    """Why ``inter="mpi"`` cannot run here, and the remedies."""
    return ("inter='mpi' needs a CUDA-aware MPI, and this one says it is not (or cannot say): use "
            f"inter='nccl' ({cuda_choices()}), or an MPI built with CUDA support (Open MPI "
            f"--with-cuda, MPICH with CUDA); set {CUDA_AWARE_ENV}=1 if yours is CUDA-aware but has "
            "no query")


class MpiRail:
    """Inter-node engine over a CUDA-aware MPI: ``MPI_Allreduce`` in place on device memory,
    polled so that it is bounded. MPI calls are host-ordered, so each one first waits (on the
    host) for the GPU work it reads."""

    def __init__(self, rail: MPI.Intracomm, backend: NodeRing) -> None:
        import cupy

        self.rail, self._cupy = rail, cupy
        self.waiter = backend.timeouts.waiter(backend.rank)
        self._ready = cupy.cuda.Event(disable_timing=True)

    def allreduce(self, src: int, dst: int, count: int, dtype: np.dtype, op: Op, stream: Any) -> None:
        if count == 0:
            return
        cupy = self._cupy
        if src != dst:
            cupy.cuda.runtime.memcpyAsync(dst, src, count * dtype.itemsize,
                                          cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr)
        if self.rail.size == 1:
            return
        self._ready.record(stream)
        self._ready.synchronize()  # this stream's work only: what the MPI call reads is ready
        memory = cupy.cuda.UnownedMemory(dst, count * dtype.itemsize, self)
        view = cupy.ndarray(count, dtype, cupy.cuda.MemoryPointer(memory, 0))
        request = self.rail.Iallreduce(MPI.IN_PLACE, view, op=builtin_op(op))
        self.waiter.request(request, lambda: "every node to join the inter-node allreduce (MPI)",
                            buffers=(view,))

    def close(self) -> None:
        pass

    abort = close


class NcclRail:
    """Inter-node engine over NCCL: one communicator per rail, made once (the unique id goes
    round the rail by MPI), ``ncclAllReduce`` in place on the net stream."""

    def __init__(self, rail: MPI.Intracomm) -> None:
        from .nccl import NcclBaselines

        self.nccl = NcclBaselines(rail, 0, None)

    def allreduce(self, src: int, dst: int, count: int, dtype: np.dtype, op: Op, stream: Any) -> None:
        self.nccl.allreduce(src, dst, count, dtype, op, stream)

    def close(self) -> None:
        self.nccl.close()

    def abort(self) -> None:
        self.nccl.abort()


class GpuHier:
    """What one communicator's hierarchical allreduce holds: the inter-node engine on its rail,
    a net stream and a gather stream, and two events."""

    def __init__(self, backend: NodeRing, inter: str) -> None:
        import cupy

        self.backend = backend
        groups = backend.groups
        self.even = groups.topology.even
        self.engine: Any = None
        if self.even and groups.rail.size > 1:
            self.engine = self._engine(inter, groups.rail)
        self.net_stream = cupy.cuda.Stream(non_blocking=True)
        self.gather_stream = cupy.cuda.Stream(non_blocking=True)
        make = lambda: cupy.cuda.Event(disable_timing=True)  # noqa: E731
        self.scattered, self.gathered = make(), make()
        self.net_done = [make(), make()]

    def _engine(self, inter: str, rail: MPI.Intracomm) -> Any:
        from .nccl import nccl_module

        if inter == "auto":
            try:
                nccl_module()
                inter = "nccl"
            except UnavailableError:
                inter = "mpi"
        if inter == "mpi":
            if not cuda_aware_mpi():  # inter="auto" without NCCL lands here
                raise UnavailableError(mpi_not_cuda_aware())
            return MpiRail(rail, self.backend)
        return NcclRail(rail)

    def run(self, call: Call) -> None:
        backend = self.backend
        recv, op = call.recv, call.op
        stream = backend.ordered_stream()
        if not self.even:  # shards of nodes of different sizes would not line up
            backend.nccl_baselines().allreduce(call.source.address, recv.address, recv.count,
                                                recv.dtype, op, stream)
            return
        L, item = backend.node_size, recv.dtype.itemsize
        if L == 1 and self.engine is not None:  # one GPU per node: the rail's allreduce is all
            self.engine.allreduce(call.source.address, recv.address, recv.count, recv.dtype, op, stream)
            return
        nodes = backend.groups.topology.nodes
        parts = chunk_bounds(recv.count, pieces(recv.count, item, call.batches, L, nodes))
        plans = [RingPlan(L, hi - lo, backend.ring_batches(hi - lo, recv.dtype, None), Phase.REDUCE_SCATTER)
                 for lo, hi in parts]
        self.gathered.record(stream)  # the gather stream starts after the caller's earlier work
        self.gather_stream.wait_event(self.gathered)
        for k in range(len(parts) + 1):
            if k < len(parts):
                self._scatter_and_reduce(k, parts[k], plans[k], call, stream)
            if k >= 1:
                self._gather(k - 1, parts[k - 1], plans[k - 1], call)
        self.gathered.record(self.gather_stream)
        stream.wait_event(self.gathered)

    def _scatter_and_reduce(self, k: int, part: tuple[int, int], plan: RingPlan, call: Call,
                            stream: Any) -> None:
        lo, hi = part
        recv, item = call.recv, call.recv.dtype.itemsize
        send = None if call.send is None else call.send.part(lo, hi - lo)
        self.backend.ring_call(plan, CallBuffers(send, recv.part(lo, hi - lo), hi - lo, recv.dtype,
                                                 call.op, stream))
        self.scattered.record(stream)
        self.net_stream.wait_event(self.scattered)
        b0, b1 = plan.blocks[self.backend.node_rank]
        if self.engine is not None:
            shard = recv.address + (lo + b0) * item
            self.engine.allreduce(shard, shard, b1 - b0, recv.dtype, call.op, self.net_stream)
        self.net_done[k % 2].record(self.net_stream)

    def _gather(self, k: int, part: tuple[int, int], plan: RingPlan, call: Call) -> None:
        lo, hi = part
        self.gather_stream.wait_event(self.net_done[k % 2])
        gather = RingPlan(plan.size, plan.count, plan.batches, Phase.ALLGATHER)
        self.backend.ring_call(gather, CallBuffers(None, call.recv.part(lo, hi - lo), hi - lo,
                                                   call.recv.dtype, call.op, self.gather_stream))

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine = None

    def abort(self) -> None:
        if self.engine is not None:
            self.engine.abort()
        self.engine = None
