"""Results that survive: the CSV grows row by row (flushed), the JSON is written at the end or
at an interrupt (Ctrl-C, SIGTERM) and is valid JSON then, a partial CSV re-plots, missing
plotting dependencies stop the run before the sweep, and the default output directory."""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from mpi4py import MPI

from mpiring.bench import files, plot, runner
from mpiring.bench.cli import parse_args
from mpiring.bench.command import Interrupted, InterruptGuard, interrupt_status
from mpiring.bench.measure import Outcome
from mpiring.bench.results import FIELDS, Row, read_csv_counted
from mpiring.bench.stats import Stats

serial = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")


def row(size: int, **kw) -> Row:
    base = dict(size_bytes=size, count=size // 4, dtype="float32", op="sum", algo="ring",
                batches="auto", placement="out", nranks=2, status="ok", check="OK", wrong=0,
                time_us=10.0, min_us=9.0, max_us=11.0, busbw_gbs=1.0, algbw_gbs=1.0)
    base.update(kw)
    return Row(**base)


def test_csv_rows_are_on_disk_as_soon_as_added(tmp_path):
    out = files.ResultFiles(tmp_path / "sub" / "run", {"hostname": "h"})
    out.open()
    assert out.csv_path.read_text().strip() == ",".join(FIELDS)  # header before any point
    out.add(row(1024))
    out.add(row(2048, status="fail", check="FAIL", wrong=7, time_us=None))
    # read back through another file object while ours is still open: flushed, not buffered
    rows, dropped = read_csv_counted(out.csv_path)
    assert [(r.size_bytes, r.status, r.wrong) for r in rows] == [(1024, "ok", 0),
                                                                 (2048, "fail", 7)]
    assert dropped == 0 and not out.json_path.exists()
    path = out.finish(elapsed_s=1.5)
    doc = json.loads(path.read_text())
    assert doc["metadata"]["complete"] is True and doc["metadata"]["interrupted"] is None
    assert doc["metadata"]["rows_written"] == 2 and doc["metadata"]["elapsed_s"] == 1.5
    assert [r["size_bytes"] for r in doc["results"]] == [1024, 2048]
    out.close()


def test_an_interrupted_json_says_so_and_is_replaced_whole(tmp_path):
    out = files.ResultFiles(tmp_path / "run", {})
    out.open()
    out.add(row(1024))
    out.finish(interrupted="SIGTERM")
    doc = json.loads(out.json_path.read_text())
    assert doc["metadata"]["complete"] is False and doc["metadata"]["interrupted"] == "SIGTERM"
    assert not list(tmp_path.glob("*.tmp"))
    out.close()


def test_a_csv_cut_in_the_middle_of_a_row_reads_its_complete_rows(tmp_path):
    out = files.ResultFiles(tmp_path / "run", {})
    out.open()
    for size in (1024, 2048, 4096):
        out.add(row(size))
    out.close()
    text = out.csv_path.read_text()
    out.csv_path.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 25])  # half a line
    rows, dropped = read_csv_counted(out.csv_path)
    assert [r.size_bytes for r in rows] == [1024, 2048] and dropped == 1
    out.csv_path.write_text(text + '1,"unterminated')
    rows, dropped = read_csv_counted(out.csv_path)
    assert len(rows) == 3 and dropped == 1


def test_plot_redraws_a_partial_csv_without_its_json(tmp_path, capsys):
    path = tmp_path / "cut.csv"
    out = files.ResultFiles(tmp_path / "cut", {})
    out.open()
    for size in (1024, 2048, 4096):
        out.add(row(size))
        out.add(row(size, algo="mpi", batches="-"))
    out.close()
    text = path.read_text()
    path.write_text(text[:-20])
    assert plot.main([str(path)]) == 0
    captured = capsys.readouterr()
    assert "skipped 1 incomplete row(s)" in captured.err
    assert (tmp_path / "cut.png").stat().st_size > 0


def test_missing_plot_dependencies_are_named_before_the_sweep(monkeypatch):
    real = files.importlib.import_module

    def fake(name, *args):
        if name == "matplotlib":
            raise ImportError("No module named 'matplotlib'")
        return real(name, *args)

    monkeypatch.setattr(files.importlib, "import_module", fake)
    problem = files.missing_dependencies(plot=True)
    assert "matplotlib (the figures): ImportError" in problem and "--no-plot" in problem
    assert "mpiring[bench]" in problem
    assert files.missing_dependencies(plot=False) == ""


@serial
def test_the_bench_stops_at_once_without_matplotlib(monkeypatch, tmp_path, capsys):
    from mpiring.bench.__main__ import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["--host", "--output-dir", str(tmp_path), "--progress", "off"]) == 3
    assert "--no-plot" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_default_output_directory_is_not_the_repository_results():
    assert parse_args([]).output_dir == "mpiring-results"
    assert parse_args(["--output-dir", "results"]).output_dir == "results"


def test_interrupt_guard_turns_sigterm_into_an_exception_and_calls_back():
    seen: list[str] = []
    with pytest.raises(Interrupted) as exc, InterruptGuard(seen.append):
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(200):  # the handler runs between bytecodes
            time.sleep(0.01)
    assert exc.value.signum == signal.SIGTERM and interrupt_status(exc.value) == 143
    for _ in range(100):  # the watcher thread's call
        if seen:
            break
        time.sleep(0.01)
    assert seen == ["SIGTERM"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored
    assert interrupt_status(KeyboardInterrupt()) == 130


class StopsAfter:
    """A PointMeasurer stand-in: ``good`` timed points, then the interrupt."""

    made: list = []

    def __init__(self, world, comm, space, policy, **kw):
        StopsAfter.made.append(comm)

    def measure(self, point, bufs):
        if len(StopsAfter.made) > StopsAfter.good:
            StopsAfter.interrupt()
        stats = Stats(mean=1e-5, std=0.0, min=1e-5, max=1e-5, median=1e-5)
        return Outcome("ok", "OK", stats=stats, iters=1, warmup=0, reps=1, wrong=0)


@serial
@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupted_sweep_keeps_its_rows(monkeypatch, tmp_path, how):
    from mpiring.bench import __main__ as bench
    from mpiring.bench.report import Reporter

    def interrupt():
        if how == "SIGINT":
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises here

    StopsAfter.made, StopsAfter.good, StopsAfter.interrupt = [], 3, staticmethod(interrupt)
    monkeypatch.setattr(runner, "PointMeasurer", StopsAfter)
    opts = parse_args(["--host", "-b", "1K", "-e", "64K", "--output-dir", str(tmp_path),
                       "--progress", "off", "--name", "cut"])
    world = MPI.COMM_WORLD.Dup()
    try:
        with pytest.raises(KeyboardInterrupt if how == "SIGINT" else Interrupted):
            bench._run(opts, world, Reporter(True, "off"))
    finally:
        StopsAfter.made[0].close()
        world.Free()
    (csv_path,) = tmp_path.glob("cut_*.csv")
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and {r["status"] for r in rows} == {"ok"}
    doc = json.loads(Path(str(csv_path).removesuffix(".csv") + ".json").read_text())
    assert doc["metadata"]["complete"] is False and doc["metadata"]["interrupted"] == how
    assert len(doc["results"]) == 3 and doc["metadata"]["rows_written"] == 3
    assert not list(tmp_path.glob("*.png"))  # figures come only with a finished run
