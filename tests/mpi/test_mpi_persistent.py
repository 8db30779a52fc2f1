"""Persistent allreduce (``Communicator.Allreduce_init``, mpiring.call.persistent) through the
communicator, on host memory: a toy row with a ``bind`` entry and host arrays dressed as CuPy
ones, so that Starts replay as GPU calls do (in Python here; compiled on GPUs:
tests/gpu/test_gpu_replay.py). Thousands of Starts of two requests, interleaved with plain
calls of the same shapes, on changing data with stragglers, every element checked; a Start
agrees with a peer's plain Allreduce; a mismatch raises on every rank; a check change or a
new row sends the next Start down the full path; closed, freed and plain host arrays."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
import toy_algorithm
from keyed_arrays import Keyed
from mpi4py import MPI
from mpi_support import all_ok
from replayed_rows import keyed_comm, registered, replayed_row

import mpiring
from mpiring import algorithms

world = MPI.COMM_WORLD
REPLAYED: list[int] = []  # one entry per replayed launch
ROW = replayed_row("toy-persistent", 97, REPLAYED)
row = registered(ROW)  # registered for this module's tests


def value(rank: int, call: int, count: int) -> np.ndarray:
    return (np.arange(count) % 89 + 1000.0 * rank + call % 1009).astype(np.float64)


def expected(call: int, count: int) -> np.ndarray:
    return sum(value(r, call, count) for r in range(world.size))


@pytest.mark.mpi
@pytest.mark.parametrize("check", [False, True], ids=["check-off", "host-check"])
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
def test_thousands_of_starts_on_changing_data_are_exact(in_place, check) -> None:
    """Two requests of two shapes and plain Allreduce calls of the first shape, in an order
    drawn alike on every rank; inputs changed and outputs poisoned before each; one rank late
    now and then. Each shape is planned once; every other call and Start is replayed."""
    calls, counts = 2000, (1031, 7)
    rng = np.random.default_rng(5)  # the same draws on every rank
    late = np.random.default_rng([5, world.rank])
    xs = [np.empty(n) for n in counts]
    outs = [np.empty(n) for n in counts]
    problems = []
    with keyed_comm(check=check) as comm:
        REPLAYED.clear()
        requests = [comm.Allreduce_init(MPI.IN_PLACE if in_place else Keyed(x), Keyed(out),
                                        algorithm=ROW.name) for x, out in zip(xs, outs, strict=True)]
        for call in range(calls):
            which = int(rng.integers(3))  # 0, 1: a request's Start; 2: a plain call of shape 0
            shape = which % 2
            x, out, n = xs[shape], outs[shape], counts[shape]
            x[:] = value(world.rank, call, n)
            out[:] = np.nan
            if in_place:
                out[:] = x
            if late.random() < 0.01:
                time.sleep(0.002)
            if which < 2:
                requests[which].Start()
            else:
                comm.Allreduce(MPI.IN_PLACE if in_place else Keyed(x), Keyed(out), algorithm=ROW.name)
            want = expected(call, n)
            if not np.array_equal(out, want):
                problems.append(f"call {call} ({'Start' if which < 2 else 'Allreduce'} of shape {shape}): "
                                f"{int(np.sum(out != want))} wrong elements")
            requests[0].Wait()
        stats = comm.stats()
        if (stats.planned, stats.replayed, len(REPLAYED)) != (2, calls - 2, calls - 2):
            problems.append(f"planned {stats.planned}, replayed {stats.replayed} ({len(REPLAYED)} "
                            f"launches), expected 2, {calls - 2}")
        want_checked = calls if check and world.size > 1 else 0
        if stats.checked != want_checked:
            problems.append(f"{stats.checked} calls checked, expected {want_checked}")
    all_ok(problems)


@pytest.mark.mpi
def test_a_start_meets_a_peers_plain_allreduce() -> None:
    """Rank 0 Starts a request while the others call Allreduce with the same arguments: one
    collective, checked alike (the request is no new kind of call)."""
    x = np.empty(33)
    with keyed_comm(check=True) as comm:
        request = comm.Allreduce_init(MPI.IN_PLACE, Keyed(x), algorithm=ROW.name)
        problems = []
        for call in range(50):
            x[:] = call + world.rank
            if world.rank == 0:
                request.Start()
            else:
                comm.Allreduce(MPI.IN_PLACE, Keyed(x), algorithm=ROW.name)
            want = world.size * call + world.size * (world.size - 1) / 2
            if not np.all(x == want):
                problems.append(f"call {call}: {x[:3]} != {want}")
    all_ok(problems)


@pytest.mark.mpi
@pytest.mark.parametrize("culprit", ["count", "op"])
def test_a_mismatched_start_raises_on_every_rank_and_leaves_the_data(culprit) -> None:
    """The last rank's request has another count (or op) than its peers': every Start raises
    RankMismatchError on every rank before anything runs, replayed or not, and the inputs
    stay; the communicator goes on."""
    if world.size == 1:
        pytest.skip("one rank has no one to disagree with")
    count, culprit_rank = 64, world.size - 1
    a = np.empty(2 * count)
    mine = count + 1 if culprit == "count" and world.rank == culprit_rank else count
    op = MPI.MAX if culprit == "op" and world.rank == culprit_rank else MPI.SUM
    problems = []
    with keyed_comm(check=True) as comm:
        request = comm.Allreduce_init(MPI.IN_PLACE, Keyed(a[:mine]), op, algorithm=ROW.name)
        for attempt in range(3):
            a[:] = 7.0
            try:
                request.Start()
                problems.append(f"Start {attempt}: no error")
            except mpiring.RankMismatchError as err:
                if f"{culprit} (this rank" not in str(err):
                    problems.append(f"the error does not name the {culprit}: {err}")
            if not np.all(a == 7.0):
                problems.append(f"Start {attempt} changed its buffer")
        a[:count] = 1.0
        comm.Allreduce(MPI.IN_PLACE, Keyed(a[:count]), algorithm=ROW.name)
        if not np.all(a[:count] == world.size):
            problems.append(f"after the mismatch: {a[:4]}")
    all_ok(problems)


@pytest.mark.mpi
def test_a_check_change_or_a_new_row_sends_the_next_start_down_the_full_path() -> None:
    """Setting ``check`` drops the plans (a replay carries the check as bound) and a new row may
    change auto's pick: the next Start is planned afresh (and checked as now set), the later
    ones replay again."""
    x = np.empty(16)
    several = world.size > 1
    other = dataclasses.replace(toy_algorithm.ROW, name="toy-persistent-other", code=96)
    problems = []
    with keyed_comm(check=False) as comm:
        request = comm.Allreduce_init(MPI.IN_PLACE, Keyed(x), algorithm=ROW.name)

        def starts(n: int, label: str) -> None:
            for _ in range(n):
                x[:] = 1.0
                request.Start()
                if not np.all(x == world.size):
                    problems.append(f"{label}: {x[:4]}")

        starts(3, "before")
        before = comm.stats()
        comm.check = True
        starts(3, "check on")
        after = comm.stats()
        got = (after.planned - before.planned, after.replayed - before.replayed,
               after.checked - before.checked)
        if got != (1, 2, 3 if several else 0):
            problems.append(f"after check on: (planned, replayed, checked) {got}")
        mpiring.register(other)
        try:
            starts(3, "new row")
        finally:
            algorithms.unregister(other.name)
        final = comm.stats()
        got = (final.planned - after.planned, final.replayed - after.replayed)
        if got != (1, 2):
            problems.append(f"after a new row: (planned, replayed) {got}")
    all_ok(problems)


@pytest.mark.mpi
def test_closed_freed_and_plain_host_arrays() -> None:
    """A Start on a closed communicator raises CommunicatorClosedError (its kept replay is not
    run); a freed request raises InvalidArgumentError; plain host arrays (no key) take the full
    path at every Start and are exact."""
    x = np.empty(16)
    plain = np.empty(16)
    problems = []
    comm = keyed_comm(check=False)
    request = comm.Allreduce_init(MPI.IN_PLACE, Keyed(x), algorithm=ROW.name)
    unkeyed = comm.Allreduce_init(MPI.IN_PLACE, plain)
    for _ in range(3):
        x[:] = plain[:] = 2.0
        request.Start()
        unkeyed.Start()
        if not (np.all(x == 2 * world.size) and np.all(plain == 2 * world.size)):
            problems.append(f"{x[:2]}, {plain[:2]}")
    stats = comm.stats()
    if (stats.planned, stats.replayed) != (4, 2):
        problems.append(f"planned {stats.planned}, replayed {stats.replayed}: expected 4, 2")
    REPLAYED.clear()
    comm.close()
    with pytest.raises(mpiring.CommunicatorClosedError, match="closed"):
        request.Start()
    if REPLAYED:
        problems.append("a closed communicator's request ran its replay")
    request.Free()
    with pytest.raises(mpiring.InvalidArgumentError, match="freed"):
        request.Start()
    all_ok(problems)
