"""The shipped tuning table is what the committed results say: derived again from results/*.csv
with the tuner's own code (tools/shipped.py), it must equal mpiring/data/tuning-h200.json byte
for byte, metadata included. If this fails after new results or a new auto candidate, run
``python -m tools.shipped`` from the repository root and commit the file."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from mpiring.algorithms import auto_candidates
from mpiring.auto import table as tuning
from mpiring.bench.results import read_csv, write_csv
from mpiring.bench.tunefile import table_json
from tools import shipped

ROOT = Path(__file__).resolve().parents[2]
NOISE = tuning.NOISE
# The sizes of each ladder, 1 KiB to 8 GiB by factors of 2 (24), but the 4-rank graph ladder: no
# committed run measured 2 MiB with the kernels it ships (see the overlay test).
LADDER_SIZES = {(2, "eager"): 24, (2, "graph"): 24, (4, "eager"): 24, (4, "graph"): 23}
# The 4-GPU graph run of 263e71e, stopped by SIGTERM in 512 KiB (its JSON: complete false):
# shipped before the a280745 runs, kept for what a stopped run supplies.
STOPPED_GRAPH_RUN = shipped.Source("results/h200x4-graph-small-263e71e.csv")


def test_the_shipped_file_is_derived_from_the_committed_results(tool) -> None:
    text = (ROOT / shipped.TARGET).read_text()
    assert table_json(shipped.build(ROOT)) == text, (
        "mpiring/data/tuning-h200.json differs from what results/ gives: run "
        "python -m tools.shipped and commit the file")
    assert shipped.main(["--root", str(ROOT), "--check"]) == 0
    done = tool("shipped", ["--check"], limit=120)  # as a user runs it, from the root
    assert done.returncode == 0 and "matches the results" in done.stdout, done.stdout + done.stderr


def test_what_the_shipped_file_says() -> None:
    table = tuning.load()  # the shipped file
    assert (table.gpu, table.link, sorted(table.tables), sorted(table.graph)) == \
        ("NVIDIA H200", "nvlink", [2, 4], [2, 4])
    for nranks, ladders in shipped.SOURCES.items():
        runs = table.meta["runs"][str(nranks)]
        for kind, overlaid in zip(("eager", "graph"), ladders, strict=True):
            sources = runs[kind]["sources"]
            assert [s["source"] for s in sources] == [source.csv for source in overlaid]
            for source in sources:
                assert source["machine"] == f"vm: {nranks} x NVIDIA H200"
                assert source["measured"].startswith("2026-11-")
                assert source["commit"] != "unknown" and source["sm_budget"] is None
            assert runs[kind]["sizes"] == f"1 KiB .. 8 GiB ({LADDER_SIZES[nranks, kind]} sizes)"
        assert "ring: not measured (cannot be captured into a CUDA graph)" in runs["graph"]["gaps"]
        gaps = runs["graph"]["gaps"]
        assert any(g.startswith("sizes above ") and g.endswith(" winner holds)") for g in gaps)
    assert "NVLink" in table.meta["link evidence"]
    assert table.measured == "2026-11-27T19:03:37+00:00"  # the newest source (4 ranks' eager 8-256 MiB)


def test_the_small_runs_overlay_the_full_ones_and_say_which_sizes_each_supplied() -> None:
    runs = tuning.load().meta["runs"]
    eager4 = runs["4"]["eager"]["sources"]
    assert [s["supplied"] for s in eager4] == ["1 KiB .. 4 MiB (13 sizes)", "8 MiB .. 256 MiB (6 sizes)",
                                               "512 MiB .. 8 GiB (5 sizes)"]
    assert [s["commit"] for s in eager4[:2]] == ["edc9fe7", "3aabc14"]
    assert "not taken" not in eager4[0] and "not taken" not in eager4[1]
    assert eager4[2]["commit"].startswith("785a13a (named by the first line of h200x4-785a13a.log")
    assert eager4[2]["not taken"] == [
        "1 KiB to 4 MiB (13 sizes): from results/h200x4-small-edc9fe7.csv",
        "8 MiB to 256 MiB (6 sizes): from results/h200x4-mid-3aabc14.csv"]
    small, middle, full = runs["4"]["graph"]["sources"]
    assert (small["supplied"], middle["supplied"], full["supplied"]) == (
        "1 KiB .. 512 KiB (10 sizes)", "1 MiB .. 4 MiB (2 sizes)", "8 MiB .. 8 GiB (11 sizes)")
    # The -f 2 run at 3aabc14 was stopped in 1 MiB: the -f 4 run at edc9fe7 (the same kernels)
    # supplies 1 and 4 MiB, and 2 MiB is measured by neither.
    assert small["stopped"] == "by SIGTERM in 1 MiB; it was to measure up to 4 MiB"
    assert (small["commit"], middle["commit"]) == ("3aabc14", "edc9fe7")
    assert "2 MiB: above the largest size taken from it; no source supplies it" in full["not taken"]
    assert "stopped" not in full and "stopped" not in middle and "stopped" not in eager4[0]
    small2, full2 = runs["2"]["graph"]["sources"]
    assert (small2["supplied"], full2["supplied"]) == ("1 KiB .. 1 MiB (11 sizes)",
                                                       "2 MiB .. 8 GiB (13 sizes)")
    assert small2["commit"] == "682f42d" and "stopped" not in small2


def times(path: Path) -> dict[int, dict[str, float]]:
    """Per size, each auto candidate's time_us (read independently of the tuner)."""
    out: dict[int, dict[str, float]] = {}
    with path.open() as f:
        for rec in csv.DictReader(f):
            if rec["status"] == "ok" and rec["algo"] in auto_candidates():
                out.setdefault(int(rec["size_bytes"]), {})[rec["algo"]] = float(rec["time_us"])
    return out


