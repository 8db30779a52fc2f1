"""Shared counters and bounded waits, on a one-rank communicator."""

from __future__ import annotations

import pickle
import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from mpiring.core.errors import MpiringTimeoutError
from mpiring.node import signals
from mpiring.node.signals import FREE, FULL, HEADER_BYTES, NUM_COUNTERS, SharedBoard, Waiter


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


def test_timeout_error_facts_and_location() -> None:
    """The error carries rank, peer and what was awaited; locate() adds where, in message and facts,
    and the error survives pickling (mpi4py's lowercase collectives pickle objects)."""
    with pytest.raises(MpiringTimeoutError) as info:
        Waiter(0.05, 2).until(lambda: False, lambda: "rank 1 to fill slot 1 (seq 7)", peer=1)
    err = info.value
    assert (err.rank, err.peer, err.timeout, err.where, err.algorithm) == (2, 1, 0.05, "", None)
    err.locate("in the ring algorithm, step 2 of 4 (reduce-scatter)", algorithm="ring", step="2 of 4", seq=7)
    assert str(err).startswith("rank 2 timed out after 0.05 s in the ring algorithm, step 2 of 4 "
                               "(reduce-scatter), waiting for rank 1 to fill slot 1 (seq 7); the peer may")
    assert (err.algorithm, err.step, err.seq) == ("ring", "2 of 4", 7)
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and (again.peer, again.seq, again.step) == (1, 7, "2 of 4")


class NeverDone:
    """A nonblocking operation whose peers never come."""

    def Test(self) -> bool:  # noqa: N802
        return False


def test_timed_out_request_is_kept_with_its_buffers() -> None:
    """A request that times out stays pending: it and its buffers are kept for the process's life,
    so MPI can never write into freed memory should it complete later."""
    buffers = (np.zeros(3), np.zeros(3))
    with pytest.raises(MpiringTimeoutError, match="waiting for every rank to do it; it never came"):
        Waiter(0.05, 0).request(NeverDone(), lambda: "every rank to do it", hint="it never came",
                                buffers=buffers)
    request, kept = signals.ABANDONED_REQUESTS[-1]
    assert isinstance(request, NeverDone) and kept is buffers


def test_barrier_and_board_with_timeout() -> None:
    """On one rank the bounded barrier, a bounded board's set-up and close all return at once."""
    Waiter(1.0, 0).barrier(MPI.COMM_SELF, "nobody")
    board = SharedBoard(MPI.COMM_SELF, payload_bytes=4096, timeout=1.0)
    board.post(0, FULL[0], 3)
    assert board.read(0, FULL[0]) == 3
    board.close()
    assert board.win == MPI.WIN_NULL and not board.counters
    board.close()


def test_abandoned_board_keeps_its_window() -> None:
    """close(abandon=True) (after a failure) does not wait for peers: it marks this rank's row
    ABANDONED and keeps the window alive, since a late peer may still write into it."""
    board = SharedBoard(MPI.COMM_SELF, payload_bytes=4096, timeout=1.0)
    row = board.counters[0]
    kept = len(signals.ABANDONED_WINDOWS)
    board.close(abandon=True)
    assert board.win == MPI.WIN_NULL and not board.counters and not board.payloads
    assert len(signals.ABANDONED_WINDOWS) == kept + 1
    assert row[signals.CLOSING] == signals.ABANDONED  # still mapped: peers read it
    board.close()


def test_a_wait_whose_peers_keep_moving_restarts_its_clock_each_time() -> None:
    """The timeout bounds a wait's time without progress, not the wait: peers that move every
    0.1 s for 0.8 s keep a 0.3 s wait alive, and it times out about 0.3 s after they stop."""
    start = time.monotonic()
    moving_until = start + 0.8

    def progress() -> int:  # the awaited counter: a step every 0.1 s, then still
        return int((min(time.monotonic(), moving_until) - start) / 0.1)

    with pytest.raises(MpiringTimeoutError):
        Waiter(0.3, 0).until(lambda: False, lambda: "rank 1's counter", progress=progress)
    waited = time.monotonic() - start
    assert 0.8 + 0.3 - 0.1 <= waited < 0.8 + 0.3 + 2.0, waited
