"""What the timeout bounds on the GPU ring (issue 25, item 6): the time a call goes without
progress, not the whole call. The watchdog reads a ring call's flags every quarter timeout
(``ring-events``: the counters of its host waits) and restarts the call's clock when they move.

* A ring call that keeps moving for several timeouts succeeds: one rank's host sleeps before
  each send it enqueues, so its peers' GPUs wait on it step by step for several timeouts, never
  one (before: the watchdog aborted the call one timeout after it started on the GPU).
* A rank whose host stops enqueueing mid-call, several steps in: its peers raise (from the call
  or from ``synchronize()``) about a timeout after it stopped, not a timeout after the call
  began; the stopped rank raises too once it moves again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import cupy
import pytest
from gpu_helpers import WORLD, agree
from send_hooks import hook_sends

import mpiring
from mpiring.core.errors import MpiringTimeoutError, PeerFailedError

T = 1.0  # the communicators' timeout, s
STEP = 0.2  # how long the slow rank's host sleeps before each send it enqueues
SENDS = 16  # sends per rank and call, at least: SENDS * STEP is over 3 T
SLOT = 64 << 10  # bytes per slot, the smallest: many transfers for a small call
SLACK = 1.0  # s past the latest the watchdog may take (T * 1.25)
ROWS = ["ring", "ring-events"]

pytestmark = pytest.mark.skipif(WORLD.size < 2, reason="needs 2 ranks")


@pytest.fixture(scope="module")
def warmed() -> None:
    """Once per module: a communicator like ``comm``'s with the default timeout, made and used,
    so that CUDA's start-up and the kernels' compiles are behind every rank before a set-up
    bounded by T begins (first in a fresh process, a rank's start-up alone can take over T)."""
    with mpiring.Communicator(WORLD, gpu=True, slot_bytes=SLOT) as c:
        for algo in ROWS:
            c.Allreduce(cupy.ones(8, cupy.float32), cupy.empty(8, cupy.float32), algorithm=algo)
        c.synchronize()


@pytest.fixture
def comm(warmed: None) -> Iterator[mpiring.Communicator]:
    """A GPU communicator of its own with timeout T (a test may fail it)."""
    WORLD.Barrier()  # the ranks start the T-bounded set-up together
    c = mpiring.Communicator(WORLD, gpu=True, slot_bytes=SLOT, timeout=T)
    yield c
    c.close()


def ring_transport(comm: mpiring.Communicator, algo: str) -> Any:
    """This rank's transport of ``algo``. Collective: ring-events' is made at its first call,
    which this makes on every rank."""
    if algo == "ring-events":
        comm.Allreduce(cupy.ones(8, cupy.float32), cupy.empty(8, cupy.float32), algorithm=algo)
        comm.synchronize()
        return comm.ring_pipeline(gpu=True, events=True).transport
    return comm.ring_pipeline(gpu=True).transport


def allreduce(comm: mpiring.Communicator, algo: str) -> tuple[cupy.ndarray, float]:
    """A ring allreduce of ones giving every rank at least SENDS sends; (its output, what
    every element must be)."""
    n, capacity = WORLD.size, SLOT // 4
    batches = math.ceil(SENDS / (2 * (n - 1)))
    count = batches * n * capacity
    out = cupy.zeros(count, cupy.float32)
    comm.Allreduce(cupy.ones(count, cupy.float32), out, algorithm=algo, batches=batches)
    return out, float(n)


@pytest.mark.parametrize("algo", ROWS)
def test_a_call_that_keeps_moving_outlives_the_timeout(comm: mpiring.Communicator, algo: str) -> None:
    link = ring_transport(comm, algo)
    if WORLD.rank == WORLD.size - 1:
        hook_sends(link, lambda k: time.sleep(STEP))
    start = time.monotonic()
    problem = ""
    try:
        out, want = allreduce(comm, algo)
        comm.synchronize()
        wrong = int(cupy.count_nonzero(out != want))
        problem = f"{wrong} of {out.size} elements wrong" if wrong else ""
    except Exception as err:  # noqa: BLE001 - judged by every rank together
        problem = f"raised {type(err).__name__} after {time.monotonic() - start:.2f} s: {err}"
    elapsed = time.monotonic() - start
    if not problem and elapsed < 2.5 * T:
        problem = f"the call took only {elapsed:.2f} s, not several timeouts of {T} s"
    agree(not problem, problem)


@pytest.mark.parametrize("algo", ROWS)
def test_a_rank_that_stops_fails_its_peers_a_timeout_later(comm: mpiring.Communicator, algo: str) -> None:
    victim = WORLD.size - 1
    stopped: list[float] = []

    def before_send(k: int) -> None:
        if k == 6:
            stopped.append(time.monotonic())  # CLOCK_MONOTONIC: one clock for the whole node
            time.sleep(4 * T)
        else:
            time.sleep(STEP)

    link = ring_transport(comm, algo)
    if WORLD.rank == victim:
        hook_sends(link, before_send)
    start = time.monotonic()
    error: BaseException | None = None
    try:
        allreduce(comm, algo)
        comm.synchronize()
    except Exception as err:  # noqa: BLE001 - judged by every rank together
        error = err
    raised = time.monotonic()
    stop = WORLD.allgather(stopped[0] if stopped else None)[victim]
    outcomes = WORLD.allgather(type(error).__name__ if error is not None else "returned")
    problem = ""
    if stop is None:
        problem = "the victim never reached its 6th send"
    elif WORLD.rank == victim:
        problem = "" if error is not None else "the victim's call succeeded"
    elif not isinstance(error, (MpiringTimeoutError, PeerFailedError)):
        problem = f"{outcomes[WORLD.rank]} from a call whose peer stopped: {error}"
    elif not 0.9 * T <= raised - stop < 1.25 * T + SLACK:
        problem = (f"raised {type(error).__name__} {raised - stop:.2f} s after the victim stopped "
                   f"({raised - start:.2f} s into the call), not about {T} s: {error}")
    if not problem and "MpiringTimeoutError" not in outcomes[:victim] + outcomes[victim + 1:]:
        problem = f"no peer of the victim timed out itself: {outcomes}"
    agree(not problem, problem)
