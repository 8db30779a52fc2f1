"""mpiring.bench.measure on one rank: the check runs first and keeps wrong results from being
timed; errors and unavailability become outcomes; iteration planning; a serial end-to-end run.
"""

from __future__ import annotations

import contextlib
import csv

import numpy as np
import pytest
from mpi4py import MPI

import mpiring
from mpiring.bench.arrays import HostSpace
from mpiring.bench.data import InputGenerator
from mpiring.bench.measure import Point, PointMeasurer, SizeBuffers, StageFailed, TimingPolicy, agree

COUNT = 1000


class FakeComm:
    """Stands in for mpiring.Communicator on one rank, misbehaving on request."""

    def __init__(self, mode: str = "good") -> None:
        self.mode = mode
        self.check = True
        self.calls = 0
        self.checked_calls = 0
        self.counts: list[int] = []
        self.replays = True  # a call of a count seen before counts as replayed, as on GPUs
        self.planned = self.replayed = 0

    def stats(self) -> mpiring.CallStats:
        return mpiring.CallStats(self.planned, self.replayed, self.checked_calls, False)

    def Allreduce(self, send, recv, op, *, algorithm=None, batches=None):  # noqa: N802
        if self.replays and len(recv) in self.counts:
            self.replayed += 1
        else:
            self.planned += 1
        self.calls += 1
        self.checked_calls += int(self.check)
        self.counts.append(len(recv))
        if self.mode == "wrong-odd" and len(recv) % 2:
            if send is not MPI.IN_PLACE:
                np.copyto(recv, send)
            recv[len(recv) // 2] += 1
            return
        if self.mode == "past-odd" and len(recv) % 2:
            if send is not MPI.IN_PLACE:
                np.copyto(recv, send)
            recv.base[len(recv)] = 0  # one element past the call's vector
            return
        if self.mode == "unavailable":
            raise mpiring.UnavailableError("no NCCL in this test")
        if self.mode == "limit":
            raise mpiring.InvalidArgumentError("oneshot takes at most 1 MiB")
        if self.mode == "boom":
            raise RuntimeError("boom")
        if self.mode == "silent":
            return  # writes nothing: the poison must show it
        if send is not MPI.IN_PLACE:
            np.copyto(recv, send)  # one rank: the allreduce is the input
        if self.mode == "wrong":
            recv[3] += 1
        if self.mode == "wrong-far-apart":
            recv[3] += 1
            recv[40] += 1
        if self.mode == "clobber" and send is not MPI.IN_PLACE:
            send[0] += 1


class CountingSpace(HostSpace):
    """Host arrays that count the device synchronizations asked for (each a no-op here)."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs = 0

    def synchronize(self) -> None:
        self.syncs += 1


def float32_sum_buffers() -> tuple[HostSpace, SizeBuffers]:
    """Host arrays and the point's buffers of COUNT float32 elements, for a sum on one rank."""
    space = HostSpace()
    gen = InputGenerator(np, "sum", np.dtype(np.float32), 1, seed=5)
    return space, SizeBuffers(space, gen, COUNT, rank=0, cache=True)


def measure(mode="good", placement="out", check=1, dtype=np.float32, op="sum", overlap=None,
            blocking=False, **policy):
    space = CountingSpace()
    gen = InputGenerator(np, op, np.dtype(dtype), 1, seed=5)
    bufs = SizeBuffers(space, gen, COUNT, rank=0, cache=True)
    comm = FakeComm(mode)
    policy = TimingPolicy(**{"budget_s": 0.01, "reps": 3, **policy})
    m = PointMeasurer(MPI.COMM_SELF, comm, space, policy, check=check, time_agreement=False,
                      mpi_op=MPI.SUM, in_place=MPI.IN_PLACE, overlap=overlap, blocking=blocking)
    measure.space = space
    point = Point(COUNT * np.dtype(dtype).itemsize, COUNT, np.dtype(dtype).name, op, "ring",
                  "auto", placement)
    return m.measure(point, bufs), comm


@pytest.mark.parametrize("placement", ["out", "in"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64])
def test_correct_point_is_checked_then_timed(placement, dtype):
    out, comm = measure(placement=placement, dtype=dtype)
    assert (out.status, out.check) == ("ok", "OK"), out.note
    s = out.stats
    assert 0 < s.min <= s.median <= s.max and s.mean > 0 and s.std >= 0
    assert out.reps == 3 and 1 <= out.iters <= 1000 and out.warmup >= 2
    # the check, the odd-count check, a probe, the warm-up and the timed calls
    assert comm.calls == 1 + 1 + 1 + out.warmup + out.reps * out.iters
    assert comm.checked_calls == 2  # the library's agreement check: checked calls only
    assert comm.counts[:2] == [COUNT, COUNT - 7]  # then an odd count near it
    assert comm.check is True  # restored


@pytest.mark.parametrize(("mode", "placement", "words"), [
    ("wrong", "out", "1 of 1000 elements wrong, first at index 3"),
    ("wrong", "in", "1 of 1000 elements wrong, first at index 3"),
    ("silent", "out", "1000 of 1000 elements wrong, first at index 0: got nan"),
    ("clobber", "out", "sendbuf modified: 1 of 1000"),
])
def test_wrong_results_fail_and_are_never_timed(mode, placement, words):
    out, comm = measure(mode, placement)
    assert (out.status, out.check) == ("fail", "FAIL")
    assert out.stats is None and out.iters is None
    assert comm.calls == 1
    assert words in out.note and out.note.startswith("rank 0:")
    assert out.wrong == int(words.split(" of ")[0].split()[-1])  # #wrong: the elements counted


@pytest.mark.parametrize("mode", ["wrong", "silent"])
def test_another_librarys_call_is_checked_as_mpirings_rows_are(mode):
    """A baseline or rival row (the measurer handed its call) is checked element by element
    too: a wrong result fails it, untimed."""
    space, bufs = float32_sum_buffers()
    comm = FakeComm(mode)
    m = PointMeasurer(MPI.COMM_SELF, FakeComm(), space, TimingPolicy(budget_s=0.01), check=1,
                      time_agreement=False, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
    point = Point(4 * COUNT, COUNT, "float32", "sum", "nccl-direct", "nccl-direct", "out")
    out = m.measure(point, bufs, call=lambda: comm.Allreduce(bufs.send, bufs.recv, MPI.SUM))
    assert (out.status, out.check) == ("fail", "FAIL") and out.stats is None
    assert out.wrong == (1 if mode == "wrong" else COUNT)


class FixedTimer:
    """A timer whose every region takes ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def start(self) -> None:
        pass

    def stop(self) -> float:
        return self.seconds


def test_a_regions_time_is_divided_among_its_calls():
    """Each repetition times ``iters`` back-to-back calls in one region: the figure per call is
    the region's time over ``iters``."""
    space, bufs = float32_sum_buffers()
    m = PointMeasurer(MPI.COMM_SELF, FakeComm(), space, TimingPolicy(iters=4, reps=3), check=1,
                      time_agreement=False, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
    m.timer = FixedTimer(0.008)
    out = m.measure(Point(4 * COUNT, COUNT, "float32", "sum", "ring", "auto", "out"), bufs)
    assert out.status == "ok" and out.iters == 4
    assert out.stats.median == pytest.approx(0.002) and out.stats.max == pytest.approx(0.002)


def test_wrong_elements_are_counted_over_every_piece(monkeypatch):
    """The check compares a buffer piece by piece (data.CHUNK elements each, 2**24 on the
    machines): wrong elements in two pieces both count, and the first is the first."""
    from mpiring.bench import collectives, data
    monkeypatch.setattr(data, "CHUNK", 16)
    monkeypatch.setattr(collectives, "CHUNK", 16)
    out, _ = measure("wrong-far-apart")
    assert (out.status, out.wrong) == ("fail", 2)
    assert "2 of 1000 elements wrong, first at index 3" in out.note


@pytest.mark.parametrize("checks", [1, 3])
def test_check_iterations_each_on_fresh_poison(checks):
    """-c N: N checked calls before timing; a correct point reports #wrong 0."""
    out, comm = measure(check=checks)
    assert (out.status, out.check, out.wrong) == ("ok", "OK", 0)
    assert comm.checked_calls == checks + 1  # and the odd-count call; no other checked calls


@pytest.mark.parametrize("placement", ["out", "in"])
@pytest.mark.parametrize(("mode", "words"), [
    ("wrong-odd", "wrong result at count 993: 1 of 993 elements wrong, first at index 496"),
    ("past-odd", "a call of 993 elements wrote past them: 1 of 7 elements wrong, first at index 0"),
])
def test_a_row_wrong_only_at_odd_counts_fails(mode, placement, words):
    """The timed size is even (1000 elements); a row that is wrong only at odd counts, or that
    writes past a shorter vector, fails the point through the odd-count check, untimed."""
    out, comm = measure(mode, placement)
    assert (out.status, out.check) == ("fail", "FAIL"), out.note
    assert out.stats is None and comm.calls == 2
    assert words in out.note, out.note
    assert out.wrong == 1


class FlakyComm(FakeComm):
    """Correct on its first call, wrong on the second: only a second check finds it."""

    def Allreduce(self, send, recv, op, *, algorithm=None, batches=None):  # noqa: N802
        self.mode = "wrong" if self.calls == 1 else "good"
        super().Allreduce(send, recv, op, algorithm=algorithm, batches=batches)


def test_a_second_check_catches_what_the_first_missed():
    space, bufs = float32_sum_buffers()
    m = PointMeasurer(MPI.COMM_SELF, FlakyComm(), space, TimingPolicy(budget_s=0.01), check=2,
                      time_agreement=False, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
    out = m.measure(Point(4 * COUNT, COUNT, "float32", "sum", "ring", "auto", "out"), bufs)
    assert (out.status, out.wrong) == ("fail", 1) and out.stats is None


@pytest.mark.parametrize("check", [1, 0], ids=["checked", "unchecked"])
@pytest.mark.parametrize("replays", [True, False])
def test_the_replayed_share_of_the_timed_calls(replays, check):
    """The row records what share of its timed repetitions' calls the communicator replayed
    (its stats()): all of them where it replays a shape seen before, even when no checked call
    ran the shape first (the probe did), none where it never replays; no share for another
    library's calls (the measurer is handed them)."""
    space, bufs = float32_sum_buffers()
    comm = FakeComm()
    comm.replays = replays
    m = PointMeasurer(MPI.COMM_SELF, comm, space, TimingPolicy(budget_s=0.01), check=check,
                      time_agreement=True, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
    point = Point(4 * COUNT, COUNT, "float32", "sum", "ring", "auto", "out")
    out = m.measure(point, bufs)
    assert out.status == "ok" and out.replayed == (1.0 if replays else 0.0)
    rival = m.measure(point, bufs, call=lambda: comm.Allreduce(bufs.send, bufs.recv, MPI.SUM))
    assert rival.status == "ok" and rival.replayed is None


def test_integer_poison_catches_a_silent_call():
    out, _ = measure("silent", dtype=np.int32)
    assert out.status == "fail" and str(np.iinfo(np.int32).max) in out.note


def test_unavailable_and_errors_become_outcomes():
    out, _ = measure("unavailable")
    assert out.status == "unavailable" and "no NCCL" in out.note and not out.needs_rebuild
    out, _ = measure("boom")
    assert out.status == "error" and "RuntimeError: boom" in out.note and out.needs_rebuild


@pytest.mark.parametrize("check", [1, 0])
def test_rejected_arguments_are_inapplicable_not_errors(check):
    out, comm = measure("limit", check=check)
    assert (out.status, out.check) == ("inapplicable", "-")
    assert out.note == "rank 0: InvalidArgumentError: oneshot takes at most 1 MiB"
    assert not out.needs_rebuild and out.stats is None and comm.calls == 1


class FakeWorld:
    """allgather answers with this rank's part (rank 0) and pretend ranks' parts after it."""

    def __init__(self, others):
        self.others = others
        self.size = 1 + len(others)
        self.local = None

    def allgather(self, local):
        self.local = local
        return [local, *self.others]


def part(exc: Exception | None) -> tuple:
    """What a rank whose stage raised ``exc`` (or nothing) gives agree()'s allgather."""
    world = FakeWorld([])

    def stage():
        if exc is not None:
            raise exc

    with contextlib.suppress(StageFailed):
        agree(world, stage)
    return world.local


@pytest.mark.parametrize(("mine", "others", "status", "rebuild"), [
    (mpiring.InvalidArgumentError("too big"), [mpiring.InvalidArgumentError("too big")] * 2,
     "inapplicable", False),
    (mpiring.PeerArgumentError("rank 2 rejected"), [mpiring.PeerArgumentError("rank 2"),
                                                    mpiring.InvalidArgumentError("too big")],
     "inapplicable", False),
    (mpiring.PeerArgumentError("rank 1 rejected"), [mpiring.UnavailableError("no NCCL"), None],
     "unavailable", False),
    (mpiring.InvalidArgumentError("too big"), [RuntimeError("boom"), None], "error", True),
    (mpiring.RankMismatchError("count differs"), [None, None], "error", False),
])
def test_agree_names_the_cause_not_the_peers(mine, others, status, rebuild):
    def stage():
        raise mine

    with pytest.raises(StageFailed) as info:
        agree(FakeWorld([part(e) for e in others]), stage)
    err = info.value
    assert (err.status, err.rebuild) == (status, rebuild)
    assert "PeerArgumentError" not in err.errors[0]  # a cause comes first


class FakeOverlap:
    def __init__(self):
        self.seen = []

    def measure(self, call, algo, ar_s, iters, size=None):
        call()
        self.seen.append((algo, ar_s, iters, size))
        return "figures"


def test_overlap_runs_after_a_timed_point_only():
    fake = FakeOverlap()
    out, comm = measure(overlap=fake)
    assert out.overlap == "figures"
    assert fake.seen == [("ring", out.stats.median, out.iters, COUNT * 4)]  # the size keys the work
    assert comm.check is True  # restored after the timed loops and the overlap
    fake = FakeOverlap()
    out, _ = measure("wrong", overlap=fake)
    assert out.status == "fail" and out.overlap is None and fake.seen == []


def test_no_check_times_without_checking():
    out, comm = measure("wrong", check=0)
    assert (out.status, out.check, out.wrong) == ("ok", "off", None)
    assert comm.checked_calls == 0


class TwoRankWorld:
    """allgather: this rank's part, then a pretend rank 1 twice as slow (timing stages) or
    with one wrong element (check stages)."""

    rank, size = 0, 2

    def allgather(self, local):
        status, value, note, argument = local
        if status == "ok" and isinstance(value, tuple) and len(value) == 5:
            return [local, (status, tuple(2 * v for v in value), note, argument)]
        return [local, local]

    def Barrier(self):  # noqa: N802
        pass


@pytest.mark.parametrize(("average", "factor"), [(0, 1.0), (1, 1.5), (2, 1.0), (3, 2.0)])
def test_averaging_modes_combine_the_ranks_times(average, factor):
    """-a: rank 0's time, the average, the minimum or the maximum over ranks."""
    space, bufs = float32_sum_buffers()
    policy = TimingPolicy(budget_s=0.01, reps=3, iters=5, warmup=1, average=average)
    m = PointMeasurer(TwoRankWorld(), FakeComm(), space, policy, check=0, time_agreement=False,
                      mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
    mine = []
    real = m._timed

    def timed(call, k):
        mine.append(real(call, k))
        return mine[-1]

    m._timed = timed
    out = m.measure(Point(4 * COUNT, COUNT, "float32", "sum", "ring", "auto", "out"), bufs)
    reps = sorted(mine[-3:])
    assert out.stats.median == pytest.approx(factor * reps[1])
    assert out.slowest_rank == 1


def test_fixed_iterations_and_warmup():
    out, comm = measure(iters=4, warmup=2, reps=5)
    assert (out.iters, out.warmup, out.reps) == (4, 2, 5)
    assert comm.calls == 1 + 1 + 1 + 2 + 5 * 4


def test_blocking_mode_waits_for_every_timed_call():
    """-z 1: the CPU waits for each timed call: one synchronize more per call than -z 0."""
    syncs = {}
    for blocking in (False, True):
        measure(iters=4, warmup=2, reps=5, check=0, blocking=blocking)
        syncs[blocking] = measure.space.syncs
    assert syncs[True] - syncs[False] == 1 + 2 + 5 * 4  # the probe, the warm-up, the timed calls


def test_warmup_policy():
    p = TimingPolicy(budget_s=0.15)
    assert p.warmup_for(1e-6) == 50 and p.warmup_for(1.0) == 2
    assert p.warmup_for(0.001) == 15
    assert TimingPolicy(warmup=0).warmup_for(1.0) == 0
    assert p.iters_for(1e-3) == 30 and TimingPolicy(iters=7).iters_for(1.0) == 7


def test_real_communicator_one_rank():
    comm = mpiring.Communicator(MPI.COMM_SELF, gpu=False)
    try:
        space = HostSpace()
        gen = InputGenerator(np, "sum", np.dtype(np.float32), 1, seed=1)
        bufs = SizeBuffers(space, gen, COUNT, rank=0, cache=True)
        m = PointMeasurer(MPI.COMM_SELF, comm, space, TimingPolicy(budget_s=0.01), check=True,
                          time_agreement=False, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
        for algo, batches in (("ring", "auto"), ("ring", 2), ("mpi", None)):
            for place in ("out", "in"):
                p = Point(4 * COUNT, COUNT, "float32", "sum", algo, batches, place)
                out = m.measure(p, bufs)
                assert (out.status, out.check) == ("ok", "OK"), out.note
    finally:
        comm.close()


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial end-to-end run")
def test_serial_end_to_end(tmp_path):
    from mpiring.bench.__main__ import main

    status = main(["-b", "1K", "-e", "16K", "--output-dir", str(tmp_path), "--time-budget",
                   "0.005", "--reps", "2", "--placement", "out,in", "--batches", "auto,2",
                   "--name", "t", "--progress", "off", "--host"])
    assert status == 0
    csvs = list(tmp_path.glob("t_*.csv"))
    assert len(csvs) == 1 and len(list(tmp_path.glob("t_*.json"))) == 1
    assert len(list(tmp_path.glob("t_*.png"))) == 2  # main figure and batch sweep
    with csvs[0].open() as f:
        rows = list(csv.DictReader(f))
    # 5 sizes x ((mpi-direct, mpi, mpi-twoshot) x 2 placements
    #            + (ring, hier) x 2 batches x 2 placements)
    assert len(rows) == 5 * 14
    assert {r["status"] for r in rows} == {"ok"} and {r["check"] for r in rows} == {"OK"}
    assert {r["wrong"] for r in rows} == {"0"}
    assert {r["algo"] for r in rows} == {"mpi-direct", "mpi", "ring", "hier", "mpi-twoshot"}
    assert {r["baseline"] for r in rows} == {"mpi-direct"}
    # host arrays never replay; the rival's calls are not the communicator's
    assert {r["replayed"] for r in rows if r["algo"] != "mpi-direct"} == {"0.0"}
    assert {r["replayed"] for r in rows if r["algo"] == "mpi-direct"} == {""}


class BlockComm(FakeComm):
    """One rank's Reduce_scatter_block and Allgather (copies), counting which was called."""

    def __init__(self, mode: str = "good") -> None:
        super().__init__(mode)
        self.methods: list[str] = []

    def Reduce_scatter_block(self, send, recv, op, *, algorithm=None, batches=None):  # noqa: N802
        self.methods.append("Reduce_scatter_block")
        self.Allreduce(send, recv, op)

    def Allgather(self, send, recv, *, algorithm=None, batches=None):  # noqa: N802
        self.methods.append("Allgather")
        self.Allreduce(send, recv, None)


@pytest.mark.parametrize("placement", ["out", "in"])
@pytest.mark.parametrize(("collective", "method"), [("reduce_scatter", "Reduce_scatter_block"),
                                                    ("allgather", "Allgather")])
@pytest.mark.parametrize("mode", ["good", "wrong"])
def test_block_collectives_are_called_and_checked(collective, method, placement, mode):
    space = HostSpace()
    gen = InputGenerator(np, "sum", np.dtype(np.float32), 1, seed=5)
    bufs = SizeBuffers(space, gen, COUNT, rank=0, cache=True, collective=collective)
    comm = BlockComm(mode)
    m = PointMeasurer(MPI.COMM_SELF, comm, space, TimingPolicy(budget_s=0.01, reps=2), check=1,
                      time_agreement=False, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
    out = m.measure(Point(4 * COUNT, COUNT, "float32", "sum", "mpi", None, placement, collective),
                    bufs)
    assert set(comm.methods) == {method}
    if mode == "good":
        assert (out.status, out.check, out.wrong) == ("ok", "OK", 0), out.note
    else:
        assert (out.status, out.wrong) == ("fail", 1) and "index 3" in out.note
