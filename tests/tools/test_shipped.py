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
    for nranks, (eager_csv, graph_csv) in shipped.SOURCES.items():
        runs = table.meta["runs"][str(nranks)]
        assert runs["eager"]["source"] == eager_csv and runs["graph"]["source"] == graph_csv
        assert runs["eager"]["machine"] == f"vm: {nranks} x NVIDIA H200"
        assert runs["eager"]["measured"].startswith("2026-11-")
        assert "ring: not measured (cannot be captured into a CUDA graph)" in runs["graph"]["gaps"]
        gaps = runs["graph"]["gaps"]
        assert any(g.startswith("sizes above ") and g.endswith(" winner holds)") for g in gaps)
    assert "NVLink" in table.meta["link evidence"]


def fastest(path: Path) -> dict[int, str]:
    """Per size, the auto candidate with the smallest time_us (read independently of the tuner)."""
    best: dict[int, tuple[float, str]] = {}
    with path.open() as f:
        for rec in csv.DictReader(f):
            if rec["status"] == "ok" and rec["algo"] in auto_candidates():
                size, t = int(rec["size_bytes"]), float(rec["time_us"])
                if size not in best or t < best[size][0]:
                    best[size] = (t, rec["algo"])
    return {size: algo for size, (_, algo) in best.items()}


@pytest.mark.parametrize("nranks", sorted(shipped.SOURCES))
def test_at_every_measured_size_the_table_picks_the_fastest(nranks: int) -> None:
    table = tuning.load()
    eager_csv, graph_csv = shipped.SOURCES[nranks]
    for size, algo in fastest(ROOT / eager_csv).items():
        assert table.choose(nranks, size) == algo, (size, algo)
    for size, algo in fastest(ROOT / graph_csv).items():
        assert table.choose(nranks, size, graph=True) == algo, (size, algo)


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


def copy_sources(tmp_path: Path) -> None:
    """The 2-rank table's eager and graph results (CSV and JSON) into ``tmp_path/results``."""
    (tmp_path / "results").mkdir(exist_ok=True)
    for csv_name in shipped.SOURCES[2]:
        for name in (csv_name, csv_name.replace(".csv", ".json")):
            shutil.copy(ROOT / name, tmp_path / name)


def test_a_csv_of_another_kind_is_refused(tmp_path: Path) -> None:
    copy_sources(tmp_path)
    sources = {4: shipped.SOURCES[2]}  # 2-rank files as 4 ranks
    with pytest.raises(ValueError, match="on 4 ranks, this file holds"):
        shipped.build(tmp_path, sources)
    built = shipped.build(tmp_path, {2: sources[4]})
    assert built.tables[2] == tuning.load().tables[2]


# -- overlap entries: only from a committed makespan run of that machine and rank count ----------


def test_no_makespan_run_is_committed_for_2_or_4_ranks_so_no_overlap_entries(capsys) -> None:
    table = tuning.load()
    assert table.overlap == {} and not shipped.OVERLAP_SOURCES
    assert shipped.overlap_gaps(table) == [f"{n} ranks: {shipped.OVERLAP_GAP}" for n in (2, 4)]
    assert shipped.main(["--root", str(ROOT), "--check"]) == 0
    assert "4 ranks: overlap: not measured" in capsys.readouterr().out


def _makespan_results(tmp_path: Path) -> dict[int, tuple[str, str]]:
    """The 2-rank results in a new root, with a makespan run made of the eager CSV's rows:
    T_both favours the ring from 1 MiB on, NCCL below, and one-shot's makespan is missing."""
    copy_sources(tmp_path)
    eager = shipped.SOURCES[2][0]
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
    assert run["source"] == "results/h200x2-makespan.csv" and "T_both" in run["timing"]
    assert "oneshot: not measured" in run["gaps"] and "oneshot" not in run["candidates"]
    assert shipped.overlap_gaps(built) == []
    assert tuning.parse(json.loads(table_json(built))) == built
    # without the makespan run, the same results give the shipped 2-rank table, no overlap
    assert shipped.build(tmp_path, sources, {}).overlap == {}


def test_a_makespan_run_must_hold_makespans_of_a_rank_count_with_eager_results(tmp_path: Path) -> None:
    sources = _makespan_results(tmp_path)
    with pytest.raises(ValueError, match=r"makespan runs for \[4\] ranks"):
        shipped.build(tmp_path, sources, {4: "results/h200x2-makespan.csv"})
    with pytest.raises(ValueError, match="no candidate of auto's makespan was timed"):
        shipped.build(tmp_path, sources, {2: shipped.SOURCES[2][0]})  # no t_both_us


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
    for csv_name in shipped.SOURCES[2]:
        path = tmp_path / csv_name.replace(".csv", ".json")
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
    assert f"{tmp_path} is not mpiring's repository" in err and shipped.SOURCES[2][0] in err
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
    csv_path = tmp_path / shipped.SOURCES[2][0]
    rows = read_csv(csv_path)
    write_csv(csv_path, [r for r in rows if r.algo not in auto_candidates()])  # no candidate
    assert shipped.main(["--root", str(tmp_path), "--check"]) == 2
    assert "cannot derive the table" in capsys.readouterr().err
