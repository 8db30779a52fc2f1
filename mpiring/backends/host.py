"""Host arrays: the ring pipeline over node shared memory (the control board's payload), and
``MPI.Allreduce`` on the communicator."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from ..buffers import Memory
from ..control import ControlBoard
from ..errors import MpiringError
from ..pipeline import RingPipeline
from ..schedule import RingPlan, choose_batches, default_batches
from ..timeouts import TimeoutPolicy
from ..transports.base import CallBuffers
from ..transports.host import HostTransport
from .base import Backend

if TYPE_CHECKING:
    from ..algorithms.base import Call


class HostBackend(Backend):
    """The host side of one communicator: two ring slots of ``slot_bytes`` per rank in the
    control board's payload (node shared memory), and the communicator's MPI duplicate."""

    memory = Memory.HOST

    def __init__(self, comm: MPI.Intracomm, board: ControlBoard, slot_bytes: int,
                 timeouts: TimeoutPolicy) -> None:
        self.comm = comm
        self.rank, self.size = comm.rank, comm.size
        self.transport = HostTransport(board.shared, slot_bytes, timeouts)
        self.pipeline = RingPipeline(self.transport)

    def run_ring(self, call: Call, events: bool = False) -> None:
        if events:
            raise self._missing("the event-signalled ring")
        recv, src = call.recv, call.source
        nb = self.ring_batches(recv.count, recv.dtype, call.batches)
        self.pipeline.run(RingPlan(self.size, recv.count, nb),
                          CallBuffers(None if call.send is None else src.array, recv.array, recv.count,
                                      recv.dtype, call.op))

    def ring_batches(self, count: int, dtype: np.dtype, asked: int | None) -> int:
        return choose_batches(count, self.size, self.transport.slot_capacity(dtype), asked,
                              default_batches(count * np.dtype(dtype).itemsize, self.size))

    def close(self, abandon: bool = False) -> MpiringError | None:
        self.transport.close(abandon)
        return None
