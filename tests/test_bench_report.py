"""mpiring.bench.report and the exit status: what rank 0 prints, and what the run returns."""

from __future__ import annotations

from mpiring.bench.report import Reporter, columns, fmt_bw, fmt_speedup, fmt_time, table_width
from mpiring.bench.results import Row
from mpiring.bench.runner import exit_status


def row(**kw) -> Row:
    base = dict(size_bytes=1 << 20, count=262144, dtype="float32", op="sum", algo="ring",
                batches="auto", placement="out", nranks=4, status="ok", check="OK",
                time_us=123.456, mean_us=124.0, min_us=120.0, max_us=130.0, std_us=3.2,
                algbw_gbs=8.49, busbw_gbs=12.74, speedup=1.234, baseline="nccl")
    base.update(kw)
    return Row(**base)


def test_formats():
    assert fmt_time(12.345) == "12.35" and fmt_time(1234.56) == "1234.6"
    assert fmt_time(1_234_567.0) == "1234567" and fmt_time(None) == "-"
    assert fmt_bw(364.04) == "364.04" and fmt_bw(float("nan")) == "-"
    assert fmt_speedup(1.234) == "1.23x" and fmt_speedup(None) == "-"


def test_rows_print_on_rank_0_unsqueezed(capsys):
    rep = Reporter(True, progress="off", baseline="nccl")
    rep.start(3)
    rep.row(row())
    rep.row(row(algo="nccl-ring", batches="4", status="fail", check="FAIL", time_us=None,
                busbw_gbs=None, speedup=None, note="rank 2: wrong result: 1 of 262144"))
    rep.row(row(status="error", check="-", time_us=None, note="rank 0: RuntimeError: x"))
    rep.stop()
    out = capsys.readouterr().out
    lines = out.splitlines()
    ok = next(line for line in lines if "ring" in line and "1 MiB" in line)
    for text in ("1 MiB", "262144", "float32", "sum", "auto", "out", "123.5", "12.74",
                 "1.23x", "OK"):
        assert text in ok, text
    assert "speed-up" in out and "vs nccl" in out and "busbw" in out
    assert "FAIL" in out and "rank 2: wrong result" in out
    assert "ERROR" in out and "RuntimeError" in out
    assert max(len(line) for line in lines) <= table_width(columns("nccl")) + 1


def test_other_ranks_print_nothing(capsys):
    rep = Reporter(False, progress="on", baseline="nccl")
    rep.banner("title", [("a", "b")], note="no GPU")
    rep.start(1)
    rep.row(row())
    rep.note("x")
    rep.error("y")
    rep.stop()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_host_banner_note(capsys):
    Reporter(True, progress="off").banner(
        "mpiring allreduce benchmark", [("ranks", "4")],
        note="no GPU: benchmarking the host transport against MPI.Allreduce")
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "# no GPU: benchmarking the host transport against MPI.Allreduce"


def test_exit_status():
    assert exit_status([row(), row(status="skipped"), row(status="unavailable")]) == 0
    assert exit_status([row(), row(status="error")]) == 2
    assert exit_status([row(status="error"), row(status="fail")]) == 1


def test_six_algorithms_auto_pick_and_na_rows(capsys):
    rep = Reporter(True, progress="off", baseline="nccl")
    rep.start(3)
    rep.row(row(algo="auto", batches="-", resolved="twoshot"))
    rep.row(row(algo="oneshot", batches="-", status="inapplicable", check="-", time_us=None,
                speedup=None, note="rank 0: InvalidArgumentError: at most 1 MiB"))
    rep.row(row(algo="nccl-ring", batches="4"))
    rep.stop()
    lines = capsys.readouterr().out.splitlines()
    auto = next(line for line in lines if "auto:twoshot" in line)
    assert "1.23x" in auto and "OK" in auto
    na = next(line for line in lines if "oneshot" in line)
    assert na.rstrip().endswith("n/a")
    assert not any("InvalidArgumentError" in line for line in lines)  # n/a is not an error
    assert max(len(line) for line in lines) <= table_width(columns("nccl")) + 1


def test_overlap_columns(capsys):
    assert len(columns("nccl", overlap=True)) == len(columns("nccl")) + 2
    rep = Reporter(True, progress="off")
    rep.set_baseline("nccl", overlap=True)
    rep.start(1)
    rep.row(row(gemm_slowdown=1.034, ar_slowdown=1.5))
    rep.row(row(algo="nccl"))  # overlap not measured: dashes
    rep.stop()
    out = capsys.readouterr().out
    assert "GEMM" in out and "slowdown" in out
    ring = next(line for line in out.splitlines() if "1.03x" in line)
    assert "1.50x" in ring
    assert max(len(line) for line in out.splitlines()) <= table_width(columns("nccl", True)) + 1


def test_not_applicable_points_do_not_change_the_exit_status():
    assert exit_status([row(), row(status="inapplicable", check="-")]) == 0
