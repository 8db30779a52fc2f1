"""Communicator lifetime and robustness: closing, options, stragglers and timeouts."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import DTYPES, all_ok, attempt, expect_raised, growth, reduce_and_check, resources

import mpiring
from mpiring import CommunicatorClosedError, InvalidArgumentError, MpiringTimeoutError, UnavailableError
from mpiring.core.errors import PeerFailedError
from mpiring.core.ops import Op

pytestmark = pytest.mark.mpi(min_size=1)


def new_comm(world: MPI.Intracomm, **kwargs: Any) -> mpiring.Communicator:
    """A fresh host communicator with small slots."""
    return mpiring.Communicator(world, **{"gpu": False, "slot_bytes": 4096, "timeout": 60, **kwargs})


def test_close_then_use(world: MPI.Intracomm) -> None:
    """After close every call raises CommunicatorClosedError; closing twice is fine."""
    comm = new_comm(world)
    problems = reduce_and_check(comm, np.dtype(np.int64), Op.SUM, 500, "out", seed=1, label="before close")
    assert not comm.closed and "open" in repr(comm)
    comm.close()
    assert comm.closed and "closed" in repr(comm)
    for label, call in [("Allreduce", lambda: comm.Allreduce(np.ones(3), np.zeros(3))),
                        ("in place", lambda: comm.Allreduce(MPI.IN_PLACE, np.zeros(3))),
                        ("allreduce", lambda: comm.allreduce(np.ones(3)))]:
        problems += [f"{label}: {p}" for p in expect_raised(
            attempt(call), CommunicatorClosedError, "this communicator is closed")]
    comm.close()
    all_ok(problems)


def test_context_manager(world: MPI.Intracomm) -> None:
    """``with`` closes the communicator, also when the body raises."""
    with new_comm(world) as comm:
        problems = reduce_and_check(comm, np.dtype(np.float32), Op.MAX, 777, "in_place", seed=2, label="with")
    if not comm.closed:
        problems.append("not closed after the with block")
    with pytest.raises(KeyError), new_comm(world) as inner:
        raise KeyError("boom")
    if not inner.closed:
        problems.append("not closed after an exception in the with block")
    all_ok(problems)


def test_many_communicators(world: MPI.Intracomm) -> None:
    """Communicators can be created and closed over and over (250 cycles), and several live at
    once, without growing what they hold: file descriptors, shared-memory windows (mappings,
    window handles) and MPI communicators (handles). Protection: close() frees all of them."""
    problems = []
    comms = [new_comm(world, slot_bytes=4096 * (i + 1)) for i in range(3)]
    for i in range(30):
        comm = comms[i % 3]
        problems += reduce_and_check(comm, DTYPES[i % len(DTYPES)], Op.SUM, 100 + 37 * i, "out", seed=i,
                                     label=f"interleaved {i}")
    for comm in comms:
        comm.close()
    for _ in range(50):  # warm-up: first-use allocations of MPI and numpy are not leaks
        new_comm(world).close()
    before = resources()
    for i in range(200):
        with new_comm(world) as comm:
            if i % 50 == 0:
                problems += reduce_and_check(comm, np.dtype(np.int32), Op.SUM, 300, "out", seed=i,
                                             label=f"fresh {i}")
    problems += growth(before, resources())
    all_ok(problems)


def split_groups(world: MPI.Intracomm) -> list[MPI.Intracomm]:
    """Eight MPI communicators from comm.Split: the whole world and its halves, in rank order
    and reversed, so mpiring ranks differ from world ranks."""
    groups = []
    for k in range(8):
        color = world.rank % 2 if k % 2 else 0
        key = world.rank if k % 4 < 2 else -world.rank
        groups.append(world.Split(color, key))
    return groups


def test_eight_communicators_at_once(world: MPI.Intracomm) -> None:
    """Eight communicators (from comm.Split) alive at once, used interleaved, give exact results,
    and rounds of creating and closing all eight grow nothing. Protection: every communicator
    has its own MPI duplicate and shared memory; close() frees them."""
    problems: list[str] = []
    order = np.random.default_rng(8)  # the same on every rank
    snapshots = []
    for round_ in range(4):
        if round_ == 1:
            snapshots.append(resources())  # after one round of first-use allocations
        groups = split_groups(world)
        comms = [new_comm(g) for g in groups]
        for i in range(24):
            k = int(order.integers(8))
            problems += reduce_and_check(comms[k], DTYPES[i % len(DTYPES)], Op(i % 4 + 1), 50 + 97 * i,
                                         ["out", "in_place", "new"][i % 3], seed=round_ * 100 + i,
                                         label=f"round {round_} call {i} on communicator {k}",
                                         group=groups[k])
        for comm, group in zip(comms, groups, strict=True):
            comm.close()
            group.Free()
        problems += [f"Allreduce after close: {p}" for p in expect_raised(
            attempt(lambda c=comms[0]: c.Allreduce(np.ones(3), np.zeros(3))), CommunicatorClosedError,
            "this communicator is closed")]
    problems += growth(snapshots[0], resources())
    all_ok(problems)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": 0}, "timeout must be a finite, positive number of seconds, got 0"),
        ({"timeout": -1.5}, "timeout must be a finite, positive number of seconds, got -1.5"),
        ({"timeout": float("nan")}, "timeout must be a finite, positive number of seconds, got nan"),
        ({"timeout": float("inf")}, "timeout must be a finite, positive number of seconds, got inf"),
        ({"timeout": "soon"}, "timeout must be a number of seconds, got 'soon'"),
        ({"algorithm": "tree"}, "unknown algorithm 'tree'"),
        ({"batches": 0}, "batches must be a positive integer or None, got 0"),
        ({"batches": 2.5}, "batches must be a positive integer or None, got 2.5"),
    ],
)
def test_constructor_rejects(world: MPI.Intracomm, kwargs: dict, message: str) -> None:
    """Bad options are refused before any collective set-up."""
    all_ok(expect_raised(attempt(lambda: new_comm(world, **kwargs)), InvalidArgumentError, message))


def test_gpu_required_without_gpu(world: MPI.Intracomm) -> None:
    """gpu=True without CuPy or a GPU raises UnavailableError, and leaks nothing: retrying is fine."""
    if mpiring.cuda.available():  # the same verdict on every rank of one node
        pytest.skip("a GPU is present: gpu=True would succeed")
    problems: list[str] = []
    for i in range(1200):  # MPICH runs out of communicator ids after ~1000 leaked ones
        err = attempt(lambda: mpiring.Communicator(world, gpu=True))
        if i % 100 == 0 or err is None or not isinstance(err, UnavailableError):
            problems += expect_raised(err, UnavailableError, "gpu=True but not every rank can use a GPU; "
                                      f"this rank cannot: {mpiring.cuda.unavailable_reason()}")
        if problems:
            break
    problems = [p for fs in world.allgather(problems) for p in fs]  # break together
    if not problems:
        with new_comm(world) as comm:
            problems += reduce_and_check(comm, np.dtype(np.float64), Op.SUM, 100, "out", seed=5,
                                         label="after failed gpu=True")
    all_ok(problems)


def test_environment_options(world: MPI.Intracomm, monkeypatch: pytest.MonkeyPatch) -> None:
    """MPIRING_CHECK and MPIRING_TIMEOUT set the defaults; a bad timeout is named."""
    monkeypatch.setenv("MPIRING_CHECK", "0")
    monkeypatch.setenv("MPIRING_TIMEOUT", "7.5")
    problems = []
    with mpiring.Communicator(world, gpu=False) as comm:
        if comm.check is not False or comm.timeout != 7.5:
            problems.append(f"env ignored: check={comm.check} timeout={comm.timeout}")
        problems += reduce_and_check(comm, np.dtype(np.float64), Op.PROD, 3000, "out", seed=4,
                                     label="check=0")
    with mpiring.Communicator(world, gpu=False, check=True, timeout=3) as comm:
        if comm.check is not True or comm.timeout != 3.0:
            problems.append("explicit arguments must win over the environment")
    monkeypatch.setenv("MPIRING_TIMEOUT", "soon")
    problems += expect_raised(attempt(lambda: mpiring.Communicator(world, gpu=False)),
                              InvalidArgumentError, "MPIRING_TIMEOUT='soon': not a number")
    all_ok(problems)


def test_without_agreement_check(world: MPI.Intracomm) -> None:
    """check=False gives the same results."""
    with new_comm(world, check=False) as comm:
        problems = []
        for i, dtype in enumerate(DTYPES):
            problems += reduce_and_check(comm, dtype, Op(i % 4 + 1), 5000 + i, "out", seed=i,
                                         label=f"check=False {dtype.name}")
    all_ok(problems)


def test_default_batches_option(world: MPI.Intracomm) -> None:
    """Communicator(batches=k) applies to every call that does not ask for its own."""
    with mpiring.Communicator(world, gpu=False, batches=3, timeout=60) as comm:
        before = comm.ring_pipeline(gpu=False).next_seq
        problems = reduce_and_check(comm, np.dtype(np.int64), Op.SUM, 9000, "out", seed=8, label="batches=3")
        used = comm.ring_pipeline(gpu=False).next_seq - before
        if used != 2 * (comm.size - 1) * 3:
            problems.append(f"{used} transfers, expected {2 * (comm.size - 1) * 3}")
    all_ok(problems)


def slow_down(link: Any, when: Callable[[], bool], rng: np.random.Generator) -> list[int]:
    """Make ``link``'s transport steps sleep now and then while ``when()``; returns a sleep counter."""
    slept = [0]

    def wrap(method: Callable[..., None]) -> Callable[..., None]:
        def slow(*args: Any) -> None:
            if when() and rng.random() < 0.05:
                pause = 0.03 if rng.random() < 0.03 else rng.uniform(0, 0.002)  # sometimes long
                time.sleep(pause)
                slept[0] += 1
            method(*args)
        return slow

    for name in ("send", "fold", "wait_slot_free", "wait_slot_full", "post_slot_full", "post_slot_free"):
        setattr(link, name, wrap(getattr(link, name)))
    return slept


