"""--reproducible without a GPU: the option, the row ``auto-reproducible`` in the sweep (right
after ``auto``), the one mapping of a row to its communicator and algorithm, its pick and its
refusals, the second communicator (made only when asked for, like the main one, rebuilt and
closed with it), and whole serial host runs (the CSV, the banner, the metadata)."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI

import mpiring
from mpiring.bench import rowmaker, runner
from mpiring.bench.algorithms import AUTO, AUTO_REPRODUCIBLE, default_sweep
from mpiring.bench.arrays import HostSpace
from mpiring.bench.cli import parse_args
from mpiring.bench.data import InputGenerator
from mpiring.bench.measure import Outcome, Point, PointMeasurer, SizeBuffers, TimingPolicy
from mpiring.bench.report import algo_width, columns
from mpiring.bench.sweep import Sweep, target

serial = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
REFUSAL = ("reproducible=True: no row reduces Reduce_scatter_block of GPU arrays in rank order "
           "(a test's stand-in)")


# -- the option ------------------------------------------------------------------------------------


def test_the_option_and_the_name():
    assert parse_args([]).reproducible is False
    assert parse_args(["--reproducible"]).reproducible is True
    o = parse_args(["--algo", "auto,Auto-Reproducible"])
    assert o.algos == (AUTO, AUTO_REPRODUCIBLE) and o.reproducible is False


def test_auto_reproducible_is_no_baseline(capsys):
    with pytest.raises(SystemExit) as exc:
        parse_args(["--baseline", AUTO_REPRODUCIBLE])
    assert exc.value.code == 2 and "unknown baseline 'auto-reproducible'" in capsys.readouterr().err


# -- the sweep -------------------------------------------------------------------------------------


def test_the_row_comes_right_after_auto_only_when_asked_for():
    gpu = list(default_sweep(True))
    assert runner._algorithms(None, gpu=True)[0] == gpu  # without the flag: as before
    assert runner._algorithms(None, gpu=True, reproducible=True)[0] == gpu + [AUTO_REPRODUCIBLE]
    assert gpu[-1] == AUTO
    host = list(default_sweep(False))  # auto is not in the host's sweep: the row comes last
    assert runner._algorithms(None, gpu=False, reproducible=True)[0] == host + [AUTO_REPRODUCIBLE]
    run, base = runner._algorithms(("ring", "auto"), gpu=False, reproducible=True)
    assert run == ["ring", AUTO, AUTO_REPRODUCIBLE] and base == "mpi-direct"
    run, _ = runner._algorithms((AUTO_REPRODUCIBLE, "mpi"), gpu=False)  # --algo alone
    assert run == ["mpi", AUTO_REPRODUCIBLE]
    for collective in ("reduce_scatter", "allgather"):
        run, _ = runner._algorithms(None, gpu=True, collective=collective, reproducible=True)
        assert run == ["nccl", "ring", "ring-events", "ce-twoshot", AUTO, AUTO_REPRODUCIBLE]
    run, _ = runner._algorithms(None, gpu=True, nodes=2, reproducible=True)  # refused there: n/a
    assert run == ["nccl-direct", "nccl", "nccl-ring", "torch", "nccl-lib", "hier", AUTO, AUTO_REPRODUCIBLE]


def test_a_second_communicator_only_for_the_row():
    assert runner._variants(None, False) == [] and runner._variants(("ring", AUTO), False) == []
    assert runner._variants(None, True) == [AUTO_REPRODUCIBLE]
    assert runner._variants((AUTO_REPRODUCIBLE,), False) == [AUTO_REPRODUCIBLE]
    assert runner._variants((AUTO_REPRODUCIBLE,), True) == [AUTO_REPRODUCIBLE]


def sweep(algos_of, variants=None) -> Sweep:
    opts = SimpleNamespace(batches=("auto", 2), placements=("out",), dtype="float32", op="sum",
                           output_format="table")
    algos = list(dict.fromkeys(a for algos in algos_of.values() for a in algos))
    return Sweep(opts, SimpleNamespace(size=2), "main", None, None, "host", algos, "mpi",
                 [(1024, 256)], np.dtype(np.float32), algos_of=algos_of,
                 sizes_of={c: [(1024, 256)] for c in algos_of}, variants=variants or {})


def test_the_rows_points_and_where_their_calls_go():
    sw = sweep({"allreduce": ["mpi", "ring", AUTO, AUTO_REPRODUCIBLE]}, {AUTO_REPRODUCIBLE: "second"})
    points = [(p.algo, p.batches) for p in sw.points_of(1024, 256)]
    assert points == [("mpi", None), ("ring", "auto"), ("ring", 2), (AUTO, None),
                      (AUTO_REPRODUCIBLE, None)]  # no batches of its own, as auto
    assert target(sw, AUTO_REPRODUCIBLE) == ("second", AUTO)
    assert target(sw, AUTO) == ("main", AUTO) and target(sw, "ring") == ("main", "ring")


def test_a_refusal_holds_for_its_collective_a_missing_row_for_the_run():
    sw = sweep({"reduce_scatter": [AUTO_REPRODUCIBLE, "nccl"], "allgather": [AUTO_REPRODUCIBLE, "nccl"]})
    rs = Point(1024, 256, "float32", "sum", AUTO_REPRODUCIBLE, None, "out", "reduce_scatter")
    ag = Point(1024, 256, "float32", "sum", AUTO_REPRODUCIBLE, None, "out", "allgather")
    sw.give_up(rs, REFUSAL)
    assert sw.gone(rs) == REFUSAL and sw.gone(ag) is None  # Allgather reduces nothing: it runs
    nccl = Point(1024, 256, "float32", "sum", "nccl", None, "out", "reduce_scatter")
    sw.give_up(nccl, "no NCCL")
    assert sw.gone(nccl) == "no NCCL"
    assert sw.gone(Point(1024, 256, "float32", "sum", "nccl", None, "out", "allgather")) == "no NCCL"


# -- rows: the pick of the reproducible communicator -----------------------------------------------


class Resolving:
    def __init__(self, answer):
        self.answer = answer
        self.asked: list[str | None] = []

    def resolve(self, count, dtype, algorithm="auto", **kwargs):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def batches_for(self, count, dtype, *, gpu=None, algorithm=None, batches=None):
        self.asked.append(algorithm)
        return None


def fake_sweep(main, second) -> SimpleNamespace:
    return SimpleNamespace(world=SimpleNamespace(size=4), comm=main, mode="gpu", rows=[],
                           dtype=np.dtype(np.float32), baseline="nccl",
                           variants={AUTO_REPRODUCIBLE: second})


def test_the_rows_pick_is_its_communicators():
    main, second = Resolving("nccl"), Resolving("twoshot")
    sw = fake_sweep(main, second)
    stats = SimpleNamespace(median=1e-5, mean=1e-5, min=1e-5, max=1e-5, std=0.0)
    rows = {}
    for algo in ("nccl", AUTO, AUTO_REPRODUCIBLE):
        p = Point(1 << 20, 1 << 18, "float32", "sum", algo, None, "out")
        rows[algo] = rowmaker.make_row(sw, p, Outcome("ok", "OK", stats=stats, wrong=0))
        rows[algo].speedup = rowmaker.speedup(sw, rows[algo])
        sw.rows.append(rows[algo])
    assert rows[AUTO].resolved == "nccl" and rows[AUTO_REPRODUCIBLE].resolved == "twoshot"
    assert rows["nccl"].resolved == "" and rows[AUTO_REPRODUCIBLE].speedup == pytest.approx(1.0)
    assert second.asked == [AUTO] and main.asked == ["nccl", AUTO]  # batches: on its communicator


def test_a_refused_row_has_no_pick():
    """GPU Reduce_scatter_block: the reproducible communicator refuses it (its resolve too)."""
    second = Resolving(mpiring.UnavailableError(REFUSAL))
    p = Point(1 << 20, 1 << 16, "float32", "sum", AUTO_REPRODUCIBLE, None, "out", "reduce_scatter")
    row = rowmaker.make_row(fake_sweep(Resolving("nccl"), second), p,
                            Outcome("unavailable", "-", f"rank 0: UnavailableError: {REFUSAL}"))
    assert (row.status, row.resolved, row.batches_used) == ("unavailable", "", None)
    assert rowmaker.reason(row.note) == REFUSAL


def test_the_algo_column_fits_the_rows_name_and_pick():
    assert algo_width() == algo_width([AUTO, "torch-symm-1shot"]) == 16  # as before
    assert algo_width([AUTO, AUTO_REPRODUCIBLE]) == len("auto-reproducible:mpi-twoshot")
    assert [c[1] for c in columns("mpi", algos=[AUTO_REPRODUCIBLE]) if c[0] == "algo"] == [29]


# -- the measurer: the calls name auto, on the communicator it is handed ---------------------------


class Recording:
    """One rank's stand-in communicator: a copy, recording the algorithm and count of each call."""

    def __init__(self) -> None:
        self.check = False
        self.calls: list[tuple[str, int]] = []

    def stats(self) -> mpiring.CallStats:  # calls not counted: the bench's replayed share is None
        return mpiring.CallStats(0, 0, 0, False)

    def Allreduce(self, send, recv, op, *, algorithm=None, batches=None):  # noqa: N802
        self.calls.append((algorithm, len(recv)))
        if send is not MPI.IN_PLACE:
            np.copyto(recv, send)


