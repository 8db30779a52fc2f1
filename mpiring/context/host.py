"""Host arrays: the ring pipeline over node shared memory (the control board's payload) and the
communicator's MPI groups, which the host rows (``ring``, ``mpi``, ``mpi-twoshot``, ``hier``) run on."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.buffers import Buffer, Memory
from ..core.errors import InvalidArgumentError, MpiringError
from ..core.ops import divide_by_ranks
from ..node.control import ControlBoard
from ..node.timeouts import TimeoutPolicy
from ..ring.pipeline import RingPipeline
from ..ring.schedule import RingPlan, choose_batches, default_batches
from ..ring.transports.base import CallBuffers
from ..ring.transports.host import HostTransport
from .base import Backend, ring_shape

if TYPE_CHECKING:
    from ..core.collective import Call, Collective
    from ..node.groups import Groups




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

    def close(self, abandon: bool = False) -> MpiringError | None:
        self.close_states(abandon)
        self.transport.close(abandon)
        return None