def test_stragglers(world: MPI.Intracomm) -> None:
    """A rank that stalls at random steps (a different one each call) never corrupts a result."""
    shared = np.random.default_rng(99)  # the same plan of calls on every rank
    local = np.random.default_rng([99, world.rank])
    straggler = [0]
    with new_comm(world) as comm:
        slept = slow_down(comm.ring_pipeline(gpu=False).transport, lambda: comm.rank == straggler[0], local)
        problems: list[str] = []
        for i in range(60):
            straggler[0] = int(shared.integers(world.size))
            dtype = DTYPES[int(shared.integers(len(DTYPES)))]
            op = Op(int(shared.integers(1, 5)))
            mode = ["out", "in_place", "same", "new"][int(shared.integers(4))]
            count = int(shared.integers(1, 20000))
            problems += reduce_and_check(comm, dtype, op, count, mode, seed=500 + i,
                                         label=f"straggler call {i} {op.name} {dtype.name}[{count}] {mode}")
    sleepers = world.allgather(slept[0])
    if world.size > 1 and sum(1 for s in sleepers if s) < 2:
        problems.append(f"too few ranks straggled: sleeps per rank {sleepers}")
    all_ok(problems)


def timeout_problems(err: BaseException | None, took: float, timeout: float) -> list[str]:
    """Problems if ``err`` is not a timeout raised after about ``timeout`` seconds."""
    problems = [] if isinstance(err, MpiringTimeoutError) else [f"expected a timeout, got {err!r}"]
    if not timeout <= took < timeout + 5:
        problems.append(f"raised after {took:.2f} s, the timeout is {timeout} s")
    return problems