def test_every_call_of_the_row_names_auto():
    space = HostSpace()
    bufs = SizeBuffers(space, InputGenerator(np, "sum", np.dtype(np.float32), 1, seed=3), 1000,
                       rank=0, cache=True)
    comm = Recording()
    m = PointMeasurer(MPI.COMM_SELF, comm, space, TimingPolicy(budget_s=0.002, reps=2), check=2,
                      time_agreement=False, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE, algorithm=AUTO)
    out = m.measure(Point(4000, 1000, "float32", "sum", AUTO_REPRODUCIBLE, None, "out"), bufs)
    assert (out.status, out.check, out.wrong) == ("ok", "OK", 0), out.note
    assert {a for a, _ in comm.calls} == {AUTO}
    assert [n for _, n in comm.calls[:3]] == [1000, 1000, 993]  # two checked calls, then the odd count


# -- the communicators: made like the main one, rebuilt and closed with it -------------------------


class Made:
    """Records how the bench makes its communicators (a stand-in for mpiring.Communicator)."""

    made: list[Made] = []

    def __init__(self, comm, **kwargs) -> None:
        self.kwargs, self.closed = kwargs, False
        Made.made.append(self)

    def close(self) -> None:
        self.closed = True


def test_rebuilt_alike_after_an_error(monkeypatch):
    monkeypatch.setattr(runner, "Communicator", Made)
    Made.made = []
    opts = parse_args(["--reproducible", "--timeout", "7", "--sm-budget", "9"])
    main, second = runner._communicator(opts, True), runner._communicator(opts, True, AUTO_REPRODUCIBLE)
    assert main.kwargs == dict(gpu=True, timeout=7.0, sm_budget=9, overlap=False)
    assert second.kwargs == dict(main.kwargs, reproducible=True)
    sw = SimpleNamespace(comm=main, variants={AUTO_REPRODUCIBLE: second}, mode="gpu", opts=opts)
    runner._rebuild(sw)
    assert main.closed and second.closed and len(Made.made) == 4
    assert sw.comm is Made.made[2] and sw.variants[AUTO_REPRODUCIBLE] is Made.made[3]
    assert sw.variants[AUTO_REPRODUCIBLE].kwargs == second.kwargs and sw.comm.kwargs == main.kwargs


