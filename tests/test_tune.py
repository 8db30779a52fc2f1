"""mpiring.bench.tune's local parts: options, candidates, the table from bench rows, merging, the
file, and the checks made before measuring; plus one serial run on the host transport, and
``mpiring-tune`` without the bench extra (no rich, no matplotlib)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from mpi4py import MPI

from mpiring.algorithms import auto_candidates
from mpiring.auto.machine import MachineKey
from mpiring.auto.table import TuningTable, load, parse
from mpiring.bench import tune, tune_overlap, tunefile
from mpiring.bench.results import Row


def test_options_and_the_bench_options_they_make():
    o = tune.parse_args([])
    b = o.bench
    assert b.size_range(gpu=True) == (1 << 10, 8 << 30) and b.stepfactor == 2.0
    assert b.algos == auto_candidates() and b.batches == ("auto",) and b.placements == ("out",)
    assert (b.dtype, b.op, b.check, b.plot, b.overlap) == ("float32", "sum", True, False, None)
    assert b.time_agreement  # candidates timed as users call them: the agreement check on
    assert o.destination(4).name == "mpiring-tuning-4.json"
    o = tune.parse_args(["-b", "4K", "-e", "1G", "-f", "4", "--host", "--merge", "t.json",
                         "--time-budget", "0.01", "--reps", "2"])
    assert o.bench.size_range(gpu=True) == (4 << 10, 1 << 30) and o.bench.host
    assert o.destination(2).name == "t.json"  # the merged file, unless --output
    assert tune.parse_args(["--merge", "a.json", "-o", "b.json"]).destination(2).name == "b.json"


@pytest.mark.parametrize("argv", [["-f", "1"], ["-b", "2M", "-e", "1M"], ["-b", "0"],
                                  ["--reps", "0"], ["-e", "lots"]])
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        tune.parse_args(argv)
    assert exc.value.code == 2 and "error" in capsys.readouterr().err


def test_candidates():
    assert tune.candidates(True) == auto_candidates()
    assert tune.candidates(False) == ("ring",)  # "mpi" is no candidate of auto


def row(algo, size, time_us, status="ok") -> Row:
    return Row(size, size // 4, "float32", "sum", algo, "-", "out", 4, status,
               "OK" if status == "ok" else "-", time_us=time_us if status == "ok" else None)


ROWS = [row("nccl", 1024, 30), row("oneshot", 1024, 10), row("twoshot", 1024, 20),
        row("ring", 1024, 140),
        row("nccl", 1 << 20, 40), row("oneshot", 1 << 20, 60), row("twoshot", 1 << 20, 35),
        row("ring", 1 << 20, 150),
        row("nccl", 1 << 30, 4500), row("oneshot", 1 << 30, None, "inapplicable"),
        row("twoshot", 1 << 30, 5000), row("ring", 1 << 30, 4400), row("nccl-ring", 1 << 30, 1)]


def test_timings_keep_timed_candidates_only():
    times = tune.timings(ROWS, 4)
    assert (4, 1 << 30, "oneshot", None) not in times and len(times) == 11
    assert (4, 1024, "oneshot", pytest.approx(10e-6)) in times
    assert all(a != "nccl-ring" for _, _, a, _ in times)


RUN = {"machine": "node: 4 x NVIDIA H200", "measured": "2025-01-01T00:00:00+00:00", "mode": "gpu"}


def test_table_from_rows_and_its_file(tmp_path):
    table = tune.make_table(tune.timings(ROWS, 4), 4, RUN)
    assert table.tables == {4: ((1024, "oneshot"), (1 << 20, "twoshot"), (None, "ring"))}
    assert table.machine == RUN["machine"] and table.meta["runs"] == {"4": RUN}
    assert (table.meta["dtype"], table.meta["op"]) == ("float32", "sum")
    path = tune.write_table(tmp_path / "t.json", table)
    assert load(path) == table and not (tmp_path / "t.json.tmp").exists()
    text = path.read_text()
    # Format 2 (format 1 had '"4": [[1024, "oneshot"], ...]'): the entries are the eager ones.
    assert json.loads(text)["tables"]["4"] == {"eager": [[1024, "oneshot"], [1048576, "twoshot"],
                                                         [None, "ring"]]}
    assert tune.table_lines(table.tables[4]) == [
        "up to 1 KiB        oneshot", "up to 1 MiB        twoshot", "above 1 MiB        ring"]
    assert tune.table_lines(((None, "ring"),)) == ["every size         ring"]


def test_merge_keeps_other_rank_counts_and_replaces_this_one():
    base = parse({"format": 1, "machine": "old", "measured": "then", "dtype": "float32",
                  "op": "sum", "runs": {"2": {"mode": "gpu"}, "4": {"mode": "gpu"}},
                  "tables": {"2": [[None, "ring"]], "4": [[None, "nccl"]]}})
    merged = tune.make_table(tune.timings(ROWS, 4), 4, RUN, base)
    assert merged.tables[2] == ((None, "ring"),) and merged.tables[4][0] == (1024, "oneshot")
    assert merged.meta["runs"]["2"] == {"mode": "gpu"} and merged.meta["runs"]["4"] == RUN
    assert parse(json.loads(tune.table_json(merged))) == merged
    assert tune.merge_problem(base, "gpu") == ""
    assert "measured on the GPU transport" in tune.merge_problem(base, "host")
    assert tune.merge_problem(None, "host") == ""
    assert tune.merge_problem(TuningTable({}), "host") == ""  # the shipped file: no runs
    with pytest.raises(ValueError):
        tune.make_table([], 4, RUN)


def test_destination_checked_before_measuring(tmp_path):
    assert tune.destination_problem(tune.parse_args(["-o", str(tmp_path / "t.json")]), 2) == \
        ("", None)
    problem, _ = tune.destination_problem(tune.parse_args(["--merge", str(tmp_path / "no")]), 2)
    assert "no such file" in problem and "drop --merge" in problem
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": 1, "tables": {"4": [[1, "gloo"]]}}')
    problem, _ = tune.destination_problem(tune.parse_args(["--merge", str(bad)]), 2)
    assert "not a tuning table" in problem and "gloo" in problem
    problem, _ = tune.destination_problem(tune.parse_args(["-o", str(tmp_path / "x" / "t")]), 2)
    assert "cannot write into" in problem


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_serial_run_on_the_host(tmp_path, capsys):
    path = tmp_path / "t.json"
    status = tune.main(["--host", "-b", "1K", "-e", "4K", "--time-budget", "0.003", "--reps", "2",
                        "-o", str(path), "--progress", "off"])
    out = capsys.readouterr().out
    assert status == 0
    table = load(path)
    assert table.tables == {1: ((None, "ring"),)} and table.meta["runs"]["1"]["mode"] == "host"
    assert "every size         ring" in out and f"wrote {path}" in out


# -- eager and graph entries, machine labels, the per-user destination --------------------------

KEY = MachineKey("NVIDIA H200", 4, "nvlink")
GRAPH_ROWS = [row("nccl", 1024, 9), row("oneshot", 1024, 7), row("twoshot", 1024, 11),
              row("nccl", 1 << 20, 16), row("oneshot", 1 << 20, 19), row("twoshot", 1 << 20, 17),
              row("nccl", 1 << 30, 4400), row("twoshot", 1 << 30, 4700)]


def test_a_run_makes_eager_and_graph_entries_labelled_with_its_machine(tmp_path):
    table = tune.make_table(tune.timings(ROWS, 4), 4, RUN, graph_times=tune.timings(GRAPH_ROWS, 4),
                            key=KEY)
    assert table.tables[4] == ((1024, "oneshot"), (1 << 20, "twoshot"), (None, "ring"))
    assert table.graph[4] == ((1024, "oneshot"), (None, "nccl"))
    assert (table.gpu, table.link) == ("NVIDIA H200", "nvlink") and table.covers(KEY)
    path = tune.write_table(tmp_path / "t.json", table)
    assert load(path) == table
    assert ('  "4": {\n   "eager": [[1024, "oneshot"], [1048576, "twoshot"], [null, "ring"]],\n'
            '   "graph": [[1024, "oneshot"], [null, "nccl"]]\n  }') in path.read_text()
    assert tunefile.ladder_lines(table, 4) == [
        "eager calls:", "  up to 1 KiB        oneshot", "  up to 1 MiB        twoshot",
        "  above 1 MiB        ring", "CUDA graph replays:", "  up to 1 KiB        oneshot",
        "  above 1 KiB        nccl"]
    eager_only = tune.make_table(tune.timings(ROWS, 4), 4, RUN, key=KEY)
    assert tunefile.ladder_lines(eager_only, 4)[-1] == "CUDA graph replays: as eager calls (no graph entries)"


def test_merging_keeps_labels_and_refuses_another_machine():
    base = tune.make_table(tune.timings(ROWS, 4), 4, RUN, graph_times=tune.timings(GRAPH_ROWS, 4),
                           key=KEY)
    two = [(2, n, a, t) for _, n, a, t in tune.timings(ROWS, 4)]
    merged = tune.make_table(two, 2, RUN, base, key=KEY._replace(ranks=2))
    assert sorted(merged.tables) == [2, 4] and merged.graph.keys() == {4}  # no graph sweep for 2
    assert (merged.gpu, merged.link) == ("NVIDIA H200", "nvlink")
    again = tune.make_table(tune.timings(ROWS, 4), 4, RUN, merged, key=KEY)
    assert again.graph.keys() == set()  # this run replaces the 4-rank table, graph entries too
    assert tune.merge_problem(base, "gpu", KEY._replace(ranks=2)) == ""
    assert "GPU model 'NVIDIA H200', this machine's is 'NVIDIA H100'" in \
        tune.merge_problem(base, "gpu", KEY._replace(gpu="NVIDIA H100"))
    assert "link 'nvlink', this machine's is 'pcie'" in \
        tune.merge_problem(base, "gpu", KEY._replace(link="pcie"))
    old = parse({"format": 1, "tables": {"2": [[None, "ring"]]}})  # any machine: stays so
    assert tune.merge_problem(old, "gpu", KEY) == ""
    assert tune.make_table(tune.timings(ROWS, 4), 4, RUN, old, key=KEY).gpu is None


def test_graph_candidates_are_the_capturable_ones():
    assert "ring" not in tune.graph_candidates(True) and set(tune.graph_candidates(True)) < \
        set(tune.candidates(True))
    assert tune.graph_candidates(False) == ()


def test_mpiring_tune_writes_to_the_users_table(tmp_path, monkeypatch):
    from mpiring.auto import tuning

    monkeypatch.setenv(tuning.TUNING_DIR, str(tmp_path / "deep" / "dir"))
    o = tune.parse_args([], prog="mpiring-tune", per_user=True)
    assert o.per_user and o.prog == "mpiring-tune"
    assert o.destination(4, KEY) == tmp_path / "deep" / "dir" / "nvidia-h200-4x-nvlink.json"
    assert o.folder() == tmp_path / "deep" / "dir"
    assert tune.destination_problem(o, 4) == ("", None) and o.folder().is_dir()  # made
    o = tune.parse_args(["-o", str(tmp_path / "x.json")], prog="mpiring-tune", per_user=True)
    assert o.destination(4, KEY) == tmp_path / "x.json"
    assert tune.parse_args([]).destination(4, KEY).name == "mpiring-tuning-4.json"  # the old command
    # Under an SM budget, the budget's own table (the plain one, for communicators without, stays).
    o = tune.parse_args(["--sm-budget", "16"], prog="mpiring-tune", per_user=True)
    assert o.destination(4, KEY) == tmp_path / "deep" / "dir" / "nvidia-h200-4x-nvlink-sm16.json"
    host = MachineKey("none", 2, "none")  # host arrays run no kernels: no budget in the name
    assert o.destination(2, host) == tmp_path / "deep" / "dir" / "none-2x-none.json"
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(tuning.TUNING_DIR, str(blocked / "sub"))
    problem, _ = tune.destination_problem(tune.parse_args([], per_user=True), 4)
    assert "cannot make the tuning directory" in problem and "MPIRING_TUNING_DIR" in problem


def test_help_says_where_the_table_goes(capsys):
    with pytest.raises(SystemExit):
        tune.parse_args(["--help"], prog="mpiring-tune", per_user=True)
    out = capsys.readouterr().out
    assert "usage: mpiring-tune" in out and "MPIRING_TUNING_DIR" in out and "--show" in out


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_serial_show(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("MPIRING_TUNING_DIR", str(tmp_path))
    assert tune.main(["--show", "--host", "--progress", "off"], prog="mpiring-tune",
                     per_user=True) == 0
    out = capsys.readouterr().out
    assert "# auto: 1 x none, none: no GPU: auto runs the ring on host arrays" in out


# -- --overlap: the smallest makespan beside a GEMM ---------------------------------------------


def spanned(algo, size, time_us, t_both_us, status="ok") -> Row:
    """A row of the overlap sweep: its time alone and its makespan T_both beside the GEMMs."""
    r = row(algo, size, time_us, status)
    r.t_both_us = t_both_us
    return r


# Alone the fastest are oneshot (1 KiB), twoshot (1 MiB) and nccl (1 GiB); beside the GEMM the
# smallest makespans are nccl, ring and ring: what hides best is not what is fastest alone.
OVERLAP_ROWS = [spanned("nccl", 1024, 30, 900), spanned("oneshot", 1024, 10, 950),
                spanned("twoshot", 1024, 20, 990), spanned("ring", 1024, 140, 1200),
                spanned("nccl", 1 << 20, 40, 2100), spanned("oneshot", 1 << 20, 60, 2500),
                spanned("twoshot", 1 << 20, 35, 2050), spanned("ring", 1 << 20, 150, 1900),
                spanned("nccl", 1 << 30, 4400, 9000), spanned("twoshot", 1 << 30, 5000, 9500),
                spanned("ring", 1 << 30, 4500, 7000),
                spanned("oneshot", 1 << 30, None, None, "inapplicable"),
                spanned("ring", 4 << 30, 9000, None),  # timed alone, makespan not measured
                spanned("nccl-ring", 1 << 30, 1, 1)]  # no candidate of auto


def test_makespan_timings_are_the_t_both_of_measured_candidates():
    times = tunefile.makespan_timings(OVERLAP_ROWS, 4)
    assert len(times) == 11 and (4, 1024, "nccl", pytest.approx(900e-6)) in times
    assert not any(n == 4 << 30 or a in ("nccl-ring", "oneshot") and n == 1 << 30
                   for _, n, a, _ in times)
    assert tune_overlap.unmeasured(OVERLAP_ROWS, times) == ["4 GiB"]


def test_the_overlap_ladder_keeps_the_smallest_makespan(tmp_path):
    table = tune.make_table(tune.timings(ROWS, 4), 4, RUN, graph_times=tune.timings(GRAPH_ROWS, 4),
                            key=KEY, overlap_times=tunefile.makespan_timings(OVERLAP_ROWS, 4))
    assert table.tables[4] == ((1024, "oneshot"), (1 << 20, "twoshot"), (None, "ring"))
    assert table.overlap[4] == ((1024, "nccl"), (None, "ring"))
    assert table.choose(4, 1 << 20) == "twoshot" and table.choose(4, 1 << 20, overlap=True) == "ring"
    assert table.choose(4, 1 << 20, graph=True, overlap=True) == "nccl"  # ring cannot be captured
    path = tune.write_table(tmp_path / "t.json", table)
    assert load(path) == table
    assert ('   "graph": [[1024, "oneshot"], [null, "nccl"]],\n'
            '   "overlap": [[1024, "nccl"], [null, "ring"]]\n  }') in path.read_text()
    assert table.overlap_from == {}  # the sweep beside the GEMM began where the eager one did
    assert tunefile.ladder_lines(table, 4)[-3:] == [
        "beside a GEMM (overlap=True, smallest makespan):", "  up to 1 KiB        nccl",
        "  above 1 KiB        ring"]
    plain = tune.make_table(tune.timings(ROWS, 4), 4, RUN, key=KEY)
    assert plain.overlap == {} and not any("GEMM" in line for line in tunefile.ladder_lines(plain, 4))


def test_a_sweep_beside_a_gemm_that_began_above_the_eager_one_serves_from_its_smallest_size():
    late = [t for t in tunefile.makespan_timings(OVERLAP_ROWS, 4) if t[1] >= 1 << 20]
    table = tune.make_table(tune.timings(ROWS, 4), 4, RUN, key=KEY, overlap_times=late)
    assert table.overlap_from == {4: 1 << 20} and table.overlap[4] == ((None, "ring"),)
    assert table.choose(4, 1024, overlap=True) == table.choose(4, 1024) == "oneshot"
    assert table.choose(4, 1 << 20, overlap=True) == "ring"
    assert tunefile.ladder_lines(table, 4)[-2:] == [
        "beside a GEMM (overlap=True, smallest makespan, from 1 MiB; below it as eager calls):",
        "  every size         ring"]
    assert parse(json.loads(tune.table_json(table))) == table


def test_merging_keeps_other_counts_overlap_entries_and_replaces_this_ones():
    base = tune.make_table(tune.timings(ROWS, 4), 4, RUN, key=KEY,
                           overlap_times=tunefile.makespan_timings(OVERLAP_ROWS, 4))
    two = [(2, n, a, t) for _, n, a, t in tunefile.makespan_timings(OVERLAP_ROWS, 4)
           if n != 1024]
    merged = tune.make_table([(2, 1, "nccl", 1.0)], 2, RUN, base, key=KEY._replace(ranks=2),
                             overlap_times=two)
    assert merged.overlap == {4: base.overlap[4], 2: ((None, "ring"),)}
    assert merged.overlap_from == {2: 1 << 20}  # 2 ranks' makespans start at 1 MiB, above 1 B
    assert merged.choose(2, 1024, overlap=True) == merged.choose(2, 1024) == "nccl"  # below: eager
    again = tune.make_table(tune.timings(ROWS, 4), 4, RUN, merged, key=KEY)  # no --overlap now
    assert again.overlap == {2: ((None, "ring"),)}  # the 4-rank table is replaced, overlap too
    assert again.overlap_from == {2: 1 << 20}
    assert parse(json.loads(tune.table_json(merged))) == merged


class _Reporter:
    def __init__(self):
        self.errors = []

    def error(self, text):
        self.errors.append(text)


def test_the_overlap_sweep_gives_its_times_and_run_metadata():
    from types import SimpleNamespace

    sweep = SimpleNamespace(rows=OVERLAP_ROWS, sizes=[1024, 1 << 20, 1 << 30, 4 << 30],
                            algos=["nccl", "oneshot", "twoshot", "ring"],
                            meta={"date": "2026-01-02T03:04:05+00:00"},
                            workload="gemm: 8192x8192 float16 GEMMs (CuPy)")
    rep = _Reporter()
    times, info = tune_overlap.finish(sweep, 4, rep, "mpiring.tune")
    assert times == tunefile.makespan_timings(OVERLAP_ROWS, 4)
    assert info["overlap measured"] == "2026-01-02T03:04:05+00:00"
    assert info["overlap sizes"] == "1 KiB .. 4 GiB (4 sizes)"
    assert info["overlap workload"].startswith("gemm: 8192x8192") and "T_both" in info["overlap metric"]
    assert len(rep.errors) == 1 and "no makespan measured at 4 GiB" in rep.errors[0]
    assert tune_overlap.finish(None, 4, rep, "x") == ([], {}) and len(rep.errors) == 1


def test_overlap_option_and_the_bench_options_of_its_sweep(capsys):
    assert not tune.parse_args([]).overlap and tune.parse_args(["--overlap"]).overlap
    bench = tune_overlap.bench_options(tune.parse_args(["--overlap", "-b", "1M"]).bench)
    assert (bench.overlap, bench.overlap_shapes, bench.timing) == ("gemm", ("gemm",), "eager")
    assert bench.algos == auto_candidates() and bench.minbytes == 1 << 20
    assert not bench.overlap_slowdowns  # the makespan alone: slowdowns would double the sweep
    assert bench.sm_budget is None
    assert tune.parse_args(["--overlap", "--sm-budget", "16"]).bench.sm_budget == 16
    with pytest.raises(SystemExit):
        tune.parse_args(["--sm-budget", "0"])
    with pytest.raises(SystemExit) as exc:
        tune.parse_args(["--overlap", "--show"])
    assert exc.value.code == 2 and "--show measures nothing" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tune.parse_args(["--help"])
    assert "--overlap" in capsys.readouterr().out


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_serial_overlap_is_refused_on_the_host_before_measuring(tmp_path, capsys):
    path = tmp_path / "t.json"
    status = tune.main(["--host", "--overlap", "-b", "1K", "-e", "4K", "--time-budget", "0.003",
                        "-o", str(path), "--progress", "off"])
    captured = capsys.readouterr()
    assert status == 3 and not path.exists()
    assert "--overlap needs GPUs" in captured.err and "--host was given" in captured.err
    assert "mpiring tuning" not in captured.out  # no sweep started


# -- mpiring-tune without the bench extra -------------------------------------------------------

# What a child runs first: rich and matplotlib (the bench extra) cannot be imported.
WITHOUT_BENCH_EXTRA = "import sys; sys.modules.update(dict.fromkeys(['rich', 'matplotlib'], None)); "


def without_bench_extra(code: str, tmp_path) -> subprocess.CompletedProcess[str]:
    """``python -c code`` where rich and matplotlib do not import, outside any MPI job."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "MPIR_", "HYDRA_", "MPICH_INTERFACE", "OMPI_"))}
    env["MPIRING_TUNING_DIR"] = str(tmp_path / "user")
    return subprocess.run([sys.executable, "-c", WITHOUT_BENCH_EXTRA + code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_tuner_imports_and_helps_without_rich_and_matplotlib(tmp_path):
    done = without_bench_extra("import mpiring.bench.tune as t; sys.exit(t.main(['--help']))", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "usage: mpiring-tune" in done.stdout and "--overlap" in done.stdout


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_the_tuner_runs_without_rich_and_matplotlib(tmp_path):
    """A whole run on the host, printed in plain text (mpiring.bench.plain), the table written."""
    path = tmp_path / "t.json"
    done = without_bench_extra(
        "import mpiring.bench.tune as t, mpiring.bench.report as r; assert not r.HAVE_RICH; "
        f"sys.exit(t.main(['--host', '-b', '1K', '-e', '4K', '--time-budget', '0.003', "
        f"'--reps', '2', '-o', {str(path)!r}, '--progress', 'on']))", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert load(path).tables == {1: ((None, "ring"),)}
    out = done.stdout
    assert "mpiring tuning: auto's candidates, eager calls" in out and "every size         ring" in out
    assert "busbw" in out and "#wrong" in out  # the table's header
    assert any(line.lstrip().startswith("1 KiB") and "ring" in line for line in out.splitlines()), out
    assert f"wrote {path}" in out and "\x1b[" not in out  # no colours, no live bar


def test_a_retune_drops_this_rank_counts_stale_overlap_start():
    """A table whose overlap entries served from 1 MiB, re-tuned for the same rank count without
    --overlap (no overlap entries: no start either; a start without entries is refused when
    read) or with a sweep from the first size (it serves every size now)."""
    late = [t for t in tunefile.makespan_timings(OVERLAP_ROWS, 4) if t[1] >= 1 << 20]
    base = tune.make_table(tune.timings(ROWS, 4), 4, RUN, key=KEY, overlap_times=late)
    assert base.overlap_from == {4: 1 << 20}
    plain = tune.make_table(tune.timings(ROWS, 4), 4, RUN, base, key=KEY)
    assert (plain.overlap, plain.overlap_from) == ({}, {})
    assert parse(json.loads(tune.table_json(plain))) == plain
    full = tune.make_table(tune.timings(ROWS, 4), 4, RUN, base, key=KEY,
                           overlap_times=tunefile.makespan_timings(OVERLAP_ROWS, 4))
    assert full.overlap_from == {} and full.choose(4, 1024, overlap=True) == "nccl"
