"""What a run records about itself: the code that measured (mpiring's version and commit, with
a -dirty mark; $MPIRING_COMMIT or "unknown" outside a checkout), ranks against CPUs per host
(more ranks than CPUs is said in the banner), and rows whose repetitions spread too far for
their median to repeat (marked ~)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import mpiring
from mpiring.bench import metadata, summary
from mpiring.bench.report import time_cell
from mpiring.bench.results import SPREAD_LIMIT, Row, spread_is_wide
from mpiring.bench.runner import Sweep

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


@needs_git
def test_the_commit_of_a_checkout_with_a_dirty_mark(tmp_path):
    package = tmp_path / "repo" / "mpiring"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    git(tmp_path / "repo", "init", "-q")
    git(tmp_path / "repo", "add", "mpiring/__init__.py")
    git(tmp_path / "repo", "commit", "-q", "-m", "one")
    head = git(tmp_path / "repo", "rev-parse", "HEAD")
    assert metadata.source_commit(package, {}) == head
    (tmp_path / "repo" / "results.csv").write_text("untracked files do not count\n")
    assert metadata.source_commit(package, {}) == head
    (package / "__init__.py").write_text("x = 2\n")
    assert metadata.source_commit(package, {}) == head + "-dirty"
    assert metadata.short_commit(head + "-dirty") == head[:12] + "-dirty"


@needs_git
def test_a_package_git_does_not_track_is_no_checkout(tmp_path):
    """A copy installed into a virtualenv inside another repository takes not its commit."""
    package = tmp_path / "other" / "venv" / "mpiring"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("x = 1\n")
    git(tmp_path / "other", "init", "-q")
    git(tmp_path / "other", "commit", "-q", "--allow-empty", "-m", "unrelated")
    assert metadata.source_commit(package, {}) == "unknown"
    assert metadata.source_commit(package, {metadata.COMMIT_ENV: "f00d"}) == "f00d"
    assert metadata.source_commit(tmp_path / "nowhere", {}) == "unknown"


def test_provenance_is_this_version_and_its_commit():
    code = metadata.provenance()
    assert code["mpiring"] == mpiring.__version__ == "0.2.0"
    assert code["commit"]
    line = summary.code_line({"mpiring": "0.2.0", "commit": "a" * 40 + "-dirty"})
    assert line == f"mpiring 0.2.0, commit {'a' * 12}-dirty"
    assert summary.code_line({}) == "mpiring ?, commit unknown"


def test_ranks_against_cpus_per_host():
    ranks = [{"host": "a.example", "cpu_ids": [0, 1]}, {"host": "a", "cpu_ids": [0, 1]},
             {"host": "a", "cpu_ids": [0, 1]}, {"host": "b", "cpu_ids": [0]},
             {"host": "b", "cpu_ids": [1]}, {"host": "c", "cpu_ids": list(range(8)),
                                             "cpu_quota": 1},
             {"host": "c", "cpu_ids": list(range(8)), "cpu_quota": 1}]
    load = metadata.cpu_load(ranks)
    assert load == {"a": {"ranks": 3, "cpus": 2, "oversubscribed": True},
                    "b": {"ranks": 2, "cpus": 2, "oversubscribed": False},  # bound, one CPU each
                    "c": {"ranks": 2, "cpus": 1, "oversubscribed": True}}  # a cgroup's quota
    line = metadata.cpu_line(load)
    assert line.startswith("a: 3 ranks on 2 CPUs; b: 2 ranks on 2 CPUs; c: 2 ranks on 1 CPU")
    assert "MORE RANKS THAN CPUs on a, c" in line and "rows marked ~" in line
    assert "MORE" not in metadata.cpu_line({"b": load["b"]})
    note = summary.oversubscribed_note({"cpus": load})
    assert "a runs 3 ranks on 2 CPUs; c runs 2 ranks on 1 CPUs" in note
    assert summary.oversubscribed_note({"cpus": {"b": load["b"]}}) == ""


def test_cpu_quota_of_a_cgroup(tmp_path):
    path = tmp_path / "cpu.max"
    path.write_text("150000 100000\n")
    assert metadata.cpu_quota(path) == 2
    path.write_text("max 100000\n")
    assert metadata.cpu_quota(path) is None
    assert metadata.cpu_quota(tmp_path / "none") is None
    assert metadata.usable_cpus()


def row(min_us: float | None, max_us: float | None, status: str = "ok") -> Row:
    return Row(size_bytes=1024, count=256, dtype="float32", op="sum", algo="mpi", batches="-",
               placement="out", nranks=4, status=status, check="OK", time_us=min_us,
               min_us=min_us, max_us=max_us, busbw_gbs=None if min_us is None else 1.0)


def test_a_row_whose_repetitions_spread_too_far_is_marked():
    assert SPREAD_LIMIT == 2.0
    assert spread_is_wide(row(100.0, 200.0)) is False  # twice: the limit itself
    assert spread_is_wide(row(100.0, 201.0)) is True
    assert spread_is_wide(row(None, None, "skipped")) is None
    sw = Sweep(None, None, None, None, None, "host", [], "mpi", [], None)
    noisy, quiet = row(112.0, 4205.0), row(112.0, 130.0)
    sw.add(noisy)
    sw.add(quiet)
    assert (noisy.noisy, quiet.noisy) == (True, False)
    assert time_cell(noisy) == "~112.0" and time_cell(quiet) == "112.0"
    assert time_cell(row(None, None, "skipped")) == "-"
    line = summary.noisy_line(sw.rows)
    assert line.startswith("1 of 2 timed rows marked ~ (noisy)") and "2x the fastest" in line
    assert summary.noisy_line([quiet]) == ""
    assert line in summary.summary_lines(sw.rows, "mpi")
