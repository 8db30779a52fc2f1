"""Results that survive: the CSV and the JSON Lines file grow row by row (synced), the JSON is
whole at every instant (written at the start, as rows complete, at the end and at an interrupt),
every row names the code that measured it, an interrupt stops the sweep between two points
(Ctrl-C, SIGTERM), a partial CSV re-plots, missing plotting dependencies stop the run before the
sweep, and the default output directory. tests/faults/test_bench_interrupt.py interrupts real
mpiexec jobs."""

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
from mpiring.bench.command import InterruptGuard, interrupt_status
from mpiring.bench.measure import Outcome
from mpiring.bench.results import FIELDS, Row, read_csv_counted, read_jsonl
from mpiring.bench.stats import Stats
from mpiring.core.install import pip_install

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
    assert dropped == 0
    rows, dropped = read_jsonl(out.jsonl_path)
    assert [(r.size_bytes, r.status, r.wrong) for r in rows] == [(1024, "ok", 0),
                                                                 (2048, "fail", 7)]
    assert dropped == 0
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


def test_the_json_is_whole_from_the_start_and_follows_the_rows(tmp_path, monkeypatch):
    out = files.ResultFiles(tmp_path / "run", {"hostname": "h"})
    out.open()  # before any point: a valid JSON, not yet complete, nothing interrupted
    doc = json.loads(out.json_path.read_text())
    assert doc["results"] == [] and doc["metadata"]["complete"] is False
    assert doc["metadata"]["interrupted"] is None and doc["fields"] == FIELDS
    monkeypatch.setattr(files, "JSON_EVERY_S", 0.0)  # rewritten after every row
    out.add(row(1024))
    out.add(row(2048))
    doc = json.loads(out.json_path.read_text())
    assert [r["size_bytes"] for r in doc["results"]] == [1024, 2048]
    assert doc["metadata"]["rows_written"] == 2 and doc["metadata"]["complete"] is False
    monkeypatch.setattr(files, "JSON_EVERY_S", 3600.0)  # not again within the hour
    out.add(row(4096))
    assert len(json.loads(out.json_path.read_text())["results"]) == 2
    out.finish(interrupted="SIGINT")  # a signal: named, and kept by the rewrites after it
    monkeypatch.setattr(files, "JSON_EVERY_S", 0.0)
    out.add(row(8192))
    meta = json.loads(out.json_path.read_text())["metadata"]
    assert (meta["interrupted"], meta["complete"], meta["rows_written"]) == ("SIGINT", False, 4)
    assert not list(tmp_path.glob("*.tmp"))
    out.close()


def test_every_row_in_every_file_names_the_code_that_measured_it(tmp_path):
    out = files.ResultFiles(tmp_path / "run", {"mpiring": "9.9.9", "commit": "abc-dirty"})
    out.open()
    given = row(1024)
    out.add(given)
    out.finish()
    out.close()
    assert given.commit == ""  # the caller's row is not changed
    (from_csv,), _ = read_csv_counted(out.csv_path)
    (from_jsonl,), _ = read_jsonl(out.jsonl_path)
    doc = json.loads(out.json_path.read_text())
    for r in (from_csv, from_jsonl, Row(**doc["results"][0])):
        assert (r.mpiring, r.commit) == ("9.9.9", "abc-dirty")
    assert (doc["metadata"]["mpiring"], doc["metadata"]["commit"]) == ("9.9.9", "abc-dirty")


def test_a_jsonl_cut_in_the_middle_of_a_line_reads_its_complete_rows(tmp_path):
    out = files.ResultFiles(tmp_path / "run", {})
    out.open()
    for size in (1024, 2048, 4096):
        out.add(row(size))
    out.close()
    text = out.jsonl_path.read_text()
    out.jsonl_path.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 40])  # half a line
    rows, dropped = read_jsonl(out.jsonl_path)
    assert [r.size_bytes for r in rows] == [1024, 2048] and dropped == 1


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
    assert pip_install("bench") in problem
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


