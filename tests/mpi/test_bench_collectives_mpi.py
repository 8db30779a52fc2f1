"""python -m mpiring.bench --collective reduce_scatter / allgather on real ranks (host transport),
and the bench on a communicator across (virtual) nodes: node-scoped rows left out, and refused
by name when asked for.

Run:  mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_bench_collectives_mpi.py
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from mpi4py import MPI
from mpi_support import all_ok

from mpiring.bench.__main__ import main
from mpiring.bench.collectives import element_counts
from mpiring.bench.sizes import sweep
from mpiring.core.topology import VIRTUAL_NODES

pytestmark = pytest.mark.mpi(min_size=1)

world = MPI.COMM_WORLD
QUICK = ["--time-budget", "0.005", "--reps", "2", "--progress", "off", "--host"]


def rows_of(directory: Path, name: str) -> list[dict[str, str]]:
    with next(directory.glob(f"{name}_*.csv")).open() as f:
        return list(csv.DictReader(f))


def test_reduce_scatter_and_allgather_end_to_end(shared_dir):
    """Every point checked (#wrong 0) and timed, for mpi, ring and mpi-twoshot, both placements; sizes are
    the whole buffer rounded down to whole blocks, count is one rank's block, busbw is algbw
    (n-1)/n; one figure per collective."""
    n = world.size
    status = main(["--collective", "reduce_scatter,allgather", "-b", "1K", "-e", "64K", "-f", "4",
                   "--placement", "out,in", "--output-dir", str(shared_dir), "--name", "bc",
                   *QUICK])
    problems = [] if status == 0 else [f"exit status {status}"]
    world.Barrier()
    rows = rows_of(shared_dir, "bc")
    sizes = [b for b, _ in element_counts(sweep(1024, 65536, 4), 4, n, "allgather")]
    want = {(c, s, a, p) for c in ("reduce_scatter", "allgather") for s in sizes
            for a in ("mpi", "ring", "mpi-twoshot") for p in ("out", "in")}
    got = {(r["collective"], int(r["size_bytes"]), r["algo"], r["placement"]) for r in rows}
    if got != want or len(rows) != len(want):
        problems.append(f"rows {sorted(got)} != {sorted(want)}")
    for r in rows:
        where = f"{r['collective']} {r['size_bytes']} {r['algo']} {r['placement']}"
        if (r["status"], r["check"], r["wrong"]) != ("ok", "OK", "0"):
            problems.append(f"{where}: {r['status']} {r['check']} #wrong {r['wrong']}: {r['note']}")
            continue
        if int(r["count"]) * n * 4 != int(r["size_bytes"]) or int(r["nranks"]) != n:
            problems.append(f"{where}: count {r['count']} nranks {r['nranks']}")
        alg, bus = float(r["algbw_gbs"]), float(r["busbw_gbs"])
        if abs(bus - alg * (n - 1) / n) > 1e-9 * max(bus, 1):
            problems.append(f"{where}: busbw {bus} != algbw * (n-1)/n")
    names = sorted(p.name.split("_", 3)[-1] for p in shared_dir.glob("bc_*.png"))
    if names != ["allgather.png", "reduce_scatter.png"]:
        problems.append(f"figures {sorted(p.name for p in shared_dir.glob('bc_*.png'))}")
    meta = json.loads(next(shared_dir.glob("bc_*.json")).read_text())["metadata"]
    if meta["benchmark"] != "reduce_scatter,allgather" or meta["complete"] is not True:
        problems.append(f"metadata benchmark={meta['benchmark']} complete={meta['complete']}")
    all_ok(problems)


def test_nccl_tests_output_names_the_collective(shared_dir, capsys):
    status = main(["--collective", "allgather", "-b", "4K", "-e", "16K", "-f", "4", "--algo", "mpi",
                   "--nccl-tests", "--output-dir", str(shared_dir), "--no-plot", *QUICK])
    problems = [] if status == 0 else [f"exit status {status}"]
    if world.rank == 0:
        lines = capsys.readouterr().out.splitlines()
        if "# Collective test starting: mpiring allgather, algorithm mpi" not in lines:
            problems.append("no allgather block title")
        data = [line.split() for line in lines if line.strip() and not line.startswith("#")]
        if len(data) != 2 or any(d[3] != "none" or d[8] != "0" or d[12] != "0" for d in data):
            problems.append(f"data lines {data}")
    all_ok(problems)


def run_on_virtual_nodes(argv: list[str]) -> int:
    os.environ[VIRTUAL_NODES] = "2"  # read when the bench builds its communicator
    try:
        return main(argv)
    finally:
        del os.environ[VIRTUAL_NODES]


@pytest.mark.mpi(min_size=2)
def test_across_virtual_nodes_node_rows_are_left_out(shared_dir, capsys):
    """Two virtual nodes: ring (one node's shared memory) is not in the default sweep, and the
    banner says so; hier and the MPI baselines run, checked."""
    status = run_on_virtual_nodes(["--collective", "all", "-b", "1K", "-e", "4K", "-f", "4",
                                   "--output-dir", str(shared_dir), "--name", "vn", "--no-plot",
                                   *QUICK])
    problems = [] if status == 0 else [f"exit status {status}"]
    if world.rank == 0:
        out = " ".join(capsys.readouterr().out.split())
        if "left out ring (not in the default sweep: it needs every rank on one node" not in out:
            problems.append("no banner line naming the rows left out")
    world.Barrier()
    rows = rows_of(shared_dir, "vn")
    got = {(r["collective"], r["algo"]) for r in rows}
    want = {(c, a) for c in ("allreduce", "reduce_scatter", "allgather") for a in ("mpi", "mpi-twoshot")}
    want |= {("allreduce", "hier"), ("allreduce", "mpi-direct")}  # the direct row: allreduce only
    if got != want:
        problems.append(f"rows of {sorted(got)} != {sorted(want)}")
    bad = [r for r in rows if (r["status"], r["wrong"]) != ("ok", "0")]
    if bad:
        problems.append(f"{len(bad)} rows not ok: {bad[0]}")
    all_ok(problems)


@pytest.mark.mpi(min_size=2)
def test_across_virtual_nodes_asking_for_a_node_row_is_an_error(shared_dir, capsys):
    status = run_on_virtual_nodes(["--algo", "mpi,ring", "-b", "1K", "-e", "1K", "--output-dir",
                                   str(shared_dir), *QUICK])
    problems = [] if status == 3 else [f"exit status {status}"]
    if world.rank == 0:
        err = " ".join(capsys.readouterr().err.split())
        if "--algo ring: it runs only where every rank is on one node" not in err:
            problems.append(f"message {err!r}")
    if list(shared_dir.iterdir()):
        problems.append("files written")
    all_ok(problems)
