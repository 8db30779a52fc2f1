"""``tools.ab_summary`` over synthetic A/B files (each round's time per arm, arm / base from the
arms' means, more arms than two, points apart, wrong elements, refusals), and ``jobs/ab-node.sh``
run for real on the host transport: 2 ranks, base HEAD, a tarball of a tree and this checkout,
one round."""

from __future__ import annotations

import shutil
import subprocess
from csv import DictReader
from pathlib import Path

import pytest

from mpiring.bench.results import Row, write_csv
from tools.ab_summary import main, runs, summarize

ROOT = Path(__file__).resolve().parents[2]


def row(size: int, algo: str, time_us: float | None, status: str = "ok", wrong: int | None = 0) -> Row:
    return Row(size_bytes=size, count=size // 4, dtype="float32", op="sum", algo=algo, batches="-",
               placement="out", nranks=2, status=status, check="OK", wrong=wrong,
               time_us=time_us if status == "ok" else None)


def write(directory: Path, arm: str, number: int, rows: list[Row]) -> None:
    write_csv(directory / f"ab-{arm}-{number}_host_20261127.csv", rows)


def runs_rows(csv: Path) -> list[dict[str, str]]:
    with csv.open(newline="") as f:
        return list(DictReader(f))


def test_each_round_of_each_arm_and_the_ratio_of_their_means(tmp_path: Path) -> None:
    write(tmp_path, "base", 1, [row(1024, "oneshot", 10.0), row(4096, "oneshot", 20.0)])
    write(tmp_path, "base", 2, [row(1024, "oneshot", 12.0), row(4096, "oneshot", 22.0)])
    write(tmp_path, "new", 1, [row(1024, "oneshot", 8.0), row(4096, "oneshot", 21.0, wrong=3)])
    write(tmp_path, "new", 2, [row(1024, "oneshot", 9.0), row(4096, "oneshot", 21.0)])
    lines = summarize(runs(tmp_path))
    assert lines[0].startswith("# 2 rounds per arm")
    first, second = lines[2].split(), lines[3].split()
    assert first[:6] == ["allreduce", "oneshot", "float32", "sum", "out", "1024"]
    assert first[6:] == ["10.00", "12.00", "8.00", "9.00", f"{8.5 / 11.0:.3f}"]
    assert second[5] == "4096" and second[-1] == f"{21.0 / 21.0:.3f}"
    assert lines[-1] == "# wrong elements over the ok rows: base 0, new 3"


def test_every_arm_between_base_and_new_gets_its_ratio_to_base(tmp_path: Path) -> None:
    for arm, times in (("base", (10.0, 12.0)), ("v2", (5.0, 6.0)), ("new", (8.0, 9.0)), ("v1", (11.0, 11.0))):
        for k, t in enumerate(times, 1):
            write(tmp_path, arm, k, [row(1024, "oneshot", t, wrong=1 if arm == "v1" else 0)])
    files = runs(tmp_path)
    assert list(files) == ["base", "v1", "v2", "new"]
    lines = summarize(files)
    assert lines[1].split()[-3:] == ["v1/base", "v2/base", "new/base"]
    cells = lines[2].split()
    assert cells[6:14] == ["10.00", "12.00", "11.00", "11.00", "5.00", "6.00", "8.00", "9.00"]
    assert cells[14:] == [f"{11.0 / 11.0:.3f}", f"{5.5 / 11.0:.3f}", f"{8.5 / 11.0:.3f}"]
    assert lines[-1] == "# wrong elements over the ok rows: base 0, v1 2, v2 0, new 0"
    (tmp_path / "ab-v1-2_host_20261127.csv").unlink()
    with pytest.raises(ValueError, match=r"rounds differ: base \[1, 2\], v1 \[1\]"):
        runs(tmp_path)


