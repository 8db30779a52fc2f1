"""python -m mpiring.bench on real ranks (host arrays) reports each row's own SM statement:
the ring's and mpi-twoshot's in the table's "SMs stated" and "fold B/B" columns and in the
CSV, "-" and empty cells for ``mpi``, whose work mpiring cannot know.

Run:  mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_bench_sm_work_mpi.py
"""

from __future__ import annotations

import csv

import pytest
from mpi4py import MPI
from mpi_support import all_ok

from mpiring.bench.__main__ import main
from mpiring.ring.schedule import RingPlan

pytestmark = pytest.mark.mpi(min_size=2)

world = MPI.COMM_WORLD


def ring_fold_traffic(n: int, count: int, itemsize: int = 4) -> float:
    """Bytes the ring's reduce-scatter folds move per byte, per rank, counted on its schedule."""
    plan = RingPlan(n, count, 1)
    moved = sum(3 * t.recv_count * itemsize for r in range(n) for t in plan.transfers(r) if t.reduce)
    return moved / (n * count * itemsize)


def test_the_bench_reports_each_rows_sm_work(shared_dir, capsys):
    status = main(["-b", "1K", "-e", "4K", "--output-dir", str(shared_dir), "--name", "smwork",
                   "--algo", "ring,mpi,mpi-twoshot", "--time-budget", "0.01", "--reps", "2",
                   "--progress", "off"])
    out = capsys.readouterr().out
    problems = [] if status == 0 else [f"exit status {status}"]
    world.Barrier()
    (path,) = sorted(shared_dir.glob("smwork_*.csv"))
    with path.open() as f:
        rows = list(csv.DictReader(f))
    n = world.size
    for r in rows:
        where = f"{r['size_bytes']} {r['algo']}"
        if r["algo"] == "ring":
            want_sms, want = "0", ring_fold_traffic(n, int(r["count"]))
        elif r["algo"] == "mpi-twoshot":
            want_sms, want = "0", (3 * n - 1) / n  # float32: a copy and n - 1 in-place folds
        else:
            want_sms, want = "", None
        got = None if r["fold_traffic"] == "" else float(r["fold_traffic"])
        stated = (r["stated_sms"], r["stated_blocks"])
        if stated != (want_sms, want_sms) or (got is None) != (want is None) or \
                (want is not None and abs(got - want) > 1e-12):
            problems.append(f"{where}: stated_sms {r['stated_sms']!r} stated_blocks {r['stated_blocks']!r} "
                            f"fold_traffic {got}, want {want_sms!r} {want}")
    if world.rank == 0:
        lines = out.splitlines()
        if not any("SMs" in line and "fold" in line for line in lines):
            problems.append("no 'SMs stated' / 'fold B/B' header in the table")
        cells = {}  # algo -> (SMs stated, fold B/B) of its table lines, the cells before #wrong
        for line in lines:
            words = line.split()
            if len(words) > 8 and words[3] == "float32":  # size, unit, count, type, op, algo
                cells.setdefault(words[5], []).append((words[-3], words[-2]))
        first = f"{ring_fold_traffic(n, 256):.2f}"  # 1 KiB
        if not cells.get("ring") or cells["ring"][0] != ("0", first):
            problems.append(f"ring's table cells {cells.get('ring')}, want 0 and {first} at 1 KiB")
        if not cells.get("mpi") or set(cells["mpi"]) != {("-", "-")}:
            problems.append(f"mpi's table cells {cells.get('mpi')}, want '-'")
    all_ok(problems)