# -- whole serial runs on the host ------------------------------------------------------------------


def counting(monkeypatch, refuse: str = "") -> list[dict]:
    """Every communicator the bench makes, recorded (its keyword arguments); with ``refuse``
    (a method name), the reproducible one raises UnavailableError there."""
    made: list[dict] = []

    class Counted(mpiring.Communicator):
        def __init__(self, comm, **kwargs) -> None:
            made.append(kwargs)
            super().__init__(comm, **kwargs)

        def Reduce_scatter_block(self, *args, **kwargs):  # noqa: N802
            if refuse == "Reduce_scatter_block" and self.reproducible:
                raise mpiring.UnavailableError(REFUSAL)
            return super().Reduce_scatter_block(*args, **kwargs)

    monkeypatch.setattr(runner, "Communicator", Counted)
    return made


def run_bench(tmp_path, *args):
    from mpiring.bench.__main__ import main

    return main(["--host", "-b", "1K", "-e", "16K", "-f", "4", "--time-budget", "0.005", "--reps",
                 "2", "--no-plot", "--progress", "off", "--output-dir", str(tmp_path), *args])


def rows_and_meta(tmp_path, name):
    with next(tmp_path.glob(f"{name}_*.csv")).open() as f:
        rows = list(csv.DictReader(f))
    return rows, json.loads(next(tmp_path.glob(f"{name}_*.json")).read_text())["metadata"]


