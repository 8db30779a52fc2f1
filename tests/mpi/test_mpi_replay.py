"""The eager fast path (mpiring.call.replay) through the communicator, on host memory: a toy row
with a ``bind`` entry, and host arrays dressed as CuPy ones so that calls have a key. Calls of
a shape seen before are replayed (not planned afresh), over thousands of calls on changing
data with stragglers, every element checked; other shapes, ops and algorithms take the full
path; a row checked on the host keeps that check in its replays (every call waits for and compares
the peers' calls, and a mismatch raises on every rank, replayed or not)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from keyed_arrays import Keyed
from mpi4py import MPI
from mpi_support import all_ok
from replayed_rows import keyed_comm, registered, replayed_row

import mpiring

world = MPI.COMM_WORLD
REPLAYED: list[int] = []  # one entry per replayed call
ROW = replayed_row("toy-replayed", 98, REPLAYED)
row = registered(ROW)  # registered for this module's tests


def expected(call: int, count: int) -> np.ndarray:
    """The sum over ranks of ``value(rank, call)`` below, exactly (small integers in float64)."""
    return sum(value(r, call, count) for r in range(world.size))


def value(rank: int, call: int, count: int) -> np.ndarray:
    return (np.arange(count) % 97 + 1000.0 * rank + call % 1013).astype(np.float64)


@pytest.mark.mpi
@pytest.mark.parametrize("check", [False, True], ids=["check-off", "host-check"])
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
def test_thousands_of_replayed_calls_on_changing_data_are_exact(in_place, check) -> None:
    """Every call after the first is replayed, on changing data with stragglers, every element
    checked. The toy row checks on the host (no GPU-side check): with the check on, its replays
    still enter the check at every call (the peers' calls awaited and compared before the launch)."""
    calls, count = 2000, 1031
    rng = np.random.default_rng([7, world.rank])
    x, out = np.empty(count), np.empty(count)
    kx, kout = Keyed(x), Keyed(out)
    problems = []
    with keyed_comm(check=check) as comm:
        REPLAYED.clear()
        for call in range(calls):
            x[:] = value(world.rank, call, count)
            out[:] = np.nan  # poison
            if rng.random() < 0.01:  # a straggler: with the check on, the peers' checks wait for it
                time.sleep(0.002)
            if in_place:
                out[:] = x
                comm.Allreduce(MPI.IN_PLACE, kout, algorithm=ROW.name)
            else:
                comm.Allreduce(kx, kout, algorithm=ROW.name)
            want = expected(call, count)
            if not np.array_equal(out, want):
                problems.append(f"call {call}: {int(np.sum(out != want))} wrong elements")
        if len(REPLAYED) != calls - 1:
            problems.append(f"{len(REPLAYED)} of {calls} calls replayed, expected all but the first")
        stats = comm.stats()
        if comm.compiled_replay:  # host arrays: no GPU words to read, the Python replay
            problems.append("a host communicator says its replays run compiled")
        if (stats.planned, stats.replayed) != (1, calls - 1):
            problems.append(f"comm.stats() counts {stats.planned} planned, {stats.replayed} replayed")
        want_checked = calls if check and world.size > 1 else 0  # one rank: no one to disagree with
        if stats.checked != want_checked:
            problems.append(f"comm.stats() counts {stats.checked} checked, expected {want_checked}")
    all_ok(problems)


@pytest.mark.mpi
def test_a_new_shape_op_or_algorithm_takes_the_full_path_once() -> None:
    count = 64
    a, b = np.ones(count), np.ones(2 * count)
    problems = []
    with keyed_comm(check=False) as comm:
        REPLAYED.clear()
        for kwargs, buf, want in ((dict(), a, world.size), (dict(), a, world.size),
                                  (dict(), b, world.size), (dict(), b, world.size),
                                  (dict(op=MPI.MAX), a, 1), (dict(op=MPI.MAX), a, 1),
                                  (dict(algorithm="ring"), a, world.size)):
            buf[:] = 1.0
            comm.Allreduce(MPI.IN_PLACE, Keyed(buf), algorithm=kwargs.pop("algorithm", ROW.name), **kwargs)
            if not np.all(buf == want):
                problems.append(f"{kwargs}: {buf[:4]} != {want}")
        if len(REPLAYED) != 3:  # the second call of each of the three toy shapes
            problems.append(f"{len(REPLAYED)} replayed calls, expected 3")
    all_ok(problems)


@pytest.mark.mpi
@pytest.mark.parametrize("culprit", ["count", "op"])
def test_a_mismatch_on_a_replayed_shape_raises_on_every_rank_and_the_communicator_goes_on(culprit) -> None:
    """After replays of one shape, the last rank calls another count (or op): it takes the full
    path, its peers replay, and every rank raises RankMismatchError from the host check before
    anything runs; the inputs are untouched and the next matching call is replayed and exact."""
    if world.size == 1:
        pytest.skip("one rank has no one to disagree with")
    count = 64
    a = np.empty(2 * count)
    culprit_rank = world.size - 1
    problems = []
    with keyed_comm(check=True) as comm:
        for _ in range(3):
            a[:count] = 1.0
            comm.Allreduce(MPI.IN_PLACE, Keyed(a[:count]), algorithm=ROW.name)
        REPLAYED.clear()
        mine = count + 1 if culprit == "count" and world.rank == culprit_rank else count
        op = MPI.MAX if culprit == "op" and world.rank == culprit_rank else MPI.SUM
        a[:] = 7.0
        try:
            comm.Allreduce(MPI.IN_PLACE, Keyed(a[:mine]), op=op, algorithm=ROW.name)
            problems.append("no error")
        except mpiring.RankMismatchError as err:
            if f"{culprit} (this rank" not in str(err):
                problems.append(f"the error does not name the {culprit}: {err}")
        if not np.all(a == 7.0):
            problems.append("a mismatched call changed its buffer")
        a[:count] = 1.0
        comm.Allreduce(MPI.IN_PLACE, Keyed(a[:count]), algorithm=ROW.name)
        if not np.all(a[:count] == world.size):
            problems.append(f"after the mismatch: {a[:4]}")
        # Only the matching call's launch ran as a replay: the peers' replays of the mismatched
        # call stopped at the check, the culprit's call took the full path.
        if len(REPLAYED) != 1:
            problems.append(f"{len(REPLAYED)} replayed launches, expected 1")
    all_ok(problems)


@pytest.mark.mpi
@pytest.mark.parametrize("first", [False, True], ids=["off-then-on", "on-then-off"])
def test_setting_check_drops_replays_bound_under_the_other_setting(first) -> None:
    """A replay carries the check as it was bound. Setting ``check`` drops the kept plans: after
    off -> on, the next call is planned afresh and checked, and the later ones replay with the
    check (the toy row checks on the host, as its replays do); after on -> off, calls replay
    without it. The GPU-checked rows' replays, which carry the post, are
    tests/gpu/test_gpu_replay.py's."""
    x = np.ones(16)
    several = world.size > 1
    with keyed_comm(check=first) as comm:
        for _ in range(3):
            x[:] = 1.0
            comm.Allreduce(MPI.IN_PLACE, Keyed(x), algorithm=ROW.name)
        before = comm.stats()
        comm.check = not first
        comm.check = not first  # the same value again: nothing to drop
        problems = [] if comm.replays_kept == 0 else [f"{comm.replays_kept} replays kept"]
        for _ in range(3):
            x[:] = 1.0
            comm.Allreduce(MPI.IN_PLACE, Keyed(x), algorithm=ROW.name)
        after = comm.stats()
        if not np.all(x == world.size):
            problems.append(f"result {x[:4]}")
        checked_now = not first and several  # on several ranks, with the check on: every call
        planned, replayed, checked = (after.planned - before.planned, after.replayed - before.replayed,
                                      after.checked - before.checked)
        want = (1, 2, 3) if checked_now else (1, 2, 0)
        if (planned, replayed, checked) != want:
            problems.append(f"(planned, replayed, checked) = {(planned, replayed, checked)}, "
                            f"expected {want}")
    all_ok(problems)


@pytest.mark.mpi
def test_a_closed_or_failed_communicator_refuses_a_replayable_call() -> None:
    x = np.ones(16)
    comm = keyed_comm(check=False)
    for _ in range(2):
        comm.Allreduce(MPI.IN_PLACE, Keyed(x), algorithm=ROW.name)
    comm.close()
    with pytest.raises(mpiring.CommunicatorClosedError, match="closed"):
        comm.Allreduce(MPI.IN_PLACE, Keyed(x), algorithm=ROW.name)