def fastest(path: Path) -> dict[int, str]:
    """Per size, the auto candidate with the smallest time_us."""
    return {size: min(at, key=at.__getitem__) for size, at in times(path).items()}


def measured(overlaid: shipped.Overlay) -> dict[int, dict[str, float]]:
    """Per size, the candidates' times in the one source whose span holds it: above the
    previous source's limit, up to its own (independently of tools.shipped.overlay)."""
    out: dict[int, dict[str, float]] = {}
    below = 0
    for source in overlaid:
        for size, at in times(ROOT / source.csv).items():
            if below < size and (source.up_to is None or size <= source.up_to):
                assert size not in out, f"{size} bytes from two sources"
                out[size] = at
        below = source.up_to or 0
    return out


@pytest.mark.parametrize("nranks", sorted(shipped.SOURCES))
def test_at_every_measured_size_the_table_picks_the_fastest_of_its_source_or_one_within_noise(
        nranks: int) -> None:
    """The fastest, or a candidate within NOISE of it (the winner on both sides), never at the
    first or last size."""
    table = tuning.load()
    for graph, overlaid in zip((False, True), shipped.SOURCES[nranks], strict=True):
        sizes = measured(overlaid)
        assert len(sizes) == LADDER_SIZES[nranks, "graph" if graph else "eager"]  # every size once
        for size, at in sizes.items():
            chosen, best = table.choose(nranks, size, graph=graph), min(at.values())
            assert chosen in at and at[chosen] <= (1 + NOISE) * best, (size, chosen, at)
            if size in (min(sizes), max(sizes)):
                assert at[chosen] == best


def test_the_4_rank_small_sizes_take_the_new_runs_winners() -> None:
    """At 2-4 KiB and 32 KiB the 785a13a run's eager winner was two-shot; the edc9fe7 run
    times oneshot-ll at 6.5-7.2 µs there, two-shot at 13.7-14.2 µs, and the table follows it."""
    table = tuning.load()
    old, new = fastest(ROOT / "results/h200x4-785a13a.csv"), shipped.SOURCES[4][0][0]
    assert new.csv == "results/h200x4-small-edc9fe7.csv"
    for size in (2048, 4096, 32768):
        assert old[size] == "twoshot" and table.choose(4, size) == "oneshot-ll"


