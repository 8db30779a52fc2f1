"""``hier``: the hierarchical allreduce, for communicators that span nodes (what ``auto`` runs
there).

Inside each node the ring reduce-scatters over the node's ranks (each rank ends with 1/L of
the node's sum), an existing engine allreduces that shard between nodes along the rank's
*rail* (the ranks at the same place on every node: NCCL or a CUDA-aware MPI for GPU arrays,
:mod:`mpiring.context.rails`; MPI for host arrays), and the ring all-gathers inside the node.
On GPUs the message goes in pieces (``batches=``: 1 turns the pipelining off) so that the
network carries one piece while the copy engines reduce-scatter the next (:class:`GpuHier`).

Per piece ``k`` of the message (GPUs):

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
numbers and NCCL's collective order agree. Nodes of different sizes cannot line their shards
up: there the GPU runs a flat ``ncclAllReduce`` over every rank, and the host a ring allreduce
in each node, the node leaders' ``MPI_Allreduce`` and a broadcast from the leader in each node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from mpi4py import MPI

from ..core.buffers import Memory
from ..core.errors import InvalidArgumentError
from ..core.mpi_ops import mpi_op
from ..ring.schedule import Phase, RingPlan, chunk_bounds
from ..ring.transports.base import CallBuffers
from .base import BOTH, Algorithm, Call, Scope

if TYPE_CHECKING:
    from ..context.base import Backend
    from ..context.gpu import GpuBackend
    from ..context.host import HostBackend

NAME = "hier"
PIECE_BYTES = 32 << 20  # pipelining pays once each piece keeps NVLink and network busy a while
MAX_PIECES = 8
INTER_HINT = ("a rank on another node did not reach the same call, or crashed (raise MPIRING_TIMEOUT if "
              "it is just slow); this communicator now refuses further use")


def pieces(count: int, itemsize: int, asked: int | None, gpus: int = 2, nodes: int = 2) -> int:
    """Pieces of a hierarchical allreduce on GPUs: as asked, else one per 32 MiB, at most 8,
    where there are two stages to overlap (several GPUs per node and several nodes; else one)."""
    if asked is not None:
        return max(1, min(asked, count or 1))
    if gpus == 1 or nodes == 1:
        return 1
    return max(1, min(MAX_PIECES, count * itemsize // PIECE_BYTES, count or 1))


def batches(backend: Backend, count: int, dtype: np.dtype, asked: int | None) -> int:
    """Pieces of a call: on the host one unless asked (its steps run one after the other
    anyway); on GPUs :func:`pieces`."""
    if backend.memory is Memory.HOST:
        return max(1, min(asked or 1, count or 1))
    return pieces(count, np.dtype(dtype).itemsize, asked, backend.node_size,
                  backend.groups.topology.nodes)


def check(backend: Backend, call: Call) -> None:
    if backend.memory is Memory.HOST and call.recv.dtype.name == "bfloat16":
        raise InvalidArgumentError("algorithm 'hier' cannot reduce bfloat16 host arrays between nodes "
                                   "(MPI has no bfloat16 type): use float32, or GPU arrays")


def run(backend: Backend, call: Call) -> None:
    if backend.memory is Memory.HOST:
        with np.errstate(all="ignore"):  # folds follow IEEE (inf, nan), whatever the caller's seterr
            _run_host(cast("HostBackend", backend), call)
        return
    gpu = cast("GpuBackend", backend)
    # Made at the first call (collective: every rank agreed on the algorithm before this),
    # closed with the context (after its work drained).
    gpu.state(NAME, lambda: GpuHier(gpu)).run(call)


# -- GPU arrays -----------------------------------------------------------------------------


class GpuHier:
    """What one communicator's hierarchical allreduce holds on GPUs: the inter-node engine on
    its rail, a net stream and a gather stream, and two events."""

    def __init__(self, gpu: GpuBackend) -> None:
        import cupy

        from ..context.rails import rail_engine

        self.gpu = gpu
        groups = gpu.groups
        self.even = groups.topology.even
        self.engine: Any = None
        if self.even and groups.rail.size > 1:
            self.engine = rail_engine(gpu.inter, groups.rail, gpu.timeouts.waiter(gpu.rank))
        self.net_stream = cupy.cuda.Stream(non_blocking=True)
        self.gather_stream = cupy.cuda.Stream(non_blocking=True)
        make = lambda: cupy.cuda.Event(disable_timing=True)  # noqa: E731
        self.scattered, self.gathered = make(), make()
        self.net_done = [make(), make()]

    def run(self, call: Call) -> None:
        gpu = self.gpu
        recv, op = call.recv, call.op
        stream = gpu.ordered_stream()
        if not self.even:  # shards of nodes of different sizes would not line up
            gpu.nccl_baselines().allreduce(call.source.address, recv.address, recv.count,
                                           recv.dtype, op, stream)
            return
        L, item = gpu.node_size, recv.dtype.itemsize
        if L == 1 and self.engine is not None:  # one GPU per node: the rail's allreduce is all
            self.engine.allreduce(call.source.address, recv.address, recv.count, recv.dtype, op, stream)
            return
        nodes = gpu.groups.topology.nodes
        parts = chunk_bounds(recv.count, pieces(recv.count, item, call.batches, L, nodes))
        plans = [RingPlan(L, hi - lo, gpu.ring_batches(hi - lo, recv.dtype, None), Phase.REDUCE_SCATTER)
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
        self.gpu.ring_call(plan, CallBuffers(send, recv.part(lo, hi - lo), hi - lo, recv.dtype,
                                             call.op, stream))
        self.scattered.record(stream)
        self.net_stream.wait_event(self.scattered)
        b0, b1 = plan.blocks[self.gpu.node_rank]
        if self.engine is not None:
            shard = recv.address + (lo + b0) * item
            self.engine.allreduce(shard, shard, b1 - b0, recv.dtype, call.op, self.net_stream)
        self.net_done[k % 2].record(self.net_stream)

    def _gather(self, k: int, part: tuple[int, int], plan: RingPlan, call: Call) -> None:
        lo, hi = part
        self.gather_stream.wait_event(self.net_done[k % 2])
        gather = RingPlan(plan.size, plan.count, plan.batches, Phase.ALLGATHER)
        self.gpu.ring_call(gather, CallBuffers(None, call.recv.part(lo, hi - lo), hi - lo,
                                               call.recv.dtype, call.op, self.gather_stream))

    def close(self, abandon: bool = False) -> None:
        """The rail's engine: closed, or aborted after a failure (peers may be gone)."""
        if self.engine is not None:
            self.engine.abort() if abandon else self.engine.close()
        self.engine = None