def test_points_not_timed_everywhere_are_set_apart(tmp_path: Path) -> None:
    write(tmp_path, "base", 1, [row(1024, "oneshot", 10.0), row(1024, "ring", 30.0)])
    write(tmp_path, "new", 1, [row(1024, "oneshot", 9.0), row(1024, "ring", None, status="error"),
                               row(2048, "oneshot", 12.0)])
    lines = summarize(runs(tmp_path))
    assert [line.split()[1] for line in lines[2:] if not line.startswith("#")] == ["oneshot"]
    apart = [line for line in lines if line.startswith("# apart")]
    assert apart == ["# apart: allreduce oneshot float32 sum out 2048: not timed in every round of both arms",
                     "# apart: allreduce ring float32 sum out 1024: new ab-new-1_host_20261127.csv: error; "
                     "not timed in every round of both arms"]


def test_arms_that_cannot_be_compared_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path)]) == 2
    assert "holds no ab-base-*.csv and ab-new-*.csv" in capsys.readouterr().err
    write(tmp_path, "base", 1, [row(1024, "oneshot", 10.0)])
    write(tmp_path, "base", 2, [row(1024, "oneshot", 10.0)])
    write(tmp_path, "new", 1, [row(1024, "oneshot", 9.0)])
    assert main([str(tmp_path)]) == 2
    assert "rounds differ: base [1, 2], new [1]" in capsys.readouterr().err
    write(tmp_path, "new", 2, [row(1024, "oneshot", 9.0)])
    out = tmp_path / "summary.txt"
    assert main([str(tmp_path), "--out", str(out)]) == 0
    assert out.read_text() == capsys.readouterr().out


def test_the_job_script_runs_every_arm_on_the_host_transport(tmp_path: Path, job) -> None:
    """jobs/ab-node.sh, base HEAD, a tarball of HEAD's tree and this checkout, one round, 2 ranks,
    host arrays: every arm's files and a summary whose every point was timed by all three."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and this checkout's history")
    tarball = tmp_path / "trees" / "v1.tar"
    tarball.parent.mkdir()
    subprocess.run(["git", "archive", "-o", str(tarball), "HEAD"], cwd=ROOT, check=True)
    out = tmp_path / "out"
    done = job("ab-node.sh", ["HEAD", str(tarball), "--", "--host", "-b", "1K", "-e", "2K",
                              "--algo", "ring,mpi-direct"],
               limit=400, NGPUS="2", OUTDIR=str(out), ROUNDS="1", TIMEOUT="200")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    names = sorted(p.name.split("_")[0] for p in out.glob("ab-*.csv"))
    assert names == ["ab-base-1", "ab-new-1", "ab-v1-1"]
    summary = (out / "summary.txt").read_text()
    table = [line.split() for line in summary.splitlines() if not line.startswith("#")][1:]
    assert sorted((cells[1], cells[5]) for cells in table) == [
        ("mpi-direct", "1024"), ("mpi-direct", "2048"), ("ring", "1024"), ("ring", "2048")]
    assert all(len(cells) == 6 + 3 + 2 for cells in table)  # a time per arm, v1/base and new/base
    assert "# wrong elements over the ok rows: base 0, v1 0, new 0" in summary
    # The base and v1 trees are no checkouts: each arm's results name the commit it ran.
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout.strip()
    for arm in ("base", "v1"):
        (csv,) = out.glob(f"ab-{arm}-1_*.csv")
        commits = {r["commit"] for r in runs_rows(csv)}
        assert commits == {head[:7]}, (arm, commits)


def test_the_job_script_refuses_an_arm_it_cannot_name(tmp_path: Path, job) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and this checkout's history")
    tarball = tmp_path / "new.tar"
    subprocess.run(["git", "archive", "-o", str(tarball), "HEAD"], cwd=ROOT, check=True)
    done = job("ab-node.sh", ["HEAD", str(tarball), "--", "--host"], limit=60, NGPUS="2",
               OUTDIR=str(tmp_path / "out"))
    assert done.returncode == 2 and "arm name 'new'" in done.stderr
    assert not list((tmp_path / "out").glob("ab-*"))
