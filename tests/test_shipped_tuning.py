"""The shipped tuning table is what the committed results say: derived again from results/*.csv
with the tuner's own code (mpiring.bench.shipped), it must equal mpiring/data/tuning-h200.json
byte for byte, metadata included. If this fails after new results or a new auto candidate, run
``python -m mpiring.bench.shipped`` from the repository root and commit the file."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from mpiring.algorithms import auto as tuning
from mpiring.algorithms import auto_candidates
from mpiring.bench import shipped
from mpiring.bench.results import read_csv
from mpiring.bench.tunefile import table_json

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_file_is_derived_from_the_committed_results() -> None:
    text = (ROOT / shipped.TARGET).read_text()
    assert table_json(shipped.build(ROOT)) == text, (
        "mpiring/data/tuning-h200.json differs from what results/ gives: run "
        "python -m mpiring.bench.shipped and commit the file")
    assert shipped.main(["--root", str(ROOT), "--check"]) == 0


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
        assert "sizes above 64 MiB: not measured (the 64 MiB winner holds)" in runs["graph"]["gaps"]
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


def test_a_csv_of_another_kind_is_refused(tmp_path: Path) -> None:
    for name in ("h200x2.csv", "h200x2.json", "h200x2-graph.csv", "h200x2-graph.json"):
        (tmp_path / "results").mkdir(exist_ok=True)
        shutil.copy(ROOT / "results" / name, tmp_path / "results" / name)
    sources = {4: ("results/h200x2.csv", "results/h200x2-graph.csv")}  # 2-rank files as 4 ranks
    with pytest.raises(ValueError, match="on 4 ranks, this file holds"):
        shipped.build(tmp_path, sources)
    built = shipped.build(tmp_path, {2: sources[4]})
    assert built.tables[2] == tuning.load().tables[2]