# -- host arrays ----------------------------------------------------------------------------


def _run_host(host: HostBackend, call: Call) -> None:
    """Per piece: ring reduce-scatter in the node, ``MPI_Allreduce`` of this rank's block on
    its rail, ring all-gather in the node. Uneven nodes: ring allreduce in the node, the node
    leaders' allreduce (rail 0), and a broadcast from the leader in the node."""
    recv, op = call.recv, call.op
    send = None if call.send is None else call.send.array
    if not host.groups.topology.even:
        return _run_host_uneven(host, call)
    L, r = host.node_size, host.node_rank
    for lo, hi in chunk_bounds(recv.count, batches(host, recv.count, recv.dtype, call.batches)):
        n = hi - lo
        part = recv.array[lo:hi]
        nb = host.ring_batches(n, recv.dtype, None)
        scatter = RingPlan(L, n, nb, Phase.REDUCE_SCATTER)
        host.pipeline.run(scatter, CallBuffers(None if send is None else send[lo:hi], part, n,
                                               recv.dtype, op))
        b0, b1 = scatter.blocks[r]
        _inter(host, host.groups.rail, part[b0:b1], op, "the inter-node allreduce on its rail")
        host.pipeline.run(RingPlan(L, n, nb, Phase.ALLGATHER), CallBuffers(None, part, n, recv.dtype, op))
    return None


def _run_host_uneven(host: HostBackend, call: Call) -> None:
    recv = call.recv
    nb = host.ring_batches(recv.count, recv.dtype, None)
    host.pipeline.run(RingPlan(host.node_size, recv.count, nb),
                      CallBuffers(None if call.send is None else call.send.array, recv.array,
                                  recv.count, recv.dtype, call.op))
    if host.node_rank == 0:  # rail 0 holds one rank of every node: the leaders
        _inter(host, host.groups.rail, recv.array, call.op, "the node leaders' allreduce")
    node = host.groups.node
    host.waiter.request(node.Ibcast(recv.array, root=0),
                        lambda: "its node leader to broadcast the result", hint=INTER_HINT,
                        buffers=(recv.array,))


def _inter(host: HostBackend, comm: MPI.Intracomm, data: np.ndarray, op, what: str) -> None:
    """``MPI_Allreduce`` in place on ``comm``, polled so that it is bounded by the timeout
    (as a whole: MPI shows no progress inside it)."""
    if comm.size == 1 or data.size == 0:
        return
    request = comm.Iallreduce(MPI.IN_PLACE, data, op=mpi_op(op, data.dtype))
    host.waiter.request(request, lambda: f"every node to join {what}", hint=INTER_HINT,
                        buffers=(data,))


ROW = Algorithm(
    NAME, 9, BOTH, run,
    summary="ring reduce-scatter in each node, NCCL / MPI allreduce between nodes on each rank's "
            "rail, ring all-gather in each node; pipelined in pieces",
    best_for="communicators that span nodes",
    batches=batches, check=check, scope=Scope.ANY,
)
