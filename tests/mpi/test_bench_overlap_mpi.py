"""--overlap's measurer on real ranks, over a simulated GPU timeline whose allreduce calls are
real MPI collectives: every rank makes the same calls (a count that differed would hang or fail
here), keeps or repeats the same repetitions, agrees on the work of a size, reports the same
figures (the slowest rank's), and fails together when one rank fails.

Run:  mpiexec -n 3 python -m pytest --with-mpi tests/mpi/test_bench_overlap_mpi.py
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import HostTimeline, all_ok

from mpiring.bench.measure import StageFailed
from mpiring.bench.overlap import GEMM, TRAIN, Shape, efficiency
from mpiring.bench.overlap_run import OverlapMeasurer

pytestmark = pytest.mark.mpi(min_size=1)

world = MPI.COMM_WORLD
RANK, SIZE = world.rank, world.size


class RankTimeline:
    """Rank r's GEMMs take (1 + r/10) ms; calls 50 us; together the last rank is the slowest.
    ``bad``: together() returns NaN this many times on rank ``bad_rank``; ``fail``: it raises."""

    def __init__(self, bad=0, bad_rank=SIZE - 1, fail=False):
        self.gemm_s = 1e-3 * (1 + RANK / 10)
        self.bad, self.bad_rank, self.fail = bad, bad_rank, fail

    def synchronize(self):
        pass

    def gemms_alone(self, load, n):
        return self.gemm_s

    def calls_alone(self, call, k):
        for _ in range(k):
            call()
        return 50e-6

    def beside(self, load, call, k, n):
        for _ in range(k):
            call()
        marks = [i * self.gemm_s * 1.1 for i in range(n + 1)]
        return marks, 0.1e-3, 0.1e-3 + k * 60e-6

    def together(self, load, call, k, g, after):
        for _ in range(k):
            call()
        if self.fail and RANK == 0:
            raise RuntimeError("cuBLAS failed on rank 0")
        if self.bad and RANK == self.bad_rank:
            self.bad -= 1
            return math.nan, 1.0
        t_gemm, t_ar = g * self.gemm_s, k * 50e-6
        return t_gemm + 0.5 * t_ar + RANK * 1e-4, t_ar

    def close(self):
        pass


def counting_call():
    calls = [0]
    one, out = np.ones(1), np.zeros(1)

    def call():
        world.Allreduce(one, out)  # collective: a count that differs between ranks hangs here
        calls[0] += 1
    return call, calls


def shapes():
    return [Shape(GEMM, "big", 1.2e-3, slowdowns=True),
            Shape(TRAIN, "small", 0.15e-3, after=1, window_gemms=64)]


def test_every_rank_reports_the_slowest_ranks_makespan():
    tl = RankTimeline(bad=2)
    m = OverlapMeasurer(world, tl, shapes(), reps=3)
    call, calls = counting_call()
    # each rank's own (disagreeing) figures: the work must still be one, agreed
    res = m.measure(call, "ring", 50e-6 * (1 + RANK), 10 + RANK, size=1 << 20)
    problems = []
    every = world.allgather((res, calls[0]))
    if any(e != every[0] for e in every):
        problems.append(f"ranks differ: {every}")
    gemm = res.makespans[GEMM]
    if (gemm.rank, gemm.reps, res.reps) != (SIZE - 1, 3, 3):
        problems.append(f"slowest rank {gemm.rank}, reps {gemm.reps}/{res.reps}")
    slow = 1e-3 * (1 + (SIZE - 1) / 10)
    if not math.isclose(gemm.t_gemm_s, gemm.gemms * slow):
        problems.append(f"T_gemm {gemm.t_gemm_s} is not rank {SIZE - 1}'s {gemm.gemms} GEMMs")
    if gemm.efficiency != efficiency(gemm.t_gemm_s, gemm.t_ar_s, gemm.t_both_s):
        problems.append("the efficiency is not that of the reported times")
    if not (res.gemm_slowdown and math.isclose(res.gemm_slowdown, 1.1)):
        problems.append(f"GEMM slowdown {res.gemm_slowdown}")
    again = m.measure(call, "nccl", 10e-6, 1, size=1 << 20)  # the size's work, whatever its own
    for shape in (GEMM, TRAIN):
        a, b = res.makespans[shape], again.makespans[shape]
        if (a.calls, a.gemms) != (b.calls, b.gemms):
            problems.append(f"{shape}: work {a.calls, a.gemms} then {b.calls, b.gemms}")
    all_ok(problems)


def test_a_rank_that_fails_fails_the_point_on_every_rank():
    m = OverlapMeasurer(world, RankTimeline(fail=True), shapes()[1:], reps=2)
    call, _ = counting_call()
    err = None
    try:
        m.measure(call, "ring", 50e-6, 10, size=1 << 20)
    except StageFailed as caught:
        err = caught
    problems = []
    if err is None or not any("cuBLAS failed on rank 0" in e for e in err.errors):
        problems.append(f"expected StageFailed naming rank 0's error, got {err!r}")
    all_ok(problems)


def test_a_rank_whose_repetitions_never_count_gives_up_everywhere():
    m = OverlapMeasurer(world, RankTimeline(bad=99, bad_rank=0), shapes()[1:], reps=2)
    call, calls = counting_call()
    res = m.measure(call, "ring", 50e-6, 10, size=1 << 20)
    problems = []
    if not res.makespans[TRAIN].note.startswith("makespan not measured"):
        problems.append(f"note {res.makespans[TRAIN].note!r}")
    if len(set(world.allgather(calls[0]))) != 1:
        problems.append("call counts differ")
    all_ok(problems)


def test_a_host_run_with_a_simulated_gpu_writes_the_overlap_report(monkeypatch, shared_dir, capsys):
    """The whole bench (__main__, runner, rows, table, CSV, figures, summary) on host arrays,
    with --overlap's GPU side simulated: every column filled, every rank alike."""
    import csv
    from dataclasses import replace

    from mpiring.bench import __main__ as bench
    from mpiring.bench import runner
    from mpiring.bench.cli import parse_args
    from mpiring.bench.report import Reporter

    real_setup = runner.setup

    def setup(opts, world_, reporter, algos_for=None):
        sw = real_setup(opts, world_, reporter, algos_for)
        sw.opts = replace(sw.opts, overlap="gemm,train")
        sw.overlap = OverlapMeasurer(world_, HostTimeline(), [
            Shape(GEMM, "big", 1e-3, slowdowns=True, label="simulated 1 ms GEMMs"),
            Shape(TRAIN, "small", 1e-3, after=1, window_gemms=8, label="simulated, after one")],
            reps=2)
        sw.overlap_line = sw.overlap.describe()
        reporter.set_baseline(sw.baseline, overlap=("gemm", "train"))
        return sw

    monkeypatch.setattr(runner, "setup", setup)
    opts = parse_args(["--host", "-b", "4K", "-e", "16K", "-f", "4", "--algo", "mpi,ring",
                       "--output-dir", str(shared_dir), "--name", "ov", "--time-budget", "0.01",
                       "--reps", "2", "--progress", "off"])
    status = bench._run(opts, world, Reporter(RANK == 0, "off"))
    out = capsys.readouterr().out
    problems = [] if status == 0 else [f"exit status {status}"]
    world.Barrier()
    (csv_path,) = shared_dir.glob("ov_*.csv")
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 4:
        problems.append(f"{len(rows)} rows")
    for r in rows:
        for col in ("t_gemm_us", "t_ar_us", "t_both_us", "overlap_eff", "train_t_both_us",
                    "train_eff", "gemm_slowdown", "overlap_gemms", "train_calls"):
            if r[col] == "":
                problems.append(f"{r['algo']} {r['size_bytes']}: no {col}")
        if r["ar_sms_source"] != "all: its kernels launch the grid they want" or r["ar_sms"]:
            problems.append(f"SMs {r['ar_sms']!r} {r['ar_sms_source']!r}")
    for size in {r["size_bytes"] for r in rows}:  # one work per size, for every algorithm
        works = {(r["overlap_gemms"], r["overlap_calls"], r["train_gemms"], r["train_calls"])
                 for r in rows if r["size_bytes"] == size}
        if len(works) != 1:
            problems.append(f"{size}: works {works}")
    names = sorted(p.name.removeprefix(csv_path.stem) for p in shared_dir.glob("ov_*.png"))
    if names != [".png", "_makespan.png", "_overlap.png"]:
        problems.append(f"figures {names}")
    if RANK == 0:
        for text in ("smallest makespan, gemm at 4 KiB:", "smallest makespan, train at 16 KiB:",
                     "T_both", "train T_both", "SMs", "simulated 1 ms GEMMs", "efficiency ="):
            if text not in out:
                problems.append(f"no {text!r} in the output")
    all_ok(problems)
