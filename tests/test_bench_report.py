"""mpiring.bench.report and the exit status: what rank 0 prints, and what the run returns."""

from __future__ import annotations

import io

import pytest

from mpiring.bench.command import exit_status
from mpiring.bench.report import (
    Reporter,
    columns,
    fmt_bw,
    fmt_eff,
    fmt_ms,
    fmt_speedup,
    fmt_time,
    is_terminal,
    sms_cell,
    table_width,
    wrong_label,
)
from mpiring.bench.results import Row


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
    rep.row(row(algo="nccl-ring", batches="4", status="fail", check="FAIL", wrong=17,
                time_us=None, busbw_gbs=None, speedup=None,
                note="rank 2: wrong result: 17 of 262144 [first at 3]"))
    rep.row(row(status="error", check="-", time_us=None, note="rank 0: RuntimeError: x"))
    rep.stop()
    out = capsys.readouterr().out
    lines = out.splitlines()
    ok = next(line for line in lines if "ring" in line and "1 MiB" in line)
    for text in ("1 MiB", "262144", "float32", "sum", "auto", "out", "123.5", "12.74",
                 "1.23x"):
        assert text in ok, text
    assert ok.rstrip().endswith(" 0")  # #wrong: no wrong element
    assert "speed-up" in out and "vs nccl" in out and "busbw" in out and "#wrong" in out
    fail = next(line for line in lines if "nccl-ring" in line)
    assert fail.rstrip().endswith(" 17")
    assert "rank 2: wrong result: 17 of 262144 [first at 3]" in out  # brackets kept: no markup
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
    assert "1.23x" in auto and auto.rstrip().endswith(" 0")
    na = next(line for line in lines if "oneshot" in line)
    assert na.rstrip().endswith("n/a")
    assert not any("InvalidArgumentError" in line for line in lines)  # n/a is not an error
    assert max(len(line) for line in lines) <= table_width(columns("nccl")) + 1


def test_overlap_columns(capsys):
    assert len(columns("nccl", overlap=("gemm",))) == len(columns("nccl")) + 2 + 4 + 1
    assert len(columns("nccl", overlap=("train",))) == len(columns("nccl")) + 4 + 1
    both = columns("nccl", overlap=("train", "gemm"))  # in the shapes' order, whatever asked
    heads = [h for h, _, _ in both]
    assert heads.index("GEMM\nslowdown") < heads.index("T_both\n(ms)") < heads.index(
        "train T_both\n(ms)") < heads.index("SMs\nheld") < heads.index("#wrong")
    rep = Reporter(True, progress="off")
    rep.set_baseline("nccl", overlap=("gemm", "train"))
    rep.start(1)
    rep.row(row(gemm_slowdown=1.034, ar_slowdown=1.5, t_gemm_us=13600.0, t_ar_us=8123.4,
                t_both_us=15012.0, overlap_eff=0.8262, train_t_gemm_us=13000.0,
                train_t_ar_us=8100.0, train_t_both_us=14100.5, train_eff=-0.0432, ar_sms=None,
                ar_sms_source="all: its kernels launch the grid they want"))
    rep.row(row(algo="nccl", ar_sms=16, ar_sms_source="NCCL_MAX_NCHANNELS=16: ..."))
    rep.row(row(algo="twoshot"))  # overlap not measured: dashes
    rep.stop()
    out = capsys.readouterr().out
    assert "GEMM" in out and "slowdown" in out and "T_both" in out and "train T_both" in out
    ring = next(line for line in out.splitlines() if "1.03x" in line)
    for cell in ("1.50x", "13.60", "8.123", "15.01", "0.83", "14.10", "-0.04", " all "):
        assert cell in ring, cell
    nccl = next(line for line in out.splitlines() if " nccl " in line and "MiB" in line)
    assert " 16 " in nccl
    assert max(len(line) for line in out.splitlines()) <= table_width(
        columns("nccl", ("gemm", "train"))) + 1


def test_makespan_formats():
    assert fmt_ms(None) == "-" and fmt_ms(float("nan")) == "-"
    assert (fmt_ms(1234.5), fmt_ms(12345.0), fmt_ms(123456.0)) == ("1.234", "12.35", "123.5")
    assert fmt_eff(0.8262) == "0.83" and fmt_eff(None) == "-"
    assert sms_cell(row()) == "-" and sms_cell(row(ar_sms_source="unknown: x")) == "?"


def test_not_applicable_points_do_not_change_the_exit_status():
    assert exit_status([row(), row(status="inapplicable", check="-")]) == 0


def test_wrong_label():
    assert wrong_label(row(wrong=0)) == "0" and wrong_label(row(wrong=12, status="fail")) == "12"
    assert wrong_label(row(check="off")) == "off"
    assert wrong_label(row(status="inapplicable", check="-")) == "n/a"
    assert wrong_label(row(status="error", check="-")) == "ERROR"


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("progress", "env", "terminal"), [
    ("auto", {"TERM": "xterm"}, True),
    ("auto", {"TERM": "dumb"}, False),
    ("auto", {"TERM": "xterm", "OMPI_COMM_WORLD_SIZE": "4"}, False),  # Open MPI's pty
    ("auto", {"PMIX_RANK": "0"}, False),
    ("off", {"TERM": "xterm"}, False),
    ("on", {"TERM": "dumb", "OMPI_COMM_WORLD_SIZE": "4"}, True),
])
def test_terminal_only_where_no_launcher_could_fake_one(progress, env, terminal):
    assert is_terminal(FakeTty(), progress, env) is terminal
    assert is_terminal(io.StringIO(), progress, env) is (progress == "on")