@serial
def test_a_host_run_with_the_row(tmp_path, capsys, monkeypatch):
    made = counting(monkeypatch)
    status = run_bench(tmp_path, "--reproducible", "--placement", "out,in", "--name", "rep",
                       "--timeout", "60")
    out = capsys.readouterr().out
    assert status == 0, out
    assert made == [dict(gpu=False, timeout=60.0, sm_budget=None, overlap=False),
                    dict(gpu=False, timeout=60.0, sm_budget=None, overlap=False, reproducible=True)]
    rows, meta = rows_and_meta(tmp_path, "rep")
    want = [*default_sweep(False), AUTO_REPRODUCIBLE]
    assert [r["algo"] for r in rows] == [a for _ in range(3) for a in want for _ in ("out", "in")]
    mine = [r for r in rows if r["algo"] == AUTO_REPRODUCIBLE]
    for r in mine:
        assert (r["status"], r["wrong"], r["resolved"], r["batches"]) == ("ok", "0", "mpi-twoshot", "-"), r
        assert float(r["speedup"]) > 0 and r["baseline"] == "mpi-direct"
    assert meta["variants"] == {AUTO_REPRODUCIBLE: {"algorithm": AUTO, "reproducible": True}}
    assert meta["settings"]["reproducible"] is True
    text = " ".join(out.split())
    assert "# variant auto-reproducible: auto on a second communicator made with reproducible=True" in text
    assert "auto-reproducible:mpi-twoshot - out" in text and "auto-reproducible:mpi-twoshot - in" in text
    assert "# auto-reproducible out: 3/3 timed" in out and "# auto-reproducible in: 3/3 timed" in out


@serial
def test_a_host_run_without_the_row_makes_one_communicator(tmp_path, capsys, monkeypatch):
    made = counting(monkeypatch)
    status = run_bench(tmp_path, "--algo", "mpi,auto", "--name", "plain")
    out = capsys.readouterr().out
    assert status == 0, out
    assert made == [dict(gpu=False, timeout=None, sm_budget=None, overlap=False)]
    rows, meta = rows_and_meta(tmp_path, "plain")
    assert {r["algo"] for r in rows} == {"mpi", AUTO} and "variants" not in meta
    assert AUTO_REPRODUCIBLE not in out and "# variant" not in out


@serial
def test_a_refused_collective_is_na_and_the_next_one_runs(tmp_path, capsys, monkeypatch):
    """As GPU Reduce_scatter_block: the row's communicator refuses; the run notes the library's
    reason once, its rows are "unavailable" (no pick); Allgather (which reduces nothing) still
    runs; exit status 0."""
    counting(monkeypatch, refuse="Reduce_scatter_block")
    status = run_bench(tmp_path, "--algo", f"mpi,{AUTO_REPRODUCIBLE}", "--collective", "all",
                       "--name", "refused")
    out = capsys.readouterr().out
    assert status == 0, out
    rows, _ = rows_and_meta(tmp_path, "refused")
    by = {(r["collective"], r["size_bytes"]): r for r in rows if r["algo"] == AUTO_REPRODUCIBLE}
    assert len(by) == 9
    for (collective, _), r in by.items():
        if collective == "reduce_scatter":
            assert (r["status"], r["resolved"], r["time_us"]) == ("unavailable", "", "")
            assert REFUSAL in r["note"]
        else:
            assert (r["status"], r["wrong"], r["resolved"]) == ("ok", "0", "mpi-twoshot" if
                                                               collective == "allreduce" else "ring")
    # as every row that cannot run here: one note, then rows in the files only
    assert out.count(f"# {AUTO_REPRODUCIBLE}: unavailable ({REFUSAL})") == 1
    assert f"# reduce_scatter {AUTO_REPRODUCIBLE}" not in out  # nothing timed, nothing failed
    assert f"# allgather {AUTO_REPRODUCIBLE} out: 3/3 timed" in out