def _wait_for(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)


@serial
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_interrupt_guard_notes_a_signal_and_calls_back_at_once(sig):
    seen: list[str] = []
    with InterruptGuard(seen.append) as guard:
        os.kill(os.getpid(), sig)  # raises nothing: the run stops where it asks
        _wait_for(lambda: bool(seen))
        assert guard.pending == signal.Signals(sig).name
        assert guard.agreed(MPI.COMM_WORLD) == signal.Signals(sig).name
    assert seen == [signal.Signals(sig).name]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert interrupt_status(signal.Signals(sig).name) == 128 + sig
    assert interrupt_status() == 130


@serial
def test_a_run_that_does_not_stop_within_the_grace_period_is_ended():
    overdue: list[tuple[str, str]] = []
    with InterruptGuard(lambda name: None, lambda name, why: overdue.append((name, why)),
                        grace_s=0.2):
        os.kill(os.getpid(), signal.SIGTERM)
        _wait_for(lambda: bool(overdue))
    assert overdue == [("SIGTERM", "the run did not stop within 0.2 s of SIGTERM")]


@serial
def test_a_second_signal_ends_the_run_at_once():
    overdue: list[tuple[str, str]] = []
    with InterruptGuard(lambda name: None, lambda name, why: overdue.append((name, why)),
                        grace_s=60):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)
        _wait_for(lambda: bool(overdue))
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)  # called once only
        time.sleep(0.1)
    assert overdue == [("SIGINT", "a second signal (SIGINT) arrived")]


@serial
def test_a_guard_left_in_time_ends_nothing():
    overdue: list[str] = []
    with InterruptGuard(lambda name: None, lambda name, why: overdue.append(why), grace_s=0.3):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)
    time.sleep(0.5)
    assert overdue == []


class StopsAfter:
    """A PointMeasurer stand-in: ``good`` timed points, then a signal during the next one."""

    made: list = []

    def __init__(self, world, comm, space, policy, **kw):
        StopsAfter.made.append(comm)

    def measure(self, point, bufs, call=None, capture=None):  # call: a rival's (mpi-direct)
        if len(StopsAfter.made) == StopsAfter.good + 1:
            os.kill(os.getpid(), StopsAfter.signum)  # the point still completes
            time.sleep(0.05)
        stats = Stats(mean=1e-5, std=0.0, min=1e-5, max=1e-5, median=1e-5)
        return Outcome("ok", "OK", stats=stats, iters=1, warmup=0, reps=1, wrong=0)


@serial
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_sweep_stops_between_points_and_keeps_its_rows(monkeypatch, tmp_path, sig):
    from mpiring.bench import __main__ as bench
    from mpiring.bench.report import Reporter

    StopsAfter.made, StopsAfter.good, StopsAfter.signum = [], 3, sig
    monkeypatch.setattr(runner, "PointMeasurer", StopsAfter)
    opts = parse_args(["--host", "-b", "1K", "-e", "64K", "--output-dir", str(tmp_path),
                       "--progress", "off", "--name", "cut"])
    world = MPI.COMM_WORLD.Dup()
    try:
        assert bench._run(opts, world, Reporter(True, "off")) == 128 + sig
    finally:
        world.Free()
    assert len(StopsAfter.made) == 4  # no point after the one the signal came in
    (csv_path,) = tmp_path.glob("cut_*.csv")
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}
    doc = json.loads(Path(str(csv_path).removesuffix(".csv") + ".json").read_text())
    name = signal.Signals(sig).name
    assert doc["metadata"]["complete"] is False and doc["metadata"]["interrupted"] == name
    assert len(doc["results"]) == 4 and doc["metadata"]["rows_written"] == 4
    assert len(read_jsonl(csv_path.with_suffix(".jsonl"))[0]) == 4
    assert not list(tmp_path.glob("*.png"))  # figures come only with a finished run
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