def failed_afterwards(comm: mpiring.Communicator) -> list[str]:
    """Problems unless ``comm`` refuses use after its failure, and closes at once."""
    problems = expect_raised(attempt(lambda: comm.Allreduce(np.ones(10), np.zeros(10))),
                             CommunicatorClosedError, "failed earlier", "MpiringTimeoutError")
    if "failed" not in repr(comm):
        problems.append(f"repr does not show the failure: {comm!r}")
    start = time.monotonic()
    err = attempt(comm.close)
    took = time.monotonic() - start
    if err is not None:
        problems.append(f"close after the failure raised {err!r}")
    if took > 0.3:
        problems.append(f"close after the failure waited {took:.2f} s for peers")
    return problems


def late_close(comm: mpiring.Communicator, wait: float) -> list[str]:
    """The rank that skipped: close after the others failed; it learns why, at once."""
    time.sleep(wait)
    start = time.monotonic()
    problems = expect_raised(attempt(comm.close), PeerFailedError, "abandoned it after an error")
    if time.monotonic() - start > 0.3:
        problems.append(f"close waited {time.monotonic() - start:.2f} s although peers had abandoned")
    return problems


@pytest.mark.mpi(min_size=2)
def test_timeout_when_a_rank_skips_a_call(world: MPI.Intracomm) -> None:
    """check=False, one rank skips a call: within the timeout every other rank raises
    MpiringTimeoutError naming itself, the peer, the algorithm, the step and the sequence number;
    the communicator then refuses use, and close() never waits on either side.
    Protection: the ring's bounded waits (signals.Waiter) and the close handshake."""
    me, size = world.rank, world.size
    skip = size - 1
    victim = (skip + 1) % size  # the rank whose previous neighbour never sends
    comm = new_comm(world, check=False, timeout=0.5, batches=1)
    problems = reduce_and_check(comm, np.dtype(np.int64), Op.SUM, 1000, "out", seed=3, label="warm-up")
    base = comm.ring_pipeline(gpu=False).next_seq
    if me == skip:
        problems += late_close(comm, 1.5)
    else:
        start = time.monotonic()
        err = attempt(lambda: comm.Allreduce(np.ones(1000), np.zeros(1000)))
        took = time.monotonic() - start
        relayed = isinstance(err, PeerFailedError)  # a peer timed out first: its mark stopped us
        if relayed:
            problems += expect_raised(err, PeerFailedError, "failed with MpiringTimeoutError")
            if took > 0.5 + 2.5:
                problems.append(f"relayed the timeout after {took:.2f} s")
        else:
            problems += timeout_problems(err, took, 0.5)
            problems += expect_raised(err, MpiringTimeoutError, f"rank {me} timed out after 0.5 s in the "
                                      "ring algorithm, step ", ", waiting for rank", "(seq ")
        if me == victim and not relayed:
            steps = 2 * (size - 1)
            problems += expect_raised(
                err, MpiringTimeoutError,
                f"ring algorithm, step 1 of {steps} (reduce-scatter), batch 1 of 1, fold of transfer seq "
                f"{base}, waiting for rank {skip} to fill slot {base % 2} (seq {base})")
            facts = (err.rank, err.peer, err.algorithm, err.step, err.seq) if err else None
            if facts != (me, skip, "ring", f"1 of {steps} (reduce-scatter)", base):
                problems.append(f"error attributes {facts}")
        problems += failed_afterwards(comm)
    with new_comm(world) as fresh:  # the ranks are in step again
        problems += reduce_and_check(fresh, np.dtype(np.float64), Op.SUM, 4321, "out", seed=6,
                                     label="after timeout")
    all_ok(problems)


