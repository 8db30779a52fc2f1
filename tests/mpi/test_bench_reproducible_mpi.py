"""python -m mpiring.bench --reproducible on real ranks (host transport): the row
``auto-reproducible`` (auto through a second communicator made with reproducible=True) beside the
default rows, checked (#wrong 0) and timed at every point, its pick mpi-twoshot, its speed-up
against MPI; and without the flag no such row.

Run:  mpiexec -n 2 python -m pytest --with-mpi tests/mpi/test_bench_reproducible_mpi.py
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from mpi4py import MPI
from mpi_support import all_ok

from mpiring.bench.__main__ import main
from mpiring.bench.algorithms import AUTO_REPRODUCIBLE, default_sweep

pytestmark = pytest.mark.mpi(min_size=2)

world = MPI.COMM_WORLD
QUICK = ["--host", "-b", "1K", "-e", "64K", "-f", "4", "--time-budget", "0.005", "--reps", "2",
         "--no-plot", "--progress", "off"]
SIZES = (1024, 4096, 16384, 65536)


def files_of(directory: Path, name: str) -> tuple[list[dict[str, str]], dict]:
    with next(directory.glob(f"{name}_*.csv")).open() as f:
        rows = list(csv.DictReader(f))
    return rows, json.loads(next(directory.glob(f"{name}_*.json")).read_text())["metadata"]


def test_host_run_with_the_reproducible_row(shared_dir, capsys):
    status = main([*QUICK, "--reproducible", "--placement", "out,in", "--output-dir",
                   str(shared_dir), "--name", "rep"])
    problems = [] if status == 0 else [f"exit status {status}"]
    out = capsys.readouterr().out
    if world.rank == 0:
        lines = [line.split() for line in out.splitlines()
                 if f"{AUTO_REPRODUCIBLE}:" in line and not line.startswith("#")]
        if len(lines) != 2 * len(SIZES):
            problems.append(f"{len(lines)} table lines of the row:\n{out}")
        for words in lines:  # size unit count type op algo batches place ... #wrong
            if words[5] != f"{AUTO_REPRODUCIBLE}:mpi-twoshot" or words[-1] != "0":
                problems.append(f"table line {' '.join(words)}")
        text = " ".join(out.split())
        if f"# variant {AUTO_REPRODUCIBLE}: auto on a second communicator made with " \
                "reproducible=True" not in text:
            problems.append("no banner line saying what the row is")
    world.Barrier()
    rows, meta = files_of(shared_dir, "rep")
    want = [*default_sweep(False), AUTO_REPRODUCIBLE]  # on the host: after the default rows
    order = [(int(r["size_bytes"]), r["algo"], r["placement"]) for r in rows]
    if order != [(s, a, p) for s in SIZES for a in want for p in ("out", "in")]:
        problems.append(f"rows in the order {order}")
    for r in rows:
        where = f"{r['size_bytes']} {r['algo']} {r['placement']}"
        if (r["status"], r["check"], r["wrong"]) != ("ok", "OK", "0"):
            problems.append(f"{where}: {r['status']} {r['check']} #wrong {r['wrong']}: {r['note']}")
        elif r["algo"] == AUTO_REPRODUCIBLE and (r["resolved"] != "mpi-twoshot"
                                                 or not float(r["speedup"]) > 0):
            problems.append(f"{where}: pick {r['resolved']!r}, speed-up {r['speedup']!r}")
    if meta.get("variants") != {AUTO_REPRODUCIBLE: {"algorithm": "auto", "reproducible": True}}:
        problems.append(f"metadata variants {meta.get('variants')}")
    all_ok(problems)


def test_the_row_in_every_collective(shared_dir):
    """Reduce_scatter_block reduces in rank order too (mpi-twoshot); Allgather reduces nothing,
    so auto picks as usual there."""
    status = main([*QUICK, "--reproducible", "--collective", "reduce_scatter,allgather",
                   "--algo", "mpi", "--output-dir", str(shared_dir), "--name", "rsag"])
    problems = [] if status == 0 else [f"exit status {status}"]
    world.Barrier()
    rows, _ = files_of(shared_dir, "rsag")
    mine = [r for r in rows if r["algo"] == AUTO_REPRODUCIBLE]
    if {r["collective"] for r in mine} != {"reduce_scatter", "allgather"} or len(mine) != 2 * len(SIZES):
        problems.append(f"{len(mine)} rows of the row: {[(r['collective'], r['size_bytes']) for r in mine]}")
    for r in mine:
        if (r["status"], r["wrong"]) != ("ok", "0") or not r["resolved"]:
            problems.append(f"{r['collective']} {r['size_bytes']}: {r['status']} #wrong {r['wrong']} "
                            f"pick {r['resolved']!r}: {r['note']}")
        if r["collective"] == "reduce_scatter" and r["resolved"] != "mpi-twoshot":
            problems.append(f"reduce_scatter {r['size_bytes']}: pick {r['resolved']}")
    all_ok(problems)


def test_without_the_flag_no_such_row(shared_dir, capsys):
    status = main([*QUICK, "--algo", "mpi,mpi-twoshot,auto", "--output-dir", str(shared_dir),
                   "--name", "plain"])
    problems = [] if status == 0 else [f"exit status {status}"]
    out = capsys.readouterr().out
    if world.rank == 0 and AUTO_REPRODUCIBLE in out:
        problems.append(f"{AUTO_REPRODUCIBLE} in the output:\n{out}")
    world.Barrier()
    rows, meta = files_of(shared_dir, "plain")
    if {r["algo"] for r in rows} != {"mpi", "mpi-twoshot", "auto"} or "variants" in meta:
        problems.append(f"rows of {sorted({r['algo'] for r in rows})}, variants {meta.get('variants')}")
    all_ok(problems)
