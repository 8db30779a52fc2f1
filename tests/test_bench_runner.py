"""mpiring.bench.runner's local parts: which algorithms run, auto's pick, the rows of overlap
figures, the summary, and the errors every rank sees alike."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI

import mpiring
from mpiring.bench import command, rowmaker, runner, summary
from mpiring.bench.measure import Outcome, Point
from mpiring.bench.overlap import Makespan, OverlapResult
from mpiring.bench.report import Reporter
from mpiring.bench.results import Row
from mpiring.bench.stats import Stats


def test_default_and_requested_algorithms():
    run, base = runner._algorithms(None, gpu=True)
    assert run == ["nccl-direct", "nccl", "nccl-ring", "torch", "torch-symm-1shot", "torch-symm-2shot",
                   "nccl-symm", "nccl-lib", "ring", "ring-events", "oneshot", "twoshot", "oneshot-ll",
                   "ce-twoshot", "hier", "auto"]
    assert base == "nccl-direct"
    run, base = runner._algorithms(("auto", "ring"), gpu=False)
    assert run == ["ring", "auto"] and base == "mpi-direct"  # auto runs on the host when asked for
    run, _ = runner._algorithms(("twoshot", "nccl"), gpu=True)
    assert run == ["nccl", "twoshot"]  # the mode's order, whatever the order asked


class Resolving:
    def __init__(self, answer):
        self.answer = answer

    def resolve(self, count, dtype, algorithm="auto"):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def test_autos_pick_where_the_communicator_says():
    dt = np.dtype(np.float32)
    assert rowmaker.resolved_pick(Resolving("twoshot"), 1024, dt) == "twoshot"
    assert rowmaker.resolved_pick(object(), 1024, dt) == ""  # a communicator without resolve()
    assert rowmaker.resolved_pick(Resolving(mpiring.InvalidArgumentError("x")), 1024, dt) == "?"


def fake_sweep(comm) -> SimpleNamespace:
    return SimpleNamespace(world=SimpleNamespace(size=4), comm=comm, mode="gpu",
                           dtype=np.dtype(np.float32), baseline="nccl")


class Comm(Resolving):
    def batches_for(self, count, dtype, *, gpu=None, algorithm=None, batches=None):
        return None


def test_row_of_an_auto_point_with_overlap_figures():
    p = Point(4096, 1024, "float32", "sum", "auto", None, "out")
    stats = Stats(mean=1e-5, std=0.0, min=1e-5, max=1e-5, median=1e-5)
    ov = OverlapResult(gemm_alone_s=1.5e-3, gemm_with_s=1.53e-3, gemm_slowdown=1.02,
                       ar_alone_s=1.1e-5, ar_with_s=1.4e-5, ar_slowdown=1.4 / 1.1, calls=9,
                       reps=5)
    row = rowmaker.make_row(fake_sweep(Comm("oneshot")),
                      p, Outcome("ok", "OK", stats=stats, iters=9, warmup=2, reps=5, overlap=ov))
    assert row.resolved == "oneshot" and row.time_us == pytest.approx(10.0)
    assert row.gemm_alone_us == pytest.approx(1500) and row.gemm_overlap_us == pytest.approx(1530)
    assert (row.gemm_slowdown, row.ar_alone_us) == (1.02, pytest.approx(11.0))
    note = OverlapResult(note="overlap not measured: ...")
    row = rowmaker.make_row(fake_sweep(Comm("ring")), p,
                      Outcome("ok", "OK", stats=stats, overlap=note))
    assert row.gemm_slowdown is None and "overlap not measured" in row.note
    ring = Point(4096, 1024, "float32", "sum", "ring", "auto", "out")
    assert rowmaker.make_row(fake_sweep(Comm("x")), ring, Outcome("ok", "OK")).resolved == ""


def test_row_of_a_point_with_makespans_and_the_sms_auto_picked():
    p = Point(64 << 20, 16 << 20, "float32", "sum", "auto", None, "out")
    stats = Stats(mean=4e-4, std=0.0, min=4e-4, max=4e-4, median=4e-4)
    spans = {"gemm": Makespan(13.6e-3, 12.0e-3, 15.0e-3, 0.88, gemms=8, calls=30, rank=1, reps=5),
             "train": Makespan(gemms=65, calls=30, note="makespan not measured: x")}
    ov = OverlapResult(gemm_slowdown=1.01, ar_slowdown=1.2, makespans=spans)
    comm = Comm("nccl")
    comm.sm_budget = lambda algo: None  # a budget seam that states none for this row
    out = Outcome("ok", "OK", stats=stats, overlap=ov)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NCCL_MAX_NCHANNELS", "24")
        row = rowmaker.make_row(fake_sweep(comm), p, out)
    assert row.resolved == "nccl" and (row.ar_sms, row.ar_sms_source[:21]) == (24, "NCCL_MAX_NCHANNELS=24")
    assert (row.overlap_gemms, row.overlap_calls) == (8, 30)
    assert (row.t_gemm_us, row.t_ar_us, row.t_both_us) == (
        pytest.approx(13600), pytest.approx(12000), pytest.approx(15000))
    assert row.overlap_eff == 0.88 and row.train_t_both_us is None and row.train_gemms == 65
    assert row.note == "train: makespan not measured: x"
    ring = rowmaker.make_row(fake_sweep(Comm("x")), Point(64 << 20, 16 << 20, "float32", "sum",
                                                            "ring", "auto", "out"), out)
    assert ring.ar_sms is None and ring.ar_sms_source.startswith("all")
    plain = rowmaker.make_row(fake_sweep(Comm("x")), p, Outcome("ok", "OK", stats=stats))
    assert plain.ar_sms_source == "" and plain.t_both_us is None  # no --overlap


def test_summary_names_the_smallest_makespan_per_shape_and_size():
    mib = 1 << 20
    rows = [r("nccl", 64 * mib, t_gemm_us=13600.0, t_ar_us=11000.0, t_both_us=16000.0,
              overlap_eff=0.78, train_t_both_us=14000.0, train_t_gemm_us=13000.0,
              train_t_ar_us=11000.0, train_eff=0.9),
            r("ring", 64 * mib, batches="auto", t_gemm_us=13600.0, t_ar_us=12000.0,
              t_both_us=14500.0, overlap_eff=0.93, train_t_both_us=15000.0),
            r("auto", 64 * mib, resolved="ring", placement="in", t_both_us=14400.0,
              overlap_eff=0.95, t_gemm_us=13600.0, t_ar_us=12100.0),
            r("nccl", 256 * mib, t_both_us=50000.0, overlap_eff=0.5),
            r("twoshot", 256 * mib, status="error", check="-", time_us=None, t_both_us=1.0)]
    lines = summary.summary_lines(rows, "nccl")
    nccl = next(line for line in lines if line.startswith("nccl "))
    assert "gemm overlap efficiency median 0.64 (0.50 to 0.78)" in nccl
    assert "train overlap efficiency median 0.90 (0.90 to 0.90)" in nccl
    spans = [line for line in lines if line.startswith("smallest makespan")]
    assert spans == [
        "smallest makespan, gemm at 64 MiB: auto:ring in-place 14.4 ms (efficiency 0.95; "
        "T_gemm 13.6 ms, T_ar 12.1 ms); next ring 14.5 ms",
        "smallest makespan, gemm at 256 MiB: nccl 50 ms (efficiency 0.50; T_gemm -, T_ar -)",
        "smallest makespan, train at 64 MiB: nccl 14 ms (efficiency 0.90; T_gemm 13 ms, "
        "T_ar 11 ms); next ring 15 ms"]


def test_summary_gives_each_rows_best_speed_up_and_the_median_efficiency():
    """The headline speed-up is the row's largest, at its size; the spread is the median (here
    not the mean, 0.40) between the smallest and the largest."""
    rows = [r("oneshot", 1024, speedup=2.0, overlap_eff=0.1),
            r("oneshot", 2048, speedup=3.0, overlap_eff=0.2),
            r("oneshot", 4096, speedup=1.5, overlap_eff=0.9)]
    line = next(line for line in summary.summary_lines(rows, "nccl") if line.startswith("oneshot"))
    assert "best 3.00x vs nccl at 2 KiB" in line
    assert "gemm overlap efficiency median 0.20 (0.10 to 0.90)" in line


def test_reason_strips_the_rank_and_error_type():
    assert rowmaker.reason("rank 0: InvalidArgumentError: at most 1 MiB: smaller") == \
        "at most 1 MiB: smaller"
    assert rowmaker.reason("plain") == "plain"


def r(algo, size, **kw) -> Row:
    base = dict(size_bytes=size, count=size // 4, dtype="float32", op="sum", algo=algo,
                batches="-", placement="out", nranks=4, status="ok", check="OK", time_us=10.0,
                busbw_gbs=1.0, baseline="nccl", speedup=1.0)
    base.update(kw)
    return Row(**base)


def test_summary_counts_na_points_and_gives_the_slowdowns():
    rows = [r("nccl", 1024, gemm_slowdown=1.3, ar_slowdown=2.0),
            r("nccl", 2048, gemm_slowdown=1.5, ar_slowdown=2.2),
            r("oneshot", 1024, speedup=2.0),
            r("oneshot", 2048, status="inapplicable", check="-", time_us=None),
            r("auto", 1024, status="inapplicable", check="-", time_us=None)]
    lines = summary.summary_lines(rows, "nccl")
    nccl = next(line for line in lines if line.startswith("nccl "))
    assert "GEMM slowdown median 1.40x (1.30x to 1.50x)" in nccl
    assert "allreduce slowdown median 2.10x" in nccl
    oneshot = next(line for line in lines if line.startswith("oneshot"))
    assert "1/2 timed" in oneshot and "1 n/a" in oneshot and "best 2.00x vs nccl" in oneshot
    assert any(line.startswith("auto out: 0/1 timed, 1 n/a") for line in lines)


def test_run_collectively_turns_bench_errors_into_status_3(capsys):
    def body():
        raise command.BenchError("no GPU here")

    status = command.run_collectively("prog", MPI.COMM_SELF, Reporter(True, progress="off"), body)
    assert status == 3 and "prog: no GPU here" in capsys.readouterr().err
    assert command.run_collectively("prog", MPI.COMM_SELF, Reporter(False), lambda: 2) == 2


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_overlap_on_the_host_says_it_needs_gpus(tmp_path, capsys):
    from mpiring.bench.__main__ import main

    status = main(["--host", "--overlap", "gemm", "-b", "1K", "-e", "1K", "--output-dir",
                   str(tmp_path), "--progress", "off"])
    err = capsys.readouterr().err
    assert status == 3 and "--overlap gemm needs GPUs" in err and "--host" in err
    assert list(tmp_path.iterdir()) == []


class Refusing(Comm):
    """A communicator whose algorithm refuses the size, as one-shot does above its limit."""

    def batches_for(self, count, dtype, *, gpu=None, algorithm=None, batches=None):
        raise mpiring.InvalidArgumentError("algorithm 'oneshot' takes messages of at most 2097152 bytes")


def test_row_of_a_point_the_algorithm_refuses_has_no_batches():
    """An n/a point (one-shot above its limit) is a row, not a crash of the sweep."""
    p = Point(4 << 20, 1 << 20, "float32", "sum", "oneshot", None, "out")
    row = rowmaker.make_row(fake_sweep(Refusing("oneshot")), p, Outcome("inapplicable", "-", note="n/a"))
    assert row.status == "inapplicable" and row.batches_used is None


def test_an_algorithm_without_any_asked_collective_is_an_error():
    assert runner.check_collectives(("ring", "mpi"), False, ("allgather",), 1, "one node") == ()
    with pytest.raises(command.BenchError, match="--algo hier: has no allgather"):
        runner.check_collectives(("hier",), False, ("allgather",), 1, "one node")
    # hier runs for allreduce only, ring for all three: neither is an error
    assert runner.check_collectives(("hier", "ring"), False, ("allreduce", "allgather"), 1, "") == ()


def test_across_nodes_node_rows_are_left_out_or_refused_by_name():
    where = "2 nodes of 2 ranks"
    assert runner.check_collectives(None, True, ("allreduce",), 2, where) == (
        "ring", "ring-events", "oneshot", "twoshot", "oneshot-ll", "ce-twoshot", "torch-symm-1shot",
        "torch-symm-2shot", "nccl-symm")
    assert runner.check_collectives(None, False, ("reduce_scatter",), 2, where) == ("ring",)
    assert runner.check_collectives(("mpi", "hier"), False, ("allreduce",), 2, where) == ()
    with pytest.raises(command.BenchError) as err:
        runner.check_collectives(("nccl", "oneshot"), True, ("allreduce",), 2, where)
    text = str(err.value)
    assert text.startswith("--algo oneshot: it runs only where every rank is on one node")
    assert where in text and "choose from nccl-direct, nccl, nccl-ring, torch, nccl-lib, hier, auto" in text
    run, _ = runner._algorithms(None, gpu=False, collective="allgather", nodes=2)
    assert run == ["mpi", "mpi-twoshot"]


def test_sweep_runs_collective_after_collective():
    opts = SimpleNamespace(batches=("auto",), placements=("out",), dtype="float32", op="sum",
                           output_format="table")
    sw = runner.Sweep(opts, SimpleNamespace(size=4), None, None, None, "host", ["mpi", "ring"],
                      "mpi", [(1024, 256)], np.dtype(np.float32),
                      algos_of={"allreduce": ["mpi"], "allgather": ["mpi", "ring"]},
                      sizes_of={"allreduce": [(1024, 256)], "allgather": [(1024, 256), (4096, 1024)]})
    runs = runner.runs_of(sw)
    assert [(n, [(p.collective, p.algo) for p in pts]) for n, _, pts in runs] == [
        (1024, [("allreduce", "mpi")]),
        (1024, [("allgather", "mpi"), ("allgather", "ring")]),
        (4096, [("allgather", "mpi"), ("allgather", "ring")])]
    sw.opts.output_format = "nccl-tests"  # one table per (collective, algorithm)
    assert [(n, [p.algo for p in pts]) for n, _, pts in runner.runs_of(sw)] == [
        (1024, ["mpi"]), (1024, ["mpi"]), (4096, ["mpi"]), (1024, ["ring"]), (4096, ["ring"])]


def test_row_of_a_reduce_scatter_point():
    """size: the whole send buffer; count: one rank's block; busbw = algbw (n-1)/n; the speed-up
    is against the baseline's row of the same collective."""
    stats = Stats(mean=1e-3, std=0.0, min=1e-3, max=1e-3, median=1e-3)
    sw = fake_sweep(Comm("ring"))
    sw.rows = []
    for algo, collective, t in (("nccl", "allreduce", 4.0), ("nccl", "reduce_scatter", 2.0),
                                ("ring", "reduce_scatter", 1.0)):
        p = Point(4 << 20, 1 << 20, "float32", "sum", algo, None, "out", collective)
        st = Stats(*(v * t for v in stats.as_tuple()))
        row = rowmaker.make_row(sw, p, Outcome("ok", "OK", stats=st, wrong=0))
        row.speedup = rowmaker.speedup(sw, row)
        sw.rows.append(row)
    rs = sw.rows[-1]
    assert (rs.collective, rs.size_bytes, rs.count) == ("reduce_scatter", 4 << 20, 1 << 18)
    assert rs.busbw_gbs == pytest.approx(rs.algbw_gbs * 3 / 4)
    assert sw.rows[0].busbw_gbs == pytest.approx(sw.rows[0].algbw_gbs * 6 / 4)
    assert rs.speedup == pytest.approx(2.0)  # vs nccl's reduce_scatter, not its allreduce
    lines = summary.summary_lines(sw.rows, "nccl")
    assert lines[0].startswith("allreduce nccl out") and lines[2].startswith("reduce_scatter ring")