def test_gaps_name_missing_candidates_and_sizes(tmp_path: Path) -> None:
    rows = read_csv(ROOT / "results/h200x2-graph.csv")
    assert shipped.gaps(rows, graph=True) == [
        "ring: not measured (cannot be captured into a CUDA graph)",
        "oneshot: refuses 4 MiB, 16 MiB, 64 MiB: above its size limit",
        "oneshot-ll: not measured",  # newer than the committed results
        "sizes above 64 MiB: not measured (the 64 MiB winner holds)"]
    thinned = [r for r in rows if not (r.algo == "nccl" and r.size_bytes == 4096)
               and r.algo != "twoshot"]
    gaps = shipped.gaps(thinned, graph=True)
    assert "nccl: no timed point at 4 KiB" in gaps and "twoshot: not measured" in gaps


def copy_sources(tmp_path: Path, nranks: int = 2) -> None:
    """A rank count's eager, graph and makespan results (CSV, JSON and log) into
    ``tmp_path/results``."""
    (tmp_path / "results").mkdir(exist_ok=True)
    csvs = [source.csv for overlaid in shipped.SOURCES[nranks] for source in overlaid]
    if nranks in shipped.OVERLAP_SOURCES:
        csvs.append(shipped.OVERLAP_SOURCES[nranks])
    for csv_name in csvs:
        for suffix in (".csv", ".json", ".log"):
            name = csv_name.replace(".csv", suffix)
            shutil.copy(ROOT / name, tmp_path / name)


def test_a_csv_of_another_kind_is_refused(tmp_path: Path) -> None:
    copy_sources(tmp_path)
    sources = {4: shipped.SOURCES[2]}  # 2-rank files as 4 ranks
    with pytest.raises(ValueError, match="on 4 ranks, this file holds"):
        shipped.build(tmp_path, sources)
    built = shipped.build(tmp_path, {2: sources[4]})
    assert built.tables[2] == tuning.load().tables[2]


def test_every_overlaid_csv_is_checked_to_be_of_the_kind_of_its_ladder(tmp_path: Path) -> None:
    """The second source of an overlay is checked as the first: a 2-rank CSV under the 4-rank
    small run, or an eager run among the graph sources, is refused."""
    copy_sources(tmp_path, 2)
    copy_sources(tmp_path, 4)
    eager4, graph4 = shipped.SOURCES[4]
    two_rank_under = (eager4[0], shipped.Source("results/h200x2-7230227.csv"))
    with pytest.raises(ValueError, match="h200x2-7230227.csv: a tuning table is made of float32 sum "
                                         "out-of-place points on 4 ranks"):
        shipped.build(tmp_path, {4: (two_rank_under, graph4)})
    eager_in_graph = (graph4[0], shipped.Source("results/h200x4-785a13a.csv"))
    with pytest.raises(ValueError, match="h200x4-785a13a.csv: timed 'eager' calls, which cannot "
                                         "make the graph entries"):
        shipped.build(tmp_path, {4: (eager4, eager_in_graph)})
    path = tmp_path / "results/h200x4-785a13a.json"  # one source under an SM budget
    doc = json.loads(path.read_text())
    doc["metadata"]["sm_budget"] = 16
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="4 ranks, eager: the sources were measured under "
                                         "different SM budgets"):
        shipped.build(tmp_path, {4: (eager4, graph4)})


def test_a_size_comes_from_one_csv_only(tmp_path: Path) -> None:
    """Below a source's limit a later CSV's points count for nothing, above it its own count
    for nothing: making them absurdly fast (the ring at 1 ns) changes no pick."""
    copy_sources(tmp_path, 4)
    eager, graph = shipped.SOURCES[4]
    small, middle, full = eager
    low, high = small.up_to, middle.up_to
    assert low is not None and high is not None
    outside = {small.csv: lambda size: size > low, middle.csv: lambda size: not low < size <= high,
               full.csv: lambda size: size <= high}
    for source, out in outside.items():
        rows = read_csv(tmp_path / source)
        for r in rows:
            if r.algo == "ring" and r.timed and out(r.size_bytes):
                r.time_us = 1e-3
        write_csv(tmp_path / source, rows)
    built = shipped.build(tmp_path, {4: (eager, graph)})
    assert built.tables[4] == tuning.load().tables[4]
    assert all(built.choose(4, size) != "ring" for size in (1024, low, 2 * low, high))


