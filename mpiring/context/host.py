"""Host arrays: the ring pipeline over node shared memory (the control board's payload), the
hierarchical allreduce (the ring inside each node, MPI between nodes), and ``MPI.Allreduce``
on the communicator."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from ..core.buffers import Buffer, Memory
from ..core.errors import InvalidArgumentError, MpiringError
from ..core.mpi_ops import mpi_op
from ..core.ops import divide_by_ranks
from ..node.control import ControlBoard
from ..node.timeouts import TimeoutPolicy
from ..ring.pipeline import RingPipeline
from ..ring.schedule import Phase, RingPlan, choose_batches, chunk_bounds, default_batches
from ..ring.transports.base import CallBuffers
from ..ring.transports.host import HostTransport
from .base import Backend, ring_shape

if TYPE_CHECKING:
    from ..core.collective import Call, Collective
    from ..node.groups import Groups

INTER_HINT = ("a rank on another node did not reach the same call, or crashed (raise MPIRING_TIMEOUT if "
              "it is just slow); this communicator now refuses further use")


class HostBackend(Backend):
    """The host side of one communicator: two ring slots of ``slot_bytes`` per rank in the
    control board's payload (node shared memory), and the communicator's MPI groups."""

    memory = Memory.HOST

    def __init__(self, groups: Groups, board: ControlBoard, slot_bytes: int,
                 timeouts: TimeoutPolicy) -> None:
        self.groups = groups
        self.comm = groups.comm
        self.rank, self.size = self.comm.rank, self.comm.size
        self.waiter = timeouts.waiter(self.rank)
        self.slot_bytes = slot_bytes  # one ring slot; it bounds mpi-twoshot's staging too
        self.transport = HostTransport(board.shared, slot_bytes, timeouts, groups.node_ranks)
        self.pipeline = RingPipeline(self.transport)

    def run_ring(self, call: Call, collective: Collective, events: bool = False) -> None:
        if events:
            raise InvalidArgumentError("the event-signalled ring is not available for host memory")
        with np.errstate(all="ignore"):  # folds follow IEEE (inf, nan), whatever the caller's seterr
            self._ring(call, collective)

    def _ring(self, call: Call, collective: Collective) -> None:
        shape = ring_shape(collective, call, self.node_rank, self.node_size)
        recv, dtype = call.recv.array, call.recv.dtype
        m, r = shape.block, self.node_rank
        if shape.gather_first:
            np.copyto(recv[r * m:(r + 1) * m], call.send.array)
        nb = self.ring_batches(shape.count, dtype, call.batches)
        send = None if shape.in_place else call.send.array
        self.pipeline.run(RingPlan(self.node_size, shape.count, nb, shape.phase, shape.compact),
                          CallBuffers(send, recv, call.recv.count, dtype, call.op))
        if shape.front:
            np.copyto(recv[:m], recv[r * m:(r + 1) * m])

    def average(self, buf: Buffer, ranks: int) -> None:
        divide_by_ranks(buf.array, ranks)

    def ring_batches(self, count: int, dtype: np.dtype, asked: int | None) -> int:
        size = self.node_size
        return choose_batches(count, size, self.transport.slot_capacity(dtype), asked,
                              default_batches(count * np.dtype(dtype).itemsize, size))

    # -- hierarchical allreduce ------------------------------------------------------------

    def hier_pieces(self, count: int, dtype: np.dtype, asked: int | None) -> int:
        """One piece unless asked: the host steps run one after the other anyway."""
        return max(1, min(asked or 1, count or 1))

    def run_hier(self, call: Call) -> None:
        """Per piece: ring reduce-scatter in the node, ``MPI_Allreduce`` of this rank's block
        on its rail, ring all-gather in the node. Uneven nodes: ring allreduce in the node, the
        node leaders' allreduce (rail 0), and a broadcast from the leader in the node."""
        with np.errstate(all="ignore"):  # as run_ring
            self._hier(call)

    def _hier(self, call: Call) -> None:
        recv, op = call.recv, call.op
        send = None if call.send is None else call.send.array
        if not self.groups.topology.even:
            return self._hier_uneven(call)
        L, r = self.node_size, self.node_rank
        pieces = self.hier_pieces(recv.count, recv.dtype, call.batches)
        for lo, hi in chunk_bounds(recv.count, pieces):
            n = hi - lo
            part = recv.array[lo:hi]
            nb = self.ring_batches(n, recv.dtype, None)
            scatter = RingPlan(L, n, nb, Phase.REDUCE_SCATTER)
            self.pipeline.run(scatter, CallBuffers(None if send is None else send[lo:hi], part, n,
                                                   recv.dtype, op))
            b0, b1 = scatter.blocks[r]
            self._inter(self.groups.rail, part[b0:b1], op, "the inter-node allreduce on its rail")
            self.pipeline.run(RingPlan(L, n, nb, Phase.ALLGATHER),
                              CallBuffers(None, part, n, recv.dtype, op))

    def _hier_uneven(self, call: Call) -> None:
        recv = call.recv
        nb = self.ring_batches(recv.count, recv.dtype, None)
        self.pipeline.run(RingPlan(self.node_size, recv.count, nb),
                          CallBuffers(None if call.send is None else call.send.array, recv.array,
                                      recv.count, recv.dtype, call.op))
        if self.node_rank == 0:  # rail 0 holds one rank of every node: the leaders
            self._inter(self.groups.rail, recv.array, call.op, "the node leaders' allreduce")
        node = self.groups.node
        self.waiter.request(node.Ibcast(recv.array, root=0),
                            lambda: "its node leader to broadcast the result", hint=INTER_HINT,
                            buffers=(recv.array,))

    def _inter(self, comm: MPI.Intracomm, data: np.ndarray, op, what: str) -> None:
        """``MPI_Allreduce`` in place on ``comm``, polled so that it is bounded by the timeout
        (as a whole: MPI shows no progress inside it)."""
        if comm.size == 1 or data.size == 0:
            return
        request = comm.Iallreduce(MPI.IN_PLACE, data, op=mpi_op(op, data.dtype))
        self.waiter.request(request, lambda: f"every node to join {what}", hint=INTER_HINT,
                            buffers=(data,))

    def close(self, abandon: bool = False) -> MpiringError | None:
        self.drop_states()
        self.transport.close(abandon)
        return None
