"""Set-up succeeds on every rank or fails on every rank, and leaves nothing behind (issue 25,
item 5): communicators created in opposite orders, a rank late to set-up, a timeout too short
for anyone, a rank whose set-up raises after every rank joined.

Before the fix, set-up ended in bounded waits that expired independently: one rank could go
ahead while another raised (then hang in the next blocking collective, or fail its first call),
a late rank paired its first set-up with the others' retry, and a timed-out ``MPI_Comm_idup``
stayed pending on the caller's communicator (MPICH then hangs creating later communicators).
Each test bounds itself (a hang prints where it was and ends the job) and ends in
a collective verdict.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok, attempt, expect_raised

import mpiring
from mpiring import MpiringTimeoutError
from mpiring.core.errors import PeerFailedError
from mpiring.node.setup_steps import JOIN_TAG

pytestmark = pytest.mark.mpi(min_size=2)
world = MPI.COMM_WORLD
T = 2.0  # the timeout of the set-ups made to fail
QUICK = 1.0  # "at once": well under T (scheduling on 2 busy cores aside)


@contextmanager
def bounded(seconds: float, request: pytest.FixtureRequest) -> Iterator[None]:
    """A hang here ends the job after ``seconds``, printing where each thread was (so the test
    fails, with its place, instead of hanging the run)."""
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def expire() -> None:
        stacks = "".join(f"--- thread {ident}\n" + "".join(traceback.format_stack(frame))
                         for ident, frame in sys._current_frames().items())
        if capture is not None:
            capture.suspend_global_capture(in_=True)  # (what pdb does) so that this is seen
        sys.stderr.write(f"rank {world.rank}: {request.node.name} hung for {seconds} s:\n{stacks}")
        sys.stderr.flush()
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def make(comm: MPI.Intracomm, timeout: float = T, **kwargs: Any) -> mpiring.Communicator:
    return mpiring.Communicator(comm, gpu=False, slot_bytes=4096, timeout=timeout, **kwargs)


KEPT: list[mpiring.Communicator] = []  # made with a tiny timeout: left open (see outcome)


def outcome(fn: Callable[[], mpiring.Communicator],
            close: bool = True) -> tuple[str, float, BaseException | None]:
    """The set-up ``fn`` makes: ``("ok" or the error's class name, seconds taken, the error)``.
    A communicator made is closed, or with ``close=False`` kept open until the process ends:
    close() runs a handshake of its own under the communicator's timeout, which a tiny one
    can split (not set-up's outcome, and not what these tests are about)."""
    start = time.monotonic()
    made: list[mpiring.Communicator] = []
    err = attempt(lambda: made.append(fn()))
    took = time.monotonic() - start
    for comm in made:
        if close:
            attempt(comm.close)
        else:
            KEPT.append(comm)
    return ("ok" if err is None else type(err).__name__), took, err


def agree(label: str, mine: str) -> list[str]:
    """Problems unless every rank had the same outcome."""
    every = world.allgather(mine)
    return [] if len(set(every)) == 1 else [f"{label}: ranks disagree: {every}"]


def works(comm: MPI.Intracomm, label: str) -> list[str]:
    """Problems unless a communicator on ``comm`` sets up and reduces correctly, and the
    caller's own collectives on ``comm`` still pair as they should (nothing left pending there),
    with no set-up message left on it."""
    problems = []
    with make(comm, timeout=30.0) as good:
        got = good.allreduce(np.full(3, comm.rank + 1.0))
        if not np.array_equal(got, np.full(3, comm.size * (comm.size + 1) / 2)):
            problems.append(f"{label}: a communicator afterwards reduced {got}")
    mine = np.array([comm.rank + 1], dtype=np.int64)
    total = np.zeros(1, dtype=np.int64)
    request = comm.Iallreduce(mine, total)
    deadline = time.monotonic() + 10
    while not request.Test():  # a stale collective would pair with this one instead
        if time.monotonic() > deadline:
            return [*problems, f"{label}: the caller's own Iallreduce never completed"]
        time.sleep(1e-4)
    if total[0] != comm.size * (comm.size + 1) // 2:
        problems.append(f"{label}: the caller's own Iallreduce gave {total[0]}")
    comm.Barrier()  # every rank's set-up messages were sent before it returned
    if comm.Iprobe(MPI.ANY_SOURCE, JOIN_TAG):
        problems.append(f"{label}: a set-up message is left on the caller's communicator")
    return problems


def test_communicators_created_in_opposite_orders(request: pytest.FixtureRequest) -> None:
    """Rank 0 creates a communicator on A, then on B; the others on B, then on A (erroneous).
    Each set-up succeeds on every rank or fails on every rank, at most one of the two
    succeeds (whichever set-up the others reach while the first rank still waits there), a
    rank's second set-up that fails does so at once (the others gave up on it already), and
    afterwards set-ups on A, B and the world work, as do the caller's own collectives on A and
    B. Before: ranks disagreed about A and B, and the next set-up hung in
    MPI_Comm_split_type or failed its first call."""
    a, b = world.Dup(), world.Dup()
    order = {"A": a, "B": b}
    names = ["A", "B"] if world.rank == 0 else ["B", "A"]
    problems: list[str] = []
    with bounded(40, request):
        results = {name: outcome(lambda name=name: make(order[name])) for name in names}
        for name in ("A", "B"):
            problems += agree(f"set-up on {name}", results[name][0])
            what, _, err = results[name]
            if what != "ok":
                problems += expect_raised(err, MpiringTimeoutError, "in Communicator set-up")
        if results["A"][0] == results["B"][0] == "ok":
            problems.append("both set-ups succeeded, although no rank was on the other's")
        what, took, _ = results[names[1]]
        if what != "ok" and took > QUICK:
            problems.append(f"the set-up on {names[1]}, the others having given up on it, took {took:.2f} s")
        problems += works(world, "COMM_WORLD")
        problems += works(a, "A")
        problems += works(b, "B")
    a.Free()
    b.Free()
    all_ok(problems)


@pytest.mark.parametrize("late", [0, -1], ids=["rank 0 late", "last rank late"])
def test_a_rank_late_to_set_up_never_pairs_with_the_retry(late: int, request: pytest.FixtureRequest) -> None:
    """One rank comes 1.4 timeouts late (2.8 s, timeout 2 s); every rank tries twice. The others'
    first set-up times out; the late rank's first set-up is their first too (never their retry):
    it raises at once, saying the others gave up before it came (or that it was missing), and
    every rank's second set-up succeeds. Before: the late rank's first set-up paired with the
    others' retry (it succeeded where theirs failed), and MPI_Finalize met the unmatched
    messages (or the next set-up hung in MPI_Comm_split_type)."""
    me, late = world.rank, late % world.size
    problems: list[str] = []
    with bounded(40, request):
        if me == late:
            time.sleep(1.4 * T)
        first = outcome(lambda: make(world))
        second = outcome(lambda: make(world))
        problems += agree("first set-up", first[0]) + agree("second set-up", second[0])
        if first[0] == "ok":
            problems.append("the first set-up succeeded")
        else:
            problems += expect_raised(first[2], MpiringTimeoutError, "in Communicator set-up",
                                      "join")
            if me == late and first[1] > QUICK:
                problems.append(f"the late rank's first set-up took {first[1]:.2f} s to fail")
        if second[0] != "ok":
            problems.append(f"the second set-up failed: {second[2]}")
        problems += works(world, "COMM_WORLD")
    all_ok(problems)


def test_a_timeout_too_short_for_anyone_fails_or_succeeds_on_every_rank_alike(
        request: pytest.FixtureRequest) -> None:
    """timeout=1e-300: set-up may fail (usually) or succeed (every rank there within a few
    polls), but alike on every rank, 25 times over, and a normal set-up works afterwards.
    Before: one rank's Idup timed out while another's completed, and the job hung."""
    problems: list[str] = []
    with bounded(60, request):
        for i in range(25):
            what, _, err = outcome(lambda: make(world, timeout=1e-300), close=False)
            problems += agree(f"set-up {i}", what)
            if err is not None and not isinstance(err, (MpiringTimeoutError, PeerFailedError)):
                problems.append(f"set-up {i} raised {err!r}")
        problems += works(world, "COMM_WORLD")
    all_ok(problems)


def test_a_rank_whose_set_up_raises_after_every_rank_joined_fails_every_rank(
        monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The last rank's set-up raises after its last collective step: every other rank raises
    PeerFailedError naming it and its error at once (timeout 60 s), and set-up works afterwards.
    Before: the others' set-up succeeded, with a peer that had none."""
    odd = world.size - 1
    if world.rank == odd:
        def broken(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("injected set-up failure")

        monkeypatch.setattr(mpiring.communicator, "Dispatcher", broken)
    problems: list[str] = []
    with bounded(40, request):
        what, took, err = outcome(lambda: make(world, timeout=60.0))
        monkeypatch.undo()
        if world.rank == odd:
            problems += expect_raised(err, RuntimeError, "injected set-up failure")
        else:
            problems += expect_raised(err, PeerFailedError, f"rank {world.rank}: rank {odd} failed to finish "
                                      "set-up (RuntimeError: injected set-up failure)")
        if took > 5 * QUICK:
            problems.append(f"set-up took {took:.2f} s to fail")
        problems += works(world, "COMM_WORLD")
    all_ok(problems)
