"""The bounded object allgather of set-up, the failure mark in the host board, and synchronize().

When a rank's communicator fails it marks the host board (``FAILED``); a peer that did not take
part in the failure sees the mark on its next use and stops at once with PeerFailedError instead
of running into the timeout on a peer that will never answer.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok, attempt, expect_raised, reduce_and_check

import mpiring
from mpiring import CommunicatorClosedError, MpiringTimeoutError
from mpiring.core.errors import PeerFailedError
from mpiring.core.ops import Op
from mpiring.node.setup_steps import allgather

pytestmark = pytest.mark.mpi(min_size=1)

TIMEOUT = 1.0  # of the communicators that are made to fail
AT_ONCE = 0.25  # "well under the timeout"


def new_comm(world: MPI.Intracomm, **kwargs: Any) -> mpiring.Communicator:
    """A fresh host communicator with small slots."""
    return mpiring.Communicator(world, **{"gpu": False, "slot_bytes": 4096, "timeout": 60, **kwargs})


# -- allgather ---------------------------------------------------------------------------


def blob(world_rank: int) -> bytes:
    """Bytes whose length and content depend on the rank (rank 0: empty; rank 3: ~300 KB)."""
    return np.random.default_rng(world_rank).bytes(world_rank * 100_003)


def make_object(kind: str, world_rank: int) -> object:
    """This rank's contribution of one kind; ``mixed`` differs in type and size from rank to rank."""
    if kind == "none":
        return None
    if kind == "empty list":
        return []
    if kind == "blob":
        return blob(world_rank)
    if kind == "tuple":
        return (world_rank, "x" * world_rank, [world_rank] * (3 * world_rank), {"rank": world_rank})
    assert kind == "mixed"
    return [None, [], blob(world_rank), {"rank": world_rank, "text": "é" * world_rank}][world_rank % 4]


KINDS = ["none", "empty list", "blob", "tuple", "mixed"]


def check_allgather(comm: MPI.Intracomm, members: list[int], label: str) -> list[str]:
    """Problems unless allgather on ``comm`` (whose ranks are the world ranks ``members``, in that
    order) returns every rank's object in rank order, for every kind of object."""
    me = MPI.COMM_WORLD.rank
    if comm.size != len(members) or members[comm.rank] != me:
        return [f"{label}: test set-up: rank {comm.rank} of {comm.size}, expected members {members}"]
    problems = []
    for kind in KINDS:
        results: list[list] = []
        err = attempt(lambda kind=kind, results=results: results.append(
            allgather(comm, make_object(kind, me), 30.0, f"share {kind} objects")))
        if err is not None:
            problems.append(f"{label} {kind}: raised {err!r}")
            continue
        want = [make_object(kind, r) for r in members]
        if results[0] != want:
            shown = [len(o) if isinstance(o, (bytes, list)) else o for o in results[0]]
            problems.append(f"{label} {kind}: got {len(results[0])} objects {shown!r:.200}, "
                            f"expected those of world ranks {members}")
    return problems


def test_allgather_world(world: MPI.Intracomm) -> None:
    """Every rank's object, in rank order: None, empty lists, blobs of rank-dependent length, and a
    mix of kinds and sizes from rank to rank."""
    all_ok(check_allgather(world, list(range(world.size)), "COMM_WORLD"))


def test_allgather_split(world: MPI.Intracomm) -> None:
    """On sub-communicators whose ranks run against the world's (Split by parity, reversed keys)."""
    color = world.rank % 2
    sub = world.Split(color, key=-world.rank)
    members = sorted((r for r in range(world.size) if r % 2 == color), reverse=True)
    problems = check_allgather(sub, members, f"split {color}")
    sub.Free()
    all_ok(problems)


