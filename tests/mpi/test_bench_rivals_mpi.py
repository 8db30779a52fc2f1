"""The bench's rivals on real ranks (host arrays, a fake rival: MPI.Allreduce wrapped as one):
every rank agrees on which rivals run and why the others are skipped (also when only one rank
lacks a package or fails its set-up), a rival's call is checked and timed like every row, the
speed-ups are against --baseline, and a rival that errs on one rank is dropped on all.

Run:  mpiexec -n 3 python -m pytest --with-mpi tests/mpi/test_bench_rivals_mpi.py
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from bench_rival_fakes import registered, spec
from mpi4py import MPI
from mpi_support import all_ok

from mpiring.bench.__main__ import main
from mpiring.bench.rivals.base import RivalContext
from mpiring.bench.rivals.runtime import RivalSet

pytestmark = pytest.mark.mpi(min_size=1)

world = MPI.COMM_WORLD
LAST = world.size - 1


def ctx() -> RivalContext:
    return RivalContext(max_count=64, dtype=np.dtype(np.float32), op="sum", rank=world.rank,
                       size=world.size, nodes=1, timeout=30.0)


def test_every_rank_agrees_on_the_rivals_that_run():
    with registered(spec("fake-ok"), spec("fake-lacking", missing_on=(LAST,)),
                    spec("fake-broken", setup_fails_on=(LAST,))):
        ps = RivalSet()
        skipped = ps.start(world, ["fake-ok", "fake-lacking", "fake-broken"], ctx())
        running = list(ps.rivals)
        ps.close()
    lacking = "fakelib is not installed (pip install fakelib)"
    if world.size > 1:  # one rank lacks it: named, for the reader to know where
        lacking = f"rank {LAST}: {lacking}"
    want = {"fake-lacking": lacking, "fake-broken": "set-up failed: no fake fabric here"}
    problems = [] if running == ["fake-ok"] else [f"running {running}"]
    if skipped != want:
        problems.append(f"skipped {skipped}")
    everyone = world.allgather((running, skipped))
    if any(e != everyone[0] for e in everyone):
        problems.append(f"ranks disagree: {everyone}")
    all_ok(problems)


def test_a_rival_row_checked_timed_and_the_baseline_of_the_speedups(shared_dir):
    with registered(spec("fake-mpi"), spec("fake-lacking", missing_on=(LAST,))):
        status = main(["--host", "-b", "1K", "-e", "16K", "-f", "4", "--algo",
                       "ring,fake-lacking,fake-mpi,mpi", "--baseline", "fake-mpi",
                       "--placement", "out,in", "--output-dir", str(shared_dir), "--name", "rival",
                       "--time-budget", "0.005", "--reps", "2", "--no-plot", "--progress", "off"])
    problems = [] if status == 0 else [f"exit status {status}"]
    world.Barrier()
    with next(shared_dir.glob("rival_*.csv")).open() as f:
        rows = list(csv.DictReader(f))
    order = [(int(r["size_bytes"]), r["algo"], r["placement"]) for r in rows]
    want = [(s, a, p) for s in (1024, 4096, 16384)
            for a in ("fake-mpi", "mpi", "fake-lacking", "ring") for p in ("out", "in")]
    if order != want:
        problems.append(f"order {order}")
    by = {(int(r["size_bytes"]), r["algo"], r["placement"]): r for r in rows}
    for (size, algo, place), r in by.items():
        where = f"{size} {algo} {place}"
        if r["baseline"] != "fake-mpi":
            problems.append(f"{where}: baseline {r['baseline']!r}")
        if algo == "fake-lacking":
            if r["status"] != "unavailable" or "fakelib is not installed" not in r["note"]:
                problems.append(f"{where}: {r['status']} {r['note']}")
            continue
        if (r["status"], r["check"], r["wrong"]) != ("ok", "OK", "0"):
            problems.append(f"{where}: {r['status']} {r['check']} {r['note']}")
            continue
        ratio = float(by[(size, "fake-mpi", place)]["time_us"]) / float(r["time_us"])
        if abs(float(r["speedup"]) - ratio) > 1e-9 * ratio:
            problems.append(f"{where}: speed-up {r['speedup']} != {ratio}")
    meta = json.loads(next(shared_dir.glob("rival_*.json")).read_text())["metadata"]
    if meta.get("baseline") != "fake-mpi" or meta.get("rivals", {}).get("fake-mpi") != "fakelib 1.0":
        problems.append(f"metadata baseline {meta.get('baseline')} rivals {meta.get('rivals')}")
    all_ok(problems)


def test_a_rival_that_errs_on_one_rank_is_dropped_on_all(shared_dir):
    with registered(spec("fake-bad", fail_from=1024, bad_rank=LAST)):
        status = main(["--host", "-b", "1K", "-e", "16K", "-f", "4", "--algo", "mpi,fake-bad",
                       "--output-dir", str(shared_dir), "--name", "bad", "--time-budget", "0.005",
                       "--reps", "2", "--no-plot", "--progress", "off"])
    problems = [] if status == 2 else [f"exit status {status}, not 2"]
    world.Barrier()
    with next(shared_dir.glob("bad_*.csv")).open() as f:
        rows = {(int(r["size_bytes"]), r["algo"]): r for r in csv.DictReader(f)}
    got = {k: r["status"] for k, r in rows.items()}
    want = {(1024, "mpi"): "ok", (1024, "fake-bad"): "ok", (4096, "mpi"): "ok",
            (4096, "fake-bad"): "error", (16384, "mpi"): "ok", (16384, "fake-bad"): "unavailable"}
    if got != want:
        problems.append(f"statuses {got}")
    note = rows[(4096, "fake-bad")]["note"]
    if not note.startswith(f"rank {LAST}: RuntimeError: injected rival failure"):
        problems.append(f"note {note!r}")
    all_ok(problems)
