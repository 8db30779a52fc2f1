"""Host transport details that a one-rank communicator can check."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from mpi4py import MPI

from mpiring.node.signals import SharedBoard
from mpiring.node.timeouts import TimeoutPolicy
from mpiring.ring.transports.host import HostTransport, slot_bytes_for


@pytest.mark.parametrize(("asked", "got"), [(1, 4096), (4095, 4096), (4096, 4096), (5000, 4096),
                                            (8192, 8192), (1 << 20, 1 << 20)])
def test_slot_bytes_rounded_to_pages(asked: int, got: int) -> None:
    """Slots are whole 4 KiB pages, at least one."""
    board = SharedBoard(MPI.COMM_SELF, payload_bytes=2 * slot_bytes_for(asked), timeout=1.0)
    link = HostTransport(board, asked, TimeoutPolicy(1.0))
    try:
        assert link.slot_bytes == got
        assert link.slot_capacity(np.dtype(np.float64)) == got // 8
        assert link.slot_capacity(np.dtype(ml_dtypes.bfloat16)) == got // 2
        assert (link.rank, link.size, link.next, link.prev) == (0, 1, 0, 0)
    finally:
        link.close()
        board.close()