@pytest.mark.parametrize("progress", ["off", "auto"])
def test_no_control_sequences_when_not_a_terminal(progress, capsys):
    """Logs hold plain text: no colour, no cursor codes, even for styled notes and errors."""
    rep = Reporter(True, progress=progress, baseline="nccl")
    rep.banner("title", [("ranks", "4")], note="a note")
    rep.start(2)
    rep.working_on("1 MiB")
    rep.row(row())
    rep.row(row(status="fail", check="FAIL", wrong=3, time_us=None, note="rank 1: wrong"))
    rep.advance(2)
    rep.note("styled", style="bold red")
    rep.error("an error")
    rep.stop()
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out and "\x1b" not in captured.err
    assert "an error" in captured.err and "styled" in captured.out


def test_nccl_tests_mode_prints_plain_tables(capsys):
    rep = Reporter(True, progress="off", plain=True)
    rep.set_baseline("nccl", placements=("out", "in"))
    rep.banner("mpiring allreduce benchmark", [("ranks", "2")], note="no GPU")
    rep.start(4)
    for size in (1024, 2048):
        for place in ("out", "in"):
            rep.row(row(size_bytes=size, count=size // 4, placement=place, algo="nccl",
                        batches="-", wrong=0, algbw_gbs=1.0, busbw_gbs=2.0))
    rep.section()
    rep.stop()
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("#") for line in lines if not line[:1].isspace())
    data = [line.split() for line in lines if not line.startswith("#")]
    assert [d[0] for d in data] == ["1024", "2048"] and all(len(d) == 13 for d in data)
    assert lines[0] == "# mpiring allreduce benchmark" and "" not in lines
    assert any(line.startswith("# Avg bus bandwidth    : 2 ") for line in lines)


def _report_everything() -> None:
    """One of each thing a reporter prints: banner, note, table with long cells, notes, summary."""
    rep = Reporter(True, progress="off", baseline="nccl")
    rep.set_baseline("torch-symm-1shot", overlap=("gemm",))
    rep.banner("mpiring allreduce benchmark", [("ranks", "4 on a, b"), ("", " Rank 0 on a")],
               note="no GPU")
    rep.start(3)
    rep.row(row(algo="auto", batches="-", resolved="a-very-long-algorithm-name", gemm_slowdown=1.5))
    rep.row(row(algo="nccl-ring", batches="4", status="fail", check="FAIL", wrong=17, time_us=None,
                note="rank 2: wrong result: 17 of 262144 [first at 3]"))
    rep.section()
    rep.row(row(count=12345678901234, time_us=123456789.0))  # cut: the cell is too narrow
    rep.note("  a note [in brackets]", style="red")
    rep.print("# wrote results/x.csv", soft_wrap=True, markup=False)
    rep.stop()


def test_without_rich_the_same_text_is_printed(capsys, monkeypatch):
    """mpiring-tune runs without the bench extra: mpiring.bench.plain's stand-ins print what rich
    prints off a terminal, line for line (trailing blanks aside)."""
    from mpiring.bench import plain, report

    _report_everything()
    with_rich = capsys.readouterr().out
    for name in ("Console", "Table", "Text"):
        monkeypatch.setattr(report, name, getattr(plain, name))
    monkeypatch.setattr(report, "HAVE_RICH", False)
    assert not Reporter(True, progress="on").live  # no live bar without rich, even when asked
    _report_everything()
    without = capsys.readouterr().out
    assert [line.rstrip() for line in without.splitlines()] == [
        line.rstrip() for line in with_rich.splitlines()]
    assert "…" in without and "[first at 3]" in without and "[in brackets]" in without


def test_the_sm_work_columns_show_the_rows_statement_or_a_dash():
    """A row's own SM statement fills the two columns before #wrong; a row that states nothing
    (NCCL, MPI, a rival) shows "-" in both."""
    from mpiring.bench.report import columns
    from mpiring.bench.results import Row

    cols = columns("mpi")
    names = [name for name, _, _ in cols]
    assert names[-3:] == ["SMs\nstated", "fold\nB/B", "#wrong"]
    stated = Row(1024, 256, "float32", "sum", "ring", "auto", "out", 4, "ok", "OK", stated_sms=0,
                 fold_traffic=2.25)
    silent = Row(1024, 256, "float32", "sum", "nccl", "-", "out", 4, "ok", "OK")
    assert [str(get(stated)) for _, _, get in cols[-3:-1]] == ["0", "2.25"]
    assert [str(get(silent)) for _, _, get in cols[-3:-1]] == ["-", "-"]
