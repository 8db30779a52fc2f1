"""An interrupted ``python -m mpiring.bench`` under a real ``mpiexec``: Ctrl-C (SIGINT) or SIGTERM
(as Slurm sends at a time limit) to ``mpiexec``, which forwards it to every rank, or to one rank
alone. Whoever gets it, every rank stops at the same point between two points and ends normally,
so rank 0's files are whole and say why they are incomplete, the job exits with 128 + the
signal's number, and no MPICH shared-memory segment is left in /dev/shm (MPI_Abort, which kills
ranks before they unlink theirs, is not called).

Each case starts its own short job (host transport, 2 ranks, a size range that would run for
minutes) and signals it once its first rows are on disk; a few seconds each.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from fault_launch import (
    MARKER,
    MPI_ENV_PREFIXES,
    end_job,
    find_mpiexec,
    job_processes,
    orphaned,
    shm_files,
)
from mpi4py import MPI

from mpiring.bench.results import read_csv_counted, read_jsonl

if MPI.COMM_WORLD.size > 1:  # each test starts its own mpiexec: run them from the serial suite
    pytest.skip("these tests launch their own mpiexec jobs", allow_module_level=True)

LIMIT = 60.0  # a hung job is killed (and the test fails) after this many seconds
FIRST_ROWS = 3  # rows on disk before the signal


def _rank_pids(token: str) -> dict[int, int]:
    """Rank -> pid of the job's Python ranks (MPICH's PMI_RANK in their environment)."""
    ranks = {}
    for pid in job_processes(token):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"mpiring.bench" not in cmdline:
            continue
        for item in env:
            if item.startswith(b"PMI_RANK="):
                ranks[int(item.split(b"=", 1)[1])] = pid
    return ranks


def _lines(path: Path) -> int:
    try:
        return path.read_text().count("\n")
    except OSError:
        return 0


@pytest.mark.parametrize(("target", "sig"), [
    ("mpiexec", signal.SIGINT),  # Ctrl-C at the terminal
    ("mpiexec", signal.SIGTERM),  # a time limit (mpiexec forwards it to every rank)
    ("rank 1", signal.SIGTERM),  # one rank alone: the ranks agree to stop all the same
])
def test_an_interrupted_run_leaves_whole_files_and_no_shared_memory(tmp_path, target, sig):
    name = signal.Signals(sig).name
    out = tmp_path / "out"
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(MPI_ENV_PREFIXES)}
    env.update(PYTHONUNBUFFERED="1", MPIRING_TIMEOUT="60", **{MARKER: token})
    command = [find_mpiexec(), "-n", "2", sys.executable, "-m", "mpiring.bench", "--host",
               "-b", "1K", "-e", "1G", "--time-budget", "0.01", "--reps", "3", "--no-plot",
               "--progress", "off", "--output-dir", str(out), "--name", "cut"]
    before = shm_files()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline and proc.poll() is None:
            if _lines(next(iter(out.glob("cut_*.jsonl")), out / "none")) >= FIRST_ROWS:
                break
            time.sleep(0.05)
        assert proc.poll() is None, f"the run ended before it was signalled:\n{proc.communicate()[0]}"
        if target == "mpiexec":
            proc.send_signal(sig)
        else:
            os.kill(_rank_pids(token)[1], sig)
        output, _ = proc.communicate(timeout=LIMIT)
    except subprocess.TimeoutExpired:
        end_job(proc.pid, token)
        pytest.fail(f"the interrupted run hung and was killed:\n{proc.communicate()[0]}",
                    pytrace=False)
    finally:
        if proc.poll() is None:
            end_job(proc.pid, token)
        for _ in range(100):  # ranks may take a moment to go after mpiexec
            if not job_processes(token):
                break
            time.sleep(0.05)
        outlived = job_processes(token)
        end_job(proc.pid, token)
        left = orphaned(shm_files() - before)
        for path in left:  # leave the machine clean, whatever the test finds
            os.unlink(path)
    why = f"--- job output ---\n{output[-3000:]}"
    assert not outlived, f"processes outlived mpiexec\n{why}"
    assert not left, f"MPICH shared memory left in /dev/shm: {sorted(left)}\n{why}"
    assert proc.returncode == 128 + sig, why
    assert f"interrupted by {name} after" in output, why
    assert "Abort" not in output and "rank 1: ," not in output, why
    (json_path,) = out.glob("cut_*.json")
    doc = json.loads(json_path.read_text())
    meta, results = doc["metadata"], doc["results"]
    assert (meta["complete"], meta["interrupted"]) == (False, name), why
    assert meta["rows_written"] == len(results) >= FIRST_ROWS, why
    assert meta["mpiring"] and meta["commit"], meta
    rows, dropped = read_jsonl(json_path.with_suffix(".jsonl"))
    assert dropped == 0 and [r.size_bytes for r in rows] == [r["size_bytes"] for r in results]
    assert all(r.commit == meta["commit"] for r in rows)
    csv_rows, dropped = read_csv_counted(json_path.with_suffix(".csv"))
    assert dropped == 0 and len(csv_rows) == len(rows)
    with json_path.with_suffix(".csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    assert not list(out.glob("*.tmp")) and not list(out.glob("*.png"))