@pytest.mark.mpi(min_size=2)
def test_allgather_times_out_naming_what(world: MPI.Intracomm) -> None:
    """A rank that does not call: the others raise MpiringTimeoutError within the timeout, naming
    what was being shared."""
    problems = []
    dup = world.Dup()  # the timed-out collective stays pending on it: never used again
    if world.rank != world.size - 1:
        start = time.monotonic()
        err = attempt(lambda: allgather(dup, b"abc", 0.3, "share the test's objects"))
        took = time.monotonic() - start
        problems += expect_raised(err, MpiringTimeoutError, f"rank {world.rank} timed out after 0.3 s in "
                                  "Communicator set-up, waiting for every rank to share the test's objects")
        if not 0.3 <= took < 3:
            problems.append(f"raised after {took:.2f} s, the timeout is 0.3 s")
    world.Barrier()
    dup.Free()
    all_ok(problems)


# -- the failure mark --------------------------------------------------------------------


def timed_out_or_relayed(err: BaseException | None, me: int) -> list[str]:
    """This rank timed out, or a peer timed out first and its failure mark stopped this rank's
    wait (PeerFailedError relaying the timeout: issue 17)."""
    if isinstance(err, PeerFailedError):
        return expect_raised(err, PeerFailedError, f"rank {me}: rank ", "failed with MpiringTimeoutError")
    return expect_raised(err, MpiringTimeoutError, f"rank {me} timed out after {TIMEOUT:g} s")


def peer_failed(err: BaseException | None, me: int, failed: list[int]) -> list[str]:
    return expect_raised(err, PeerFailedError, f"rank {me}: ", *(f"rank {r} failed with " for r in failed),
                         "gave up on this communicator", "refuses further use")


# What the rank that skipped does first once its peers have failed.
FIRST = ["Allreduce", "Allreduce in place", "allreduce", "synchronize", "close"]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("first", FIRST)
def test_failure_mark_stops_a_rank_that_missed_the_failure(world: MPI.Intracomm, first: str) -> None:
    """check=False, the last rank skips a call: the others time out in the ring and mark the board
    failed. The skipping rank, which took no part in that failure, then learns of it at once on its
    next use (PeerFailedError naming the failed ranks, output untouched); synchronize() on a failed
    communicator raises; close() returns at once on every rank. Protection: the FAILED mark
    (Communicator._fail / _failed_peers / _usable)."""
    me, size = world.rank, world.size
    skip = size - 1
    failed = [r for r in range(size) if r != skip]
    comm = new_comm(world, check=False, timeout=TIMEOUT, batches=1)
    problems = reduce_and_check(comm, np.dtype(np.int64), Op.SUM, 1000, "out", seed=11, label="warm-up")
    if me != skip:
        err = attempt(lambda: comm.Allreduce(np.ones(1000), np.zeros(1000)))
        problems += timed_out_or_relayed(err, me)
    world.Barrier()  # the failed ranks have marked the board before the skipping rank looks
    if me == skip:
        x = np.arange(1000, dtype=np.float64)
        out = np.full(1000, -7.0)
        calls = {
            "Allreduce": lambda: comm.Allreduce(x, out),
            "Allreduce in place": lambda: comm.Allreduce(MPI.IN_PLACE, out),
            "allreduce": lambda: comm.allreduce(x),
            "synchronize": comm.synchronize,
            "close": comm.close,
        }
        start = time.monotonic()
        err = attempt(calls[first])
        took = time.monotonic() - start
        if first == "close":  # it has not heard yet: close tells it, and frees nothing
            problems += expect_raised(err, PeerFailedError, f"rank {me} cannot free the communicator's "
                                      f"memory: rank(s) {failed} abandoned it after an error")
        else:
            problems += peer_failed(err, me, failed)
        if took > AT_ONCE:
            problems.append(f"{first} took {took:.2f} s to see the failure (timeout {TIMEOUT} s)")
        if not (out == -7.0).all() or not (x == np.arange(1000)).all():
            problems.append(f"{first} touched its buffers although it refused to run")
    # Afterwards: every use is refused, synchronize() included, without waiting.
    gone = first == "close" and me == skip
    again = attempt(comm.synchronize)
    if gone:
        problems += expect_raised(again, CommunicatorClosedError, "this communicator is closed")
    else:
        cause = "PeerFailedError" if me == skip else "Error: rank"  # timed out, or relayed a timeout
        problems += expect_raised(again, CommunicatorClosedError, "failed earlier", cause)
        problems += expect_raised(attempt(lambda: comm.Allreduce(np.ones(10), np.zeros(10))),
                                  CommunicatorClosedError, "failed earlier", cause)
        if "failed" not in repr(comm):
            problems.append(f"repr does not show the failure: {comm!r}")
    start = time.monotonic()
    err = attempt(comm.close)
    took = time.monotonic() - start
    if err is not None:
        problems.append(f"close after the failure raised {err!r}")
    if took > AT_ONCE:
        problems.append(f"close after the failure waited {took:.2f} s")
    if not comm.closed:
        problems.append("not closed after close()")
    with new_comm(world) as fresh:  # the ranks are in step again
        problems += reduce_and_check(fresh, np.dtype(np.float64), Op.SUM, 2345, "out", seed=12,
                                     label="after the failure")
    all_ok(problems)


