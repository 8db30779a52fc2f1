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
    """Rank 0's report of :data:`ARGS` on ``ranks`` ranks."""
    assert f"1 KiB float32 sum, {ranks} rank(s), host arrays, median of 2 rounds of 20 calls" in out
    assert "# oneshot: n/a (algorithm 'oneshot' reduces GPU arrays" in out
    for label in ("np.copyto", "ring (check gpu)", "mpi (check gpu)", "ring (check off)", "mpi (check off)"):
        line = next(x for x in out.splitlines() if x.strip().startswith(label))
        median, low, high = map(float, re.search(r"(\d+\.\d+) us\s+\((\d+\.\d+)-(\d+\.\d+)\)$",
                                                 line).groups())
        assert 0 < low <= median <= high, line
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


def test_a_bad_algorithm_ends_every_rank_with_status_2(tool) -> None:
    done = tool("enqueue", ["--host", "--algo", "ring,shiny"], ranks=2)
    assert done.returncode == 2 and "unknown algorithm 'shiny'" in done.stderr, done.stderr
