"""What the timeout bounds on the host ring (issue 25, item 6): the time a wait goes without
progress from the peer it waits on, not the whole call.

* A call that keeps moving succeeds however long it takes: here one rank sleeps before each of
  its sends, so the call lasts several timeouts while no wait lasts one (before: it failed one
  timeout after it began, saying the peer "may have crashed, hung...").
* A rank that stops still fails its peers within about the timeout of the moment it stopped,
  also when that is several timeouts into the call: the neighbours that wait on it raise
  MpiringTimeoutError, the other ranks PeerFailedError relaying it, and the stopped rank raises
  too once it moves again.

Slow ranks are made deterministic by a hook on their transport's sends (as the fault tests do).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok
from send_hooks import hook_sends

import mpiring
from mpiring.algorithms import Collective
from mpiring.core.errors import MpiringTimeoutError, PeerFailedError

pytestmark = pytest.mark.mpi(min_size=2)
world = MPI.COMM_WORLD
T = 0.5  # the communicators' timeout, s
STEP = 0.1  # how long the slow rank sleeps before each send: well under T, on 2 busy cores too
SENDS = 16  # sends of the slow rank per call, at least: SENDS * STEP is over 3 T
SLOT = 4096  # bytes per slot: small, so that a small call takes many transfers
SLACK = 1.5  # s of scheduling slack past the timeout, 4 ranks on 2 cores
DTYPE = np.dtype(np.float16)  # the dtype
COLLECTIVES = [Collective.ALLREDUCE, Collective.REDUCE_SCATTER, Collective.ALLGATHER]


@pytest.fixture
def comm() -> Iterator[mpiring.Communicator]:
    """A host communicator of its own with timeout T (a test may fail it)."""
    c = mpiring.Communicator(world, gpu=False, slot_bytes=SLOT, timeout=T)
    yield c
    c.close()  # a failed one is let go at once, without waiting for peers


def slow_sends(comm: mpiring.Communicator, slow: bool, before_send: Callable[[int], None]) -> None:
    """Run ``before_send(k)`` before this rank's ``k``-th send (1, 2, ...) if ``slow``."""
    if not slow:
        return
    hook_sends(comm.ring_pipeline(gpu=False).transport, before_send)


def shape(collective: Collective) -> tuple[int, int]:
    """(batches, elements per rank's block) of a call whose ring gives every rank at least
    SENDS sends, with blocks of a whole slot each."""
    n, capacity = world.size, SLOT // DTYPE.itemsize
    per_batch = (2 if collective is Collective.ALLREDUCE else 1) * (n - 1)
    batches = math.ceil(SENDS / per_batch)
    return batches, batches * capacity


def call(comm: mpiring.Communicator, collective: Collective) -> tuple[np.ndarray, np.ndarray]:
    """One ring call of ``collective`` of float16 ones; (what it returned, what it must return)."""
    n = world.size
    batches, m = shape(collective)
    if collective is Collective.ALLREDUCE:
        x, out = np.ones(n * m, DTYPE), np.zeros(n * m, DTYPE)
        comm.Allreduce(x, out, algorithm="ring", batches=batches)
        return out, np.full(n * m, n, DTYPE)
    if collective is Collective.REDUCE_SCATTER:
        x, out = np.ones(n * m, DTYPE), np.zeros(m, DTYPE)
        comm.Reduce_scatter_block(x, out, algorithm="ring", batches=batches)
        return out, np.full(m, n, DTYPE)
    x, out = np.full(m, world.rank, DTYPE), np.zeros(n * m, DTYPE)
    comm.Allgather(x, out, algorithm="ring", batches=batches)
    return out, np.repeat(np.arange(n, dtype=DTYPE), m)


@pytest.mark.parametrize("collective", COLLECTIVES, ids=lambda c: c.label)
def test_a_call_that_keeps_moving_outlives_the_timeout(comm: mpiring.Communicator,
                                                       collective: Collective) -> None:
    """The last rank sleeps STEP before each send: the call takes over 2.5 timeouts, every wait
    sees its peer move within one, and every rank returns the exact result."""
    slow_sends(comm, world.rank == world.size - 1, lambda k: time.sleep(STEP))
    start = time.monotonic()
    problems: list[str] = []
    try:
        got, want = call(comm, collective)
        if not np.array_equal(got, want):
            problems.append(f"{np.count_nonzero(got != want)} of {got.size} elements wrong")
    except Exception as err:  # noqa: BLE001 - judged collectively, so that every rank stays in step
        problems.append(f"raised {type(err).__name__} after {time.monotonic() - start:.2f} s: {err}")
    elapsed = time.monotonic() - start
    if not problems and elapsed < 2.5 * T:  # else the test proves nothing
        problems.append(f"the call took only {elapsed:.2f} s, not several timeouts of {T} s")
    all_ok(problems)


@pytest.mark.parametrize("victim", ["first", "last"])
def test_a_rank_that_stops_fails_its_peers_a_timeout_later(comm: mpiring.Communicator, victim: str) -> None:
    """The victim sleeps STEP before each send, so the call moves for 0.8 s (past one timeout),
    then stops for 4 T before its 9th send: every other rank raises about T after it stopped
    (a neighbour MpiringTimeoutError, the others that or PeerFailedError), not T after the
    call began; the victim raises once it moves again."""
    who = 0 if victim == "first" else world.size - 1
    stopped: list[float] = []

    def before_send(k: int) -> None:
        if k == 9:
            stopped.append(time.monotonic())  # CLOCK_MONOTONIC: one clock for every rank here
            time.sleep(4 * T)
        else:
            time.sleep(STEP)

    slow_sends(comm, world.rank == who, before_send)
    start = time.monotonic()
    error: BaseException | None = None
    try:
        call(comm, Collective.ALLREDUCE)
    except Exception as err:  # noqa: BLE001 - judged collectively, so that every rank stays in step
        error = err
    raised = time.monotonic()
    stop = world.allgather(stopped[0] if stopped else None)[who]
    outcomes = world.allgather(type(error).__name__ if error is not None else "returned")
    problems: list[str] = []
    if stop is None:
        problems.append("the victim never reached its 9th send")
    elif world.rank == who:
        if error is None:
            problems.append("the victim returned from a call its peers gave up on")
    else:
        after = raised - stop
        if not isinstance(error, (MpiringTimeoutError, PeerFailedError)):
            problems.append(f"{outcomes[world.rank]} from a call whose peer stopped: {error}")
        elif not 0.9 * T <= after < T + SLACK:
            problems.append(f"raised {type(error).__name__} {after:.2f} s after the victim stopped "
                            f"({raised - start:.2f} s into the call), not about {T} s: {error}")
    if "MpiringTimeoutError" not in [o for r, o in enumerate(outcomes) if r != who]:
        problems.append(f"no peer of the victim timed out itself: {outcomes}")
    all_ok(problems)
