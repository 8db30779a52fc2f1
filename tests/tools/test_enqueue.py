"""``python -m tools.enqueue`` on host arrays: one line per case with positive times, n/a for an
algorithm that refuses the memory, a profile, and bad input; in this process (one rank) and as
a job of two ranks."""

from __future__ import annotations

import re

import pytest
from mpi4py import MPI

from tools import enqueue

ARGS = ["--host", "--calls", "20", "--rounds", "2", "--algo", "ring,mpi,oneshot", "--profile", "mpi"]


def check_output(out: str, ranks: int) -> None:
    """Rank 0's report of :data:`ARGS` on ``ranks`` ranks (with several, each rank's median too)."""
    assert f"1 KiB float32 sum, {ranks} rank(s), host arrays, median of 2 rounds of 20 calls" in out
    assert "# oneshot: n/a (algorithm 'oneshot' reduces GPU arrays" in out
    for label in ("np.copyto", "ring (check gpu)", "mpi (check gpu)", "ring (check off)", "mpi (check off)"):
        line = next(x for x in out.splitlines() if x.strip().startswith(label))
        found = re.search(r"(\d+\.\d+) us\s+\((\d+\.\d+)-(\d+\.\d+)\)(  ranks( \d+\.\d+)+)?$", line)
        median, low, high = map(float, found.groups()[:3])
        assert 0 < low <= median <= high, line
        each = [float(m) for m in found.group(4).split()[1:]] if found.group(4) else []
        assert len(each) == (0 if ranks == 1 else ranks), line
        assert not each or each[0] == median, line  # rank 0's own median is the one printed first
    assert "# cProfile of 20 calls of mpi (check off)" in out and "dispatch.py" in out


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_host_cases_and_profile_on_one_rank(capsys: pytest.CaptureFixture[str]) -> None:
    assert enqueue.main(ARGS, MPI.COMM_WORLD) == 0
    check_output(capsys.readouterr().out, 1)


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_the_help_describes_what_is_timed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        enqueue.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "usage: python -m tools.enqueue" in out and "What the calling thread spends" in out


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_bad_algorithm_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert enqueue.main(["--host", "--algo", "ring,shiny"], MPI.COMM_WORLD) == 2
    assert "unknown algorithm 'shiny'" in capsys.readouterr().err


def test_two_ranks_as_a_user_runs_it(tool) -> None:
    """``mpiexec -n 2 python -m tools.enqueue ...``: rank 0 alone prints the report."""
    done = tool("enqueue", ARGS, ranks=2)
    assert done.returncode == 0, done.stderr
    check_output(done.stdout, 2)
    assert done.stdout.count("# host time per eager call") == 1


def test_without_algo_every_row_and_auto_with_its_pick(tool) -> None:
    """The default (no ``--algo``) times every row serving the memory and ``auto``, labelled
    with the row auto picks for the size (auto is no row of the table itself)."""
    done = tool("enqueue", ["--host", "--calls", "5", "--rounds", "1"], ranks=2)
    assert done.returncode == 0, done.stderr
    labels = [line.split(" (")[0].strip() for line in done.stdout.splitlines() if "(check" in line]
    assert "mpi" in labels and any(re.fullmatch(r"auto=[a-z-]+", label) for label in labels), done.stdout


def test_a_bad_algorithm_ends_every_rank_with_status_2(tool) -> None:
    done = tool("enqueue", ["--host", "--algo", "ring,shiny"], ranks=2)
    assert done.returncode == 2 and "unknown algorithm 'shiny'" in done.stderr, done.stderr


class _World:
    """The ranks' answers to one allgather, as rank ``rank`` sees them."""

    def __init__(self, rank: int, others: dict[int, object]) -> None:
        self.rank, self.others = rank, others
        self.size = len(others) + 1

    def allgather(self, mine: object) -> list[object]:
        return [mine if r == self.rank else self.others[r] for r in range(len(self.others) + 1)]


class _Comm:
    def __init__(self) -> None:
        self.synchronized = 0

    def synchronize(self) -> None:
        self.synchronized += 1


def _raise(err: Exception):
    def call() -> None:
        raise err
    return call