@pytest.mark.mpi(min_size=2)
def test_failure_mark_names_every_failed_rank(world: MPI.Intracomm) -> None:
    """Only some ranks fail (each marks the board once its own call times out). The others then look,
    one after the other: each stops at once naming exactly the ranks marked so far, in rank order,
    and marks the board in turn (so the next one names it too)."""
    me, size = world.rank, world.size
    failing = list(range(0, size, 2))  # the even ranks: at least one rank fails and one does not
    comm = new_comm(world, check=False, timeout=TIMEOUT)
    problems = reduce_and_check(comm, np.dtype(np.int32), Op.MAX, 300, "in_place", seed=13, label="warm-up")
    if me in failing:  # a call the odd ranks do not make: it times out, and marks the board
        err = attempt(lambda: comm.Allreduce(np.ones(100), np.zeros(100)))
        problems += timed_out_or_relayed(err, me)
    world.Barrier()
    marked = list(failing)
    for looker in range(1, size, 2):
        if me == looker:
            start = time.monotonic()
            problems += peer_failed(attempt(comm.synchronize), me, sorted(marked))
            if time.monotonic() - start > AT_ONCE:
                problems.append(f"synchronize took {time.monotonic() - start:.2f} s to see the failure")
        marked.append(looker)
        world.Barrier()
    problems += expect_raised(attempt(comm.synchronize), CommunicatorClosedError, "failed earlier")
    problems += [f"close raised {e!r}" for e in [attempt(comm.close)] if e is not None]
    with new_comm(world) as fresh:
        problems += reduce_and_check(fresh, np.dtype(np.int64), Op.SUM, 777, "out", seed=14,
                                     label="after a partial failure")
    all_ok(problems)


# -- synchronize on a healthy communicator -----------------------------------------------


def test_synchronize_healthy(world: MPI.Intracomm) -> None:
    """A host communicator has no work in flight: synchronize() returns None at once, also when only
    one rank calls it (it is not collective), and the communicator stays usable."""
    problems: list[str] = []
    with new_comm(world, timeout=2) as comm:
        results: list[Any] = []
        start = time.monotonic()
        for _ in range(200 if world.rank == 0 else 0):  # a collective would wait for the others here
            err = attempt(lambda: results.append(comm.synchronize()))
            if err is not None:
                problems.append(f"synchronize raised {err!r}")
                break
        took = time.monotonic() - start
        if took > 0.5:
            problems.append(f"200 synchronize() calls took {took:.2f} s")
        problems += reduce_and_check(comm, np.dtype(np.float32), Op.SUM, 5000, "out", seed=15,
                                     label="after synchronize on rank 0")
        err = attempt(lambda: results.append(comm.synchronize()))
        if err is not None:
            problems.append(f"synchronize after a call raised {err!r}")
        if any(r is not None for r in results):
            problems.append(f"synchronize returned {[r for r in results if r is not None][:3]}")
        if "open" not in repr(comm):
            problems.append(f"not open after synchronize: {comm!r}")
        problems += reduce_and_check(comm, np.dtype(np.int64), Op.MIN, 333, "new", seed=16,
                                     label="after synchronize on every rank")
    all_ok(problems)