def test_overlay_takes_each_size_from_one_source() -> None:
    first, second = shipped.Source("a.csv", 4096), shipped.Source("b.csv")
    assert shipped.overlay([(first, [1024, 2048, 4096]), (second, [1024, 4096, 8192, 16384])]) == \
        {1024: "a.csv", 2048: "a.csv", 4096: "a.csv", 8192: "b.csv", 16384: "b.csv"}
    assert shipped.overlay([(second, [1024, 2048])]) == {1024: "b.csv", 2048: "b.csv"}
    middle = shipped.Source("m.csv", 8192)
    assert shipped.overlay([(first, [1024, 4096]), (middle, [1024, 8192, 16384]),
                            (second, [8192, 16384])]) == \
        {1024: "a.csv", 4096: "a.csv", 8192: "m.csv", 16384: "b.csv"}


@pytest.mark.parametrize("sources, message", [
    ([(shipped.Source("a.csv", 4096), [1024, 2048]), (shipped.Source("b.csv"), [8192])],
     "a.csv: sizes up to 4 KiB asked, but its run measured in full only 1 KiB, 2 KiB"),
    ([(shipped.Source("a.csv"), [1024]), (shipped.Source("b.csv"), [8192])],
     "b.csv: follows a.csv, which has no limit and leaves it no size"),
    ([(shipped.Source("a.csv", 4096), [4096]), (shipped.Source("b.csv", 2048), [2048, 8192])],
     "b.csv: its limit 2 KiB is not above the previous source's, 4 KiB"),
    ([(shipped.Source("a.csv", 4096), [4096]), (shipped.Source("b.csv"), [1024, 4096])],
     r"b.csv: supplies no size \(it measured in full 1 KiB, 4 KiB"),
    ([(shipped.Source("a.csv", 4096), [4096]), (shipped.Source("a.csv"), [8192])],
     "a.csv: named twice in one ladder"),
])
def test_overlays_that_leave_a_size_to_no_csv_or_two_are_refused(sources, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        shipped.overlay(sources)


def test_a_stopped_run_supplies_only_the_sizes_it_measured_in_full(tmp_path: Path) -> None:
    """The 4-GPU graph run was stopped in 512 KiB (its JSON: complete false): a limit of
    512 KiB or 1 MiB is refused, and without a limit it supplies 1 KiB to 256 KiB only, and
    says why 512 KiB is not used."""
    copy_sources(tmp_path, 4)
    small, full = STOPPED_GRAPH_RUN, shipped.Source("results/h200x4-graph-785a13a.csv")
    for suffix in (".csv", ".json", ".log"):
        shutil.copy(ROOT / small.csv.replace(".csv", suffix), tmp_path / small.csv.replace(".csv", suffix))
    eager = shipped.SOURCES[4][0]
    stopped = read_csv(ROOT / small.csv)
    assert max(r.size_bytes for r in stopped) == 512 << 10  # the CSV holds 512 KiB rows
    meta = json.loads((ROOT / small.csv.replace(".csv", ".json")).read_text())["metadata"]
    assert shipped.sizes_in_full(stopped, meta)[-1] == 256 << 10
    for limit in (512 << 10, 1 << 20):
        with pytest.raises(ValueError, match=f"{small.csv}: sizes up to .* asked, but its run "
                                             r"measured in full only 1 KiB to 256 KiB \(9 sizes\)"):
            shipped.build(tmp_path, {4: (eager, (small._replace(up_to=limit), full))})
    alone = shipped.build(tmp_path, {4: (eager, (shipped.Source(small.csv),))})
    source = alone.meta["runs"]["4"]["graph"]["sources"][0]
    assert source["supplied"] == "1 KiB .. 256 KiB (9 sizes)"
    assert source["not taken"] == ["512 KiB: measured in part (the run was stopped by SIGTERM "
                                   "there), so not used; no source supplies it"]
    assert alone.graph[4] == ((128 << 10, "oneshot-ll"), (None, "nccl"))  # nccl at 256 KiB
    gaps = alone.meta["runs"]["4"]["graph"]["gaps"]
    assert "sizes above 256 KiB: not measured (the 256 KiB winner holds)" in gaps


def test_the_commit_comes_from_the_log_only_where_the_results_record_none(tmp_path: Path) -> None:
    copy_sources(tmp_path, 4)
    (tmp_path / "results/h200x4-785a13a.log").unlink()
    sources = shipped.build(tmp_path, {4: shipped.SOURCES[4]}).meta["runs"]["4"]["eager"]["sources"]
    assert [s["commit"] for s in sources] == ["edc9fe7", "3aabc14", "unknown"]


# -- overlap entries: only from a committed makespan run of that machine and rank count ----------


def test_2_and_4_ranks_have_overlap_entries_from_their_makespan_runs(capsys) -> None:
    table = tuning.load()
    assert set(shipped.OVERLAP_SOURCES) == {2, 4} and set(table.overlap) == {2, 4}
    assert table.overlap[4] == ((None, "nccl"),)  # no mpiring row's makespan beat NCCL's there
    # the makespan runs start at 64 MiB: below, an overlapped call picks as any other
    assert table.overlap_from == {2: 64 << 20, 4: 64 << 20}
    for nranks in (2, 4):
        for size in (1024, 8192, 1 << 20, (64 << 20) - 1):
            for graph in (False, True):
                assert table.choose(nranks, size, graph=graph, overlap=True) == \
                    table.choose(nranks, size, graph=graph)
    assert table.choose(2, 8192, overlap=True) == "oneshot-ll"  # not the ring at 8 KiB
    run = table.meta["runs"]["2"]["overlap"]
    assert [s["source"] for s in run["sources"]] == [shipped.OVERLAP_SOURCES[2]]
    assert run["sizes"] == "64 MiB .. 1 GiB (3 sizes)" and run["sm_budget"] is None
    # every candidate serving 64 MiB to 1 GiB has its makespan at each size; the one-shots
    # refuse those sizes (above their size limit), and the gaps say so
    assert run["candidates"] == ["nccl", "ring", "twoshot"]
    refusal = "refuses every size measured, 64 MiB, 256 MiB, 1 GiB: above its size limit"
    assert run["gaps"] == [f"oneshot: {refusal}", f"oneshot-ll: {refusal}",
                           "sizes above 1 GiB: not measured (the 1 GiB winner holds)"]
    assert all(table.choose(2, size, overlap=True) in run["candidates"]
               for size in (64 << 20, 256 << 20, 8 << 30))
    assert shipped.overlap_gaps(table) == []
    assert shipped.main(["--root", str(ROOT), "--check"]) == 0
    assert "overlap: not measured" not in capsys.readouterr().out


def _makespan_results(tmp_path: Path) -> dict[int, tuple[str, str]]:
    """The 2-rank results in a new root, with a makespan run made of the eager CSV's rows:
    T_both favours the ring from 1 MiB on, NCCL below, and one-shot's makespan is missing."""
    copy_sources(tmp_path)
    eager = shipped.SOURCES[2][0][-1].csv  # the full 1 KiB to 8 GiB run
    shutil.copy(ROOT / eager.replace(".csv", ".json"), tmp_path / "results/h200x2-makespan.json")
    rows = read_csv(ROOT / eager)
    for r in rows:
        if r.timed and r.algo != "oneshot":
            favoured = "ring" if r.size_bytes >= 1 << 20 else "nccl"
            r.t_both_us = 1000.0 + r.size_bytes / 1e6 - (500.0 if r.algo == favoured else 0.0)
    write_csv(tmp_path / "results/h200x2-makespan.csv", rows)
    return {2: shipped.SOURCES[2]}


def test_a_makespan_run_gives_the_overlap_entries_and_says_where_from(tmp_path: Path) -> None:
    sources = _makespan_results(tmp_path)
    built = shipped.build(tmp_path, sources, {2: "results/h200x2-makespan.csv"})
    shipped_table = tuning.load()
    assert built.tables[2] == shipped_table.tables[2] and built.graph[2] == shipped_table.graph[2]
    assert built.overlap == {2: ((1 << 19, "nccl"), (None, "ring"))}
    assert built.choose(2, 1 << 30, overlap=True) == "ring"
    assert built.choose(2, 1 << 30, graph=True, overlap=True) == shipped_table.choose(2, 1 << 30, graph=True)
    run = built.meta["runs"]["2"]["overlap"]
    assert [s["source"] for s in run["sources"]] == ["results/h200x2-makespan.csv"]
    assert "T_both" in run["timing"]
    assert "oneshot: not measured" in run["gaps"] and "oneshot" not in run["candidates"]
    assert shipped.overlap_gaps(built) == []
    assert tuning.parse(json.loads(table_json(built))) == built
    # without the makespan run, the same results give the shipped 2-rank table, no overlap
    without = shipped.build(tmp_path, sources, {})
    assert without.overlap == {} and shipped.overlap_gaps(without) == [f"2 ranks: {shipped.OVERLAP_GAP}"]


def test_a_makespan_run_must_hold_makespans_of_a_rank_count_with_eager_results(tmp_path: Path) -> None:
    sources = _makespan_results(tmp_path)
    with pytest.raises(ValueError, match=r"makespan runs for \[4\] ranks"):
        shipped.build(tmp_path, sources, {4: "results/h200x2-makespan.csv"})
    with pytest.raises(ValueError, match="no candidate of auto's makespan was timed"):
        shipped.build(tmp_path, sources, {2: shipped.SOURCES[2][0][-1].csv})  # no t_both_us


def test_the_runs_record_the_sm_budget_and_one_table_serves_one_budget(tmp_path: Path) -> None:
    """A makespan run measured under ``--sm-budget 16`` (its JSON says so) is recorded as such,
    and cannot join eager and graph results measured without a budget."""
    sources = _makespan_results(tmp_path)
    meta_path = tmp_path / "results/h200x2-makespan.json"
    doc = json.loads(meta_path.read_text())
    assert shipped.build(tmp_path, sources, {2: "results/h200x2-makespan.csv"}).sm_budget(2) is None
    doc["metadata"]["sm_budget"] = 16  # what bench --sm-budget 16 writes
    meta_path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"2 ranks: the results were measured under different SM "
                                         r"budgets \{'eager': None, 'graph': None, 'overlap': 16\}"):
        shipped.build(tmp_path, sources, {2: "results/h200x2-makespan.csv"})
    for source in (s for overlaid in shipped.SOURCES[2] for s in overlaid):
        path = tmp_path / source.csv.replace(".csv", ".json")
        doc = json.loads(path.read_text())
        doc["metadata"]["sm_budget"] = 16
        path.write_text(json.dumps(doc))
    built = shipped.build(tmp_path, sources, {2: "results/h200x2-makespan.csv"})
    assert built.sm_budget(2) == 16 and built.meta["runs"]["2"]["graph"]["sm_budget"] == 16


