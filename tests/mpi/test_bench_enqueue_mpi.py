"""python -m mpiring.bench.enqueue on host arrays, every rank count: one line per case with
positive times, n/a for an algorithm that refuses the memory, a profile, and bad input."""

from __future__ import annotations

import re

import pytest
from mpi4py import MPI

from mpiring.bench import enqueue


def test_host_cases_and_profile(world: MPI.Intracomm, capsys: pytest.CaptureFixture[str]) -> None:
    code = enqueue.main(["--host", "--calls", "20", "--rounds", "2", "--algo", "ring,mpi,oneshot",
                         "--profile", "mpi"], world)
    out = capsys.readouterr().out
    assert code == 0
    if world.rank != 0:
        assert out == ""
        return
    assert f"1 KiB float32 sum, {world.size} rank(s), host arrays, median of 2 rounds of 20 calls" in out
    assert "# oneshot: n/a (algorithm 'oneshot' reduces GPU arrays" in out
    for label in ("np.copyto", "ring (check gpu)", "mpi (check gpu)", "ring (check off)", "mpi (check off)"):
        line = next(x for x in out.splitlines() if x.strip().startswith(label))
        median, low, high = map(float, re.search(r"(\d+\.\d+) us\s+\((\d+\.\d+)-(\d+\.\d+)\)$",
                                                 line).groups())
        assert 0 < low <= median <= high, line
    assert "# cProfile of 20 calls of mpi (check off)" in out and "dispatch.py" in out


def test_bad_algorithm_is_an_error_on_every_rank(world: MPI.Intracomm,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert enqueue.main(["--host", "--algo", "ring,shiny"], world) == 2
    assert "unknown algorithm 'shiny'" in capsys.readouterr().err
