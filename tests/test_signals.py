"""Shared counters and bounded waits, on a one-rank communicator."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from mpiring.errors import MpiringTimeoutError
from mpiring.signals import FREE, FULL, HEADER_BYTES, NUM_COUNTERS, SharedBoard, Waiter


def test_waiter_returns_when_ready() -> None:
    """A condition that is already true, or becomes true later, ends the wait."""
    Waiter(1.0, 0).until(lambda: True, lambda: "nothing")
    flag = threading.Event()
    timer = threading.Timer(0.05, flag.set)  # long enough to reach the sleeping phase
    timer.start()
    start = time.monotonic()
    Waiter(5.0, 0).until(flag.is_set, lambda: "the timer")
    assert 0.04 < time.monotonic() - start < 4.0
    timer.join()


def test_waiter_times_out_naming_rank_and_target() -> None:
    """A wait that never ends raises after the timeout, naming this rank and what it waited for."""
    start = time.monotonic()
    with pytest.raises(MpiringTimeoutError) as info:
        Waiter(0.2, 3).until(lambda: False, lambda: "rank 1 to fill slot 0 (seq 9)")
    elapsed = time.monotonic() - start
    assert 0.2 <= elapsed < 3.0
    message = str(info.value)
    assert message.startswith("rank 3 timed out after 0.2 s waiting for rank 1 to fill slot 0 (seq 9)")
    assert "raise MPIRING_TIMEOUT" in message
    assert isinstance(info.value, TimeoutError)


def test_board_counters_and_payload() -> None:
    """A fresh board has zeroed counters; posts are read back; the payload has its size."""
    board = SharedBoard(MPI.COMM_SELF, payload_bytes=8192)
    try:
        assert HEADER_BYTES == NUM_COUNTERS * 64
        assert len(board.counters) == 1 and board.counters[0].shape == (NUM_COUNTERS,)
        assert (board.counters[0] == 0).all()
        assert board.payloads[0].nbytes == 8192
        board.post(0, FULL[1], 17)
        board.post(0, FREE[0], 5)
        assert board.read(0, FULL[1]) == 17 and board.read(0, FREE[0]) == 5
        assert board.read(0, FULL[0]) == 0
        board.payloads[0][:] = 7  # writable shared memory, separate from the counters
        assert board.read(0, FULL[1]) == 17
        Waiter(1.0, 0).counter_at_least(board, 0, FULL[1], 17, lambda: "never shown")
        with pytest.raises(MpiringTimeoutError, match="waiting for counter 18"):
            Waiter(0.05, 0).counter_at_least(board, 0, FULL[1], 18, lambda: "counter 18")
        assert np.all(board.payloads[0] == 7)
    finally:
        board.close()
    board.close()  # a second close does nothing
