"""The direct rows on real ranks (issue 28): a default host run measures ``mpi-direct`` (mpi4py's
``Comm.Allreduce``, nothing of mpiring) first, checks it element by element (#wrong 0) and takes
the speed-ups against it; ``nccl-direct``'s runtime, on a fake CuPy over host arrays
(tests/bench_rival_fakes.py), is checked the same way on every rank; and a direct row that
cannot run on one rank gives way to the table's row it wraps on every rank.

Run:  mpiexec -n 2 python -m pytest --with-mpi tests/mpi/test_bench_direct_mpi.py
"""

from __future__ import annotations

import csv
import json

import pytest
from bench_rival_fakes import fake_cupy, nccl_direct_on_host, registered
from mpi4py import MPI
from mpi_support import all_ok

from mpiring.bench.__main__ import main
from mpiring.bench.rivals.direct_calls import MpiDirect

pytestmark = pytest.mark.mpi(min_size=1)

world = MPI.COMM_WORLD
LAST = world.size - 1
SIZES = (1024, 4096, 16384)


def run(shared_dir, name: str, *args: str) -> int:
    return main(["--host", "-b", "1K", "-e", "16K", "-f", "4", "--placement", "out,in",
                 "--output-dir", str(shared_dir), "--name", name, "--time-budget", "0.005",
                 "--reps", "2", "--no-plot", "--progress", "off", *args])


def rows_of(shared_dir, name: str) -> tuple[list[dict[str, str]], dict]:
    world.Barrier()
    with next(shared_dir.glob(f"{name}_*.csv")).open() as f:
        rows = list(csv.DictReader(f))
    return rows, json.loads(next(shared_dir.glob(f"{name}_*.json")).read_text())["metadata"]


def test_a_default_host_run_checks_mpi_direct_and_takes_it_as_the_baseline(shared_dir, capsys):
    status = run(shared_dir, "direct")
    out = capsys.readouterr().out
    problems = [] if status == 0 else [f"exit status {status}"]
    rows, meta = rows_of(shared_dir, "direct")
    algos = ("mpi-direct", "mpi", "ring", "hier", "mpi-twoshot")
    order = [(int(r["size_bytes"]), r["algo"], r["placement"]) for r in rows]
    want = [(s, a, p) for s in SIZES for a in algos for p in ("out", "in")]
    if order != want:
        problems.append(f"order {order}")
    by = {(int(r["size_bytes"]), r["algo"], r["placement"]): r for r in rows}
    for (size, algo, place), r in by.items():
        where = f"{size} {algo} {place}"
        if (r["status"], r["check"], r["wrong"], r["baseline"]) != ("ok", "OK", "0", "mpi-direct"):
            problems.append(f"{where}: {r['status']} {r['check']} #wrong {r['wrong']} vs "
                            f"{r['baseline']} {r['note']}")
            continue
        ratio = float(by[(size, "mpi-direct", place)]["time_us"]) / float(r["time_us"])
        if abs(float(r["speedup"]) - ratio) > 1e-9 * ratio:
            problems.append(f"{where}: speed-up {r['speedup']} != {ratio}")
    if meta.get("baseline") != "mpi-direct" or not meta.get("rivals", {}).get("mpi-direct", "").startswith(
            "mpi4py "):
        problems.append(f"metadata baseline {meta.get('baseline')} rivals {meta.get('rivals')}")
    if world.rank == 0:
        text = " ".join(out.split())
        for words in ("(speed-up vs mpi-direct)", "# rival mpi-direct: mpi4py's Comm.Allreduce",
                      "# row mpi: MPI.Allreduce through mpiring.Communicator; its time includes "
                      "mpiring's per-call work (argument checks, dispatch, the agreement check)",
                      "per-call agreement check on (--no-time-agreement: off)"):
            if words not in text:
                problems.append(f"the banner lacks {words!r}")
    all_ok(problems)


@pytest.mark.parametrize(("op", "dtype"), [("sum", "float32"), ("max", "int64"), ("prod", "float16")])
def test_nccl_directs_runtime_is_checked_on_every_rank(shared_dir, op, dtype):
    spec = nccl_direct_on_host()
    name = f"nccl_{op}_{dtype}"
    with registered(spec), fake_cupy():
        status = run(shared_dir, name, "--algo", f"mpi-direct,{spec.name}", "--baseline", spec.name,
                     "-o", op, "-d", dtype)
    problems = [] if status == 0 else [f"exit status {status}"]
    rows, meta = rows_of(shared_dir, name)
    mine = [r for r in rows if r["algo"] == spec.name]
    if len(mine) != 2 * len(SIZES):
        problems.append(f"{len(mine)} rows of {spec.name}")
    for r in rows:
        if (r["status"], r["wrong"], r["baseline"]) != ("ok", "0", spec.name):
            problems.append(f"{r['size_bytes']} {r['algo']} {r['placement']}: {r['status']} "
                            f"#wrong {r['wrong']} vs {r['baseline']} {r['note']}")
    if meta.get("rivals", {}).get(spec.name) != "CuPy 0.0.0+fake, libnccl 2.27.3":
        problems.append(f"rivals {meta.get('rivals')}")
    all_ok(problems)


def test_a_direct_row_that_cannot_run_on_one_rank_gives_way_on_all(shared_dir, monkeypatch, capsys):
    lacking = "no plain MPI on this rank"
    monkeypatch.setattr(MpiDirect, "available",
                        lambda self: lacking if world.rank == LAST else None)
    status = run(shared_dir, "fallback", "--algo", "mpi-direct,mpi,ring")
    out = capsys.readouterr().out
    problems = [] if status == 0 else [f"exit status {status}"]
    rows, meta = rows_of(shared_dir, "fallback")
    why = lacking if world.size == 1 else f"rank {LAST}: {lacking}"
    for r in rows:
        where = f"{r['size_bytes']} {r['algo']} {r['placement']}"
        if r["baseline"] != "mpi":
            problems.append(f"{where}: baseline {r['baseline']}")
        if r["algo"] == "mpi-direct" and (r["status"], r["note"]) != ("unavailable", why):
            problems.append(f"{where}: {r['status']} {r['note']}")
        if r["algo"] != "mpi-direct" and (r["status"], r["wrong"]) != ("ok", "0"):
            problems.append(f"{where}: {r['status']} #wrong {r['wrong']}")
    if [r["algo"] for r in rows[:6]] != ["mpi-direct"] * 2 + ["mpi"] * 2 + ["ring"] * 2:
        problems.append(f"order {[r['algo'] for r in rows[:6]]}")
    if meta.get("baseline") != "mpi":
        problems.append(f"metadata baseline {meta.get('baseline')}")
    if world.rank == 0 and "(speed-up vs mpi; mpi-direct cannot run here)" not in " ".join(out.split()):
        problems.append("the banner does not say why the baseline is mpi")
    all_ok(problems)