@pytest.mark.mpi(min_size=2)
def test_agreement_timeout_when_a_rank_skips_a_call(world: MPI.Intracomm) -> None:
    """check=True, one rank skips a call: every other rank raises MpiringTimeoutError from the
    agreement check within the timeout, naming the rank that did not call and the call number,
    and before touching the output. Protection: the bounded (nonblocking, polled) agreement
    allreduce; without it these ranks block in MPI_Allreduce for ever."""
    me, size = world.rank, world.size
    skip = size // 2
    comm = new_comm(world, timeout=0.5)
    problems = reduce_and_check(comm, np.dtype(np.int32), Op.MAX, 777, "out", seed=4, label="warm-up")
    call = comm.stats().checked + 1
    if me == skip:
        problems += late_close(comm, 1.5)
    else:
        out = np.full(1000, -7.0)
        start = time.monotonic()
        err = attempt(lambda: comm.Allreduce(np.ones(1000), out))
        took = time.monotonic() - start
        if isinstance(err, PeerFailedError):  # a peer timed out first: its mark stopped this rank
            problems += expect_raised(err, PeerFailedError, "failed with MpiringTimeoutError",
                                      f"in the agreement check of call {call}")
            if took > 0.5 + 2.5:
                problems.append(f"relayed the timeout after {took:.2f} s")
        else:
            problems += timeout_problems(err, took, 0.5)
            problems += expect_raised(
                err, MpiringTimeoutError,
                f"rank {me} timed out after 0.5 s in the agreement check of call {call} (algorithm ring), "
                f"waiting for every rank to enter the agreement check of call {call}: 1 of {size} ranks "
                f"did not call allreduce (rank {skip} is at call {call - 1})")
            facts = (err.peer, err.step, err.seq) if err else None
            if facts != (skip, "agreement check", call):
                problems.append(f"error attributes {facts}")
        if not (out == -7.0).all():
            problems.append("the output was written although the call never started")
        problems += failed_afterwards(comm)
    with new_comm(world) as fresh:
        problems += reduce_and_check(fresh, np.dtype(np.float32), Op.SUM, 999, "in_place", seed=7,
                                     label="after agreement timeout")
    all_ok(problems)


@pytest.mark.mpi(min_size=2)
def test_close_is_bounded(world: MPI.Intracomm) -> None:
    """close() waits for the peers, but within the timeout: a rank whose peers do not close in time
    raises MpiringTimeoutError naming them, and the late ranks then raise PeerFailedError at once
    instead of blocking in MPI_Win_free. Protection: the close handshake in shared memory."""
    comm = new_comm(world, timeout=0.5)
    problems = reduce_and_check(comm, np.dtype(np.float64), Op.SUM, 100, "out", seed=9, label="warm-up")
    if world.rank == 0:
        start = time.monotonic()
        err = attempt(comm.close)
        problems += timeout_problems(err, time.monotonic() - start, 0.5)
        late = list(range(1, world.size))
        problems += expect_raised(err, MpiringTimeoutError, "rank 0 timed out after 0.5 s waiting for every "
                                  f"rank to close the communicator (ranks {late} did not)")
    else:
        problems += late_close(comm, 1.5)
    problems += expect_raised(attempt(lambda: comm.Allreduce(np.ones(3), np.zeros(3))),
                              CommunicatorClosedError, "this communicator is closed")
    with new_comm(world) as fresh:
        problems += reduce_and_check(fresh, np.dtype(np.int64), Op.SUM, 100, "out", seed=10, label="after")
    all_ok(problems)