def test_outside_the_repository_it_says_what_it_needs(tmp_path: Path, capsys) -> None:
    """A root without results/ (an installed mpiring carries none): --check says so and fails,
    with no traceback."""
    assert shipped.main(["--root", str(tmp_path), "--check"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{tmp_path} is not mpiring's repository" in err and shipped.SOURCES[2][0][0].csv in err
    assert "--root <checkout>" in err and "Traceback" not in err
    assert shipped.missing(ROOT) == []


def test_outside_the_repository_the_command_exits_2_without_a_traceback(tmp_path: Path, tool) -> None:
    """``python -m tools.shipped --check`` run elsewhere (the checkout on PYTHONPATH)."""
    done = tool("shipped", ["--check"], cwd=tmp_path, limit=120)
    assert done.returncode == 2, done.stderr
    assert "is not mpiring's repository" in done.stderr and "Traceback" not in done.stderr


def test_results_that_are_no_table_are_said_so(tmp_path: Path, capsys) -> None:
    for name in shipped.missing(tmp_path):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    csv_path = tmp_path / shipped.SOURCES[2][0][0].csv
    rows = read_csv(csv_path)
    write_csv(csv_path, [r for r in rows if r.algo not in auto_candidates()])  # no candidate
    assert shipped.main(["--root", str(tmp_path), "--check"]) == 2
    assert "cannot derive the table" in capsys.readouterr().err
