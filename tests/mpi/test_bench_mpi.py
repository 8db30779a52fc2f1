"""python -m mpiring.bench on real ranks (host transport): the whole run end to end, and the
benchmark's cross-rank agreement when one rank fails or computes a wrong result.

Run:  mpiexec -n 4 python -m pytest --with-mpi tests/mpi/test_bench_mpi.py
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok

import mpiring
from mpiring.bench.__main__ import main
from mpiring.bench.algorithms import default_sweep
from mpiring.bench.arrays import HostSpace
from mpiring.bench.data import InputGenerator
from mpiring.bench.measure import Point, PointMeasurer, SizeBuffers, StageFailed, TimingPolicy, agree
from mpiring.bench.metadata import source_commit
from mpiring.bench.stats import bus_factor

pytestmark = pytest.mark.mpi(min_size=2)

world = MPI.COMM_WORLD


def test_host_bench_end_to_end(shared_dir):
    status = main(["-b", "1K", "-e", "64K", "--output-dir", str(shared_dir), "--name", "mpi",
                   "--time-budget", "0.01", "--reps", "3", "--placement", "out,in",
                   "--progress", "off"])
    problems = [] if status == 0 else [f"exit status {status}"]
    world.Barrier()
    csvs = sorted(shared_dir.glob("mpi_*.csv"))
    jsons = sorted(shared_dir.glob("mpi_*.json"))
    if len(csvs) != 1 or len(jsons) != 1 or len(list(shared_dir.glob("mpi_*.png"))) != 1:
        problems.append(f"files: {sorted(p.name for p in shared_dir.iterdir())}")
        all_ok(problems)
    with csvs[0].open() as f:
        rows = list(csv.DictReader(f))
    sizes = [1 << e for e in range(10, 17)]
    want = {(s, a, p) for s in sizes for a in default_sweep(False) for p in ("out", "in")}
    got = {(int(r["size_bytes"]), r["algo"], r["placement"]) for r in rows}
    if got != want or len(rows) != len(want):
        problems.append(f"rows {sorted(got)} != {sorted(want)}")
    for r in rows:
        where = f"{r['size_bytes']} {r['algo']} {r['placement']}"
        if (r["status"], r["check"]) != ("ok", "OK"):
            problems.append(f"{where}: status {r['status']} check {r['check']}: {r['note']}")
            continue
        if int(r["nranks"]) != world.size or int(r["count"]) * 4 != int(r["size_bytes"]):
            problems.append(f"{where}: nranks {r['nranks']} count {r['count']}")
        t, alg, bus = float(r["time_us"]), float(r["algbw_gbs"]), float(r["busbw_gbs"])
        if not float(r["min_us"]) <= t <= float(r["max_us"]):
            problems.append(f"{where}: median {t} outside [min, max]")
        if abs(alg - int(r["size_bytes"]) / (t * 1e-6) / 1e9) > 1e-9 * max(alg, 1):
            problems.append(f"{where}: algbw {alg} != bytes/time")
        if abs(bus - alg * bus_factor(world.size)) > 1e-9 * max(bus, 1):
            problems.append(f"{where}: busbw {bus} != algbw * 2(n-1)/n")
        if r["algo"] == "mpi-direct" and float(r["speedup"]) != 1.0:  # the baseline
            problems.append(f"{where}: baseline speed-up {r['speedup']}")
    meta = json.loads(jsons[0].read_text())["metadata"]
    if meta["world_size"] != world.size or meta["mode"] != "host":
        problems.append(f"metadata {meta['world_size']} {meta['mode']}")
    if meta.get("complete") is not True:
        problems.append("metadata does not say the run completed")
    for key in ("hostname", "mpi_library", "mpi4py", "numpy", "command", "date", "ranks", "mpiring",
                "commit"):
        if not meta.get(key):
            problems.append(f"metadata lacks {key}")
    if meta.get("commit") != source_commit():
        problems.append(f"metadata names commit {meta.get('commit')}, not {source_commit()}")
    all_ok(problems)


class OneRankMisbehaves:
    """A communicator stand-in: a true allreduce through MPI, except on rank ``bad``."""

    def __init__(self, mode: str, bad: int | None = 1) -> None:  # bad None: every rank
        self.mode, self.bad, self.check = mode, bad, True

    def stats(self) -> mpiring.CallStats:  # calls not counted: the bench's replayed share is None
        return mpiring.CallStats(0, 0, 0, False)

    def Allreduce(self, send, recv, op, *, algorithm=None, batches=None):  # noqa: N802
        if self.mode == "raise":  # raised before any communication, so nobody waits
            if world.rank == self.bad:
                raise RuntimeError("injected failure")
            return
        world.Allreduce(send, recv, op=op)
        if self.mode == "wrong" and self.bad in (None, world.rank):
            recv[-1] += 1


def measure_with(mode: str, bad: int | None = 1):
    space = HostSpace(world.size)
    count = 4096
    gen = InputGenerator(np, "sum", np.dtype(np.float32), world.size, seed=11)
    bufs = SizeBuffers(space, gen, count, world.rank, cache=True)
    m = PointMeasurer(world, OneRankMisbehaves(mode, bad), space, TimingPolicy(budget_s=0.01, reps=2),
                      check=True, time_agreement=False, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
    return m.measure(Point(4 * count, count, "float32", "sum", "mpi", None, "out"), bufs)


def test_true_allreduce_passes():
    out = measure_with("good")
    all_ok([] if (out.status, out.check) == ("ok", "OK") else [f"{out.status}: {out.note}"])


def test_wrong_result_on_one_rank_fails_on_all():
    out = measure_with("wrong")
    problems = []
    if (out.status, out.check) != ("fail", "FAIL") or out.stats is not None:
        problems.append(f"outcome {out.status}/{out.check}")
    if not out.errors or not all(e.startswith("rank 1: wrong result: 1 of 4096") for e in out.errors):
        problems.append(f"errors {out.errors}")
    if out.wrong != 1:
        problems.append(f"#wrong {out.wrong}, not 1")
    all_ok(problems)


def test_wrong_elements_are_counted_over_every_rank():
    out = measure_with("wrong", bad=None)
    all_ok([] if (out.status, out.wrong) == ("fail", world.size) else [f"{out.status}, #wrong {out.wrong}"])


def test_exception_on_one_rank_is_an_error_on_all():
    out = measure_with("raise")
    problems = []
    if out.status != "error" or out.errors != ["rank 1: RuntimeError: injected failure"]:
        problems.append(f"outcome {out.status}: {out.errors}")
    all_ok(problems)


def test_auto_on_the_host_runs_or_is_not_applicable(shared_dir):
    """auto with host arrays: timed and checked if the communicator takes it (it means ring
    there), else n/a rows; either way no failure, exit status 0."""
    status = main(["-b", "1K", "-e", "4K", "--algo", "mpi,ring,auto", "--output-dir",
                   str(shared_dir), "--name", "auto", "--time-budget", "0.005", "--reps", "2",
                   "--no-plot", "--progress", "off"])
    problems = [] if status == 0 else [f"exit status {status}"]
    world.Barrier()
    with next(shared_dir.glob("auto_*.csv")).open() as f:
        rows = [r for r in csv.DictReader(f) if r["algo"] == "auto"]
    if len(rows) != 3:
        problems.append(f"{len(rows)} auto rows")
    for r in rows:
        fine = ((r["status"], r["check"]) == ("ok", "OK") and r["resolved"] in ("", "ring")
                or (r["status"], r["check"]) == ("inapplicable", "-") and r["note"])
        if not fine:
            problems.append(f"auto row {r['size_bytes']}: {r['status']} {r['check']} "
                            f"{r['resolved']!r} {r['note']}")
    all_ok(problems)


def test_overlap_needs_gpus(shared_dir, capsys):
    status = main(["--host", "--overlap", "gemm", "-b", "1K", "-e", "1K", "--output-dir",
                   str(shared_dir), "--progress", "off"])
    problems = [] if status == 3 else [f"exit status {status}"]
    if world.rank == 0 and "--overlap gemm needs GPUs" not in capsys.readouterr().err:
        problems.append("no message saying --overlap needs GPUs")
    all_ok(problems)


def test_argument_rejected_on_one_rank_is_not_applicable_on_all():
    def stage():
        if world.rank == 1:
            raise mpiring.InvalidArgumentError("oneshot takes at most 1 MiB")
        raise mpiring.PeerArgumentError("rank 1 rejected its arguments")

    problems = []
    try:
        agree(world, stage)
        problems.append("no StageFailed")
    except StageFailed as err:
        if (err.status, err.rebuild) != ("inapplicable", False):
            problems.append(f"status {err.status}, rebuild {err.rebuild}")
        if err.errors[0] != "rank 1: InvalidArgumentError: oneshot takes at most 1 MiB":
            problems.append(f"first error {err.errors[0]}")
    all_ok(problems)


def test_nccl_tests_output_on_real_ranks(shared_dir, capsys):
    """--nccl-tests: one table per algorithm, a line per size with both placements, #wrong 0;
    every rank in the header with its host and MPI library; the CSV has the same rows."""
    status = main(["-b", "1K", "-e", "16K", "-f", "4", "--output-dir", str(shared_dir), "--name",
                   "nt", "--time-budget", "0.005", "--reps", "2", "--no-plot", "--progress", "off",
                   "--nccl-tests", "-c", "2", "-a", "1", "-d", "float", "-o", "sum", "--host"])
    problems = [] if status == 0 else [f"exit status {status}"]
    out = capsys.readouterr().out
    algos = len(default_sweep(False))  # one table each
    if world.rank == 0:
        lines = out.splitlines()
        data = [line.split() for line in lines if line.strip() and not line.startswith("#")]
        if [d[0] for d in data] != ["1024", "4096", "16384"] * algos:
            problems.append(f"data lines {data}")
        if any(len(d) != 13 or d[2:5] != ["float", "sum", "-1"] or d[8] != "0" or d[12] != "0"
               for d in data):
            problems.append(f"columns {data}")
        if sum(line.startswith("# Avg bus bandwidth") for line in lines) != algos:
            problems.append("not one '# Avg bus bandwidth' per algorithm")
        ranks = [line for line in lines if line.startswith("#  Rank")]
        if len(ranks) != world.size or any("device  - [host memory]" not in r for r in ranks):
            problems.append(f"rank lines {ranks}")
        if not any(line.startswith("# MPI library (every rank):") for line in lines):
            problems.append("no MPI library line")
    world.Barrier()
    with next(shared_dir.glob("nt_*.csv")).open() as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 3 * 2 * algos or {r["wrong"] for r in rows} != {"0"}:
        problems.append(f"{len(rows)} rows, wrong {sorted({r['wrong'] for r in rows})}")
    meta = json.loads(next(shared_dir.glob("nt_*.json")).read_text())["metadata"]
    if meta["complete"] is not True or len(meta["ranks"]) != world.size:
        problems.append(f"metadata complete={meta['complete']} ranks={meta.get('ranks')}")
    all_ok(problems)


def test_a_gpu_only_algorithm_on_the_host_is_an_error(shared_dir, capsys):
    status = main(["--host", "--algo", "nccl", "-b", "1K", "-e", "1K", "--output-dir",
                   str(shared_dir), "--progress", "off"])
    problems = [] if status == 3 else [f"exit status {status}"]
    if world.rank == 0 and "reduces GPU arrays only" not in capsys.readouterr().err:
        problems.append("no message saying nccl reduces GPU arrays only")
    all_ok(problems)