def test_a_refusal_on_one_rank_skips_the_case_on_every_rank() -> None:
    """Every rank gets the same verdict, naming the rank that refused its own arguments rather
    than one that only reports it (the cases timed must be the same on every rank)."""
    from mpiring.core.errors import InvalidArgumentError, PeerArgumentError

    comm = _Comm()
    assert enqueue.first_refusal(_World(0, {1: None, 2: None}), comm, lambda: None) is None
    assert comm.synchronized == 1  # a GPU-checked call's verdict surfaces at the wait
    own = (False, 2, "rank 2's arrays are on GPU 0")
    peer = _raise(PeerArgumentError("rank 2 rejected its arguments"))
    assert enqueue.first_refusal(_World(0, {1: None, 2: own}), comm, peer) == own[2]
    assert enqueue.first_refusal(_World(1, {0: None, 2: own}), comm, lambda: None) == own[2]
    mine = _raise(InvalidArgumentError("this rank's own"))
    assert enqueue.first_refusal(_World(0, {1: own, 2: own}), comm, mine) == "this rank's own"


# -- the "kernel alone" cases and their "above its launch" lines, without a GPU ------------------


class _Kept:
    """A communicator's ``bound_launches()``, as a test sets them."""

    def __init__(self, *launches: object) -> None:
        self.launches = list(launches)

    def bound_launches(self) -> list[object]:
        return list(self.launches)


def test_kernel_alone_takes_the_one_launch_a_call_kept_where_every_rank_has_one() -> None:
    old, new = object(), object()
    comm = _Kept(old)
    alone = enqueue.KernelAlone(_World(0, {1: True}), None, 0)
    before = comm.bound_launches()
    assert alone.launch_since(comm, before) is None  # the call kept nothing new
    comm.launches.append(new)
    assert alone.launch_since(comm, before) is new
    elsewhere = enqueue.KernelAlone(_World(0, {1: False}), None, 0)
    assert elsewhere.launch_since(comm, before) is None  # rank 1 found none: no case anywhere
    comm.launches.append(object())
    assert alone.launch_since(comm, before) is None  # two: which one is not known


def test_above_its_launch_per_rank_and_above_the_slowest_ranks_launch() -> None:
    alone = enqueue.KernelAlone(_World(0, {1: None}), None, 0)
    alone.of = {1: 2, 3: 4}
    labels = ["copy", "oneshot (check gpu)", "oneshot (check gpu) kernel alone", "twoshot (check off)",
              "twoshot (check off) kernel alone"]
    medians = [[1.0, 9.0, 4.0, 8.0, 4.5], [1.0, 8.5, 5.0, 8.0, 4.0]]
    header, one, two = alone.report(labels, medians, 40)
    assert header.startswith("# above its launch: the case's median minus its kernel alone's (rank 0; ")
    # rank 0: 9.0 - 4.0; rank 1: 8.5 - 5.0; the case's median (rank 0's) - the largest floor (5.0)
    assert one == "  " + labels[1].ljust(40) + "     +5.0 us  ranks +5.0 +3.5  above the slowest +4.0 us"
    assert two == "  " + labels[3].ljust(40) + "     +3.5 us  ranks +3.5 +4.0  above the slowest +3.5 us"
    alone.of = {1: 2}
    (_, single) = alone.report(labels[:3], [medians[0][:3]], 40)
    assert single.endswith("+5.0 us")  # one rank: its own figure alone
    alone.of = {}
    assert alone.report(labels, medians, 40) == []


def test_where_the_floor_cannot_be_built_one_line_says_why(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(enqueue.launch_floor, "load", lambda: (None, "no C compiler 'gcc'"))
    assert enqueue.KernelAlone.make(_World(0, {1: ""})) is None
    assert capsys.readouterr().out == "# (no launch floor: no C compiler 'gcc', on rank 0)\n"
    monkeypatch.setattr(enqueue.launch_floor, "load", lambda: (object(), ""))
    monkeypatch.setattr(enqueue.launch_floor, "driver_launch_address", lambda: 0x1234)
    assert enqueue.KernelAlone.make(_World(1, {0: "no Python.h"})) is None  # rank 0's reason: it prints
    assert capsys.readouterr().out == ""
    assert enqueue.KernelAlone.make(_World(0, {1: "no Python.h"})) is None
    assert capsys.readouterr().out == "# (no launch floor: no Python.h, on rank 1)\n"
    made = enqueue.KernelAlone.make(_World(0, {1: ""}))
    assert made is not None and made.address == 0x1234
