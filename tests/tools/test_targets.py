"""tools/targets.py: issue 28's small-message targets per results CSV. Synthetic runs (a CSV
written by the bench's own writer, a JSON beside it or not) check every number it prints, the
n/a sizes, eager against --graph and the error exits; the committed 2 x H200 runs of 43e05e3
check it against values computed here from the CSV with the csv module alone."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring.bench.results import Row, write_csv
from mpiring.bench.sizes import format_size
from tools import targets

ROOT = Path(__file__).resolve().parents[2]
EAGER_CSV, GRAPH_CSV = "results/h200x2-small-43e05e3.csv", "results/h200x2-graph-small-43e05e3.csv"
KIB = 1024


def row(size: int, algo: str, time_us: float | None, status: str = "ok", *, resolved: str = "",
        wrong: int | None = 0, collective: str = "allreduce", nranks: int = 2, commit: str = "") -> Row:
    return Row(size_bytes=size, count=size // 4, dtype="float32", op="sum", algo=algo, batches="-",
               placement="out", nranks=nranks, status=status, check="OK", collective=collective,
               wrong=wrong, time_us=time_us if status == "ok" else None, resolved=resolved,
               commit=commit)


def write_run(tmp_path: Path, rows: list[Row], name: str = "run.csv", timing: str | None = "eager",
              **metadata: object) -> Path:
    """The CSV, and beside it a JSON whose metadata holds ``timing`` (None: no JSON at all)."""
    path = write_csv(tmp_path / name, rows)
    if timing is not None:
        meta = {"world_size": 2, "commit": "abc1234", "settings": {"timing": timing}, **metadata}
        path.with_suffix(".json").write_text(json.dumps({"metadata": meta, "results": []}))
    return path


def sample_rows() -> list[Row]:
    """4 sizes: 1 KiB and 8 KiB measured in full, 2 KiB without a timed auto, 4 KiB without a
    timed peer; plus rows that must not count (another collective, a failed row's wrong)."""
    return [
        row(1 * KIB, "auto", 4.0, resolved="oneshot-ll"), row(1 * KIB, "oneshot-ll", 3.9),
        row(1 * KIB, "oneshot", 8.0), row(1 * KIB, "nccl-direct", 10.0), row(1 * KIB, "torch", 6.0),
        row(1 * KIB, "torch", 5.0),  # a second torch row (another batch count): the faster counts
        row(1 * KIB, "torch-symm-1shot", 1.0, collective="allgather"),  # not an allreduce
        row(2 * KIB, "auto", None, "error"), row(2 * KIB, "nccl-direct", 7.0),
        row(2 * KIB, "oneshot", 6.5, wrong=3),
        row(4 * KIB, "auto", 5.0, resolved="oneshot"), row(4 * KIB, "nccl-direct", None, "fail", wrong=9),
        row(4 * KIB, "nccl-symm", None, "inapplicable", wrong=None),
        row(8 * KIB, "auto", 7.5, resolved="oneshot-ll"), row(8 * KIB, "oneshot-ll", 7.4),
        row(8 * KIB, "nccl-direct", 6.0), row(8 * KIB, "nccl-symm", 7.0, wrong=None),
    ]


def test_per_size_auto_its_pick_the_best_peer_the_ratio_and_the_best_own_row(tmp_path: Path) -> None:
    run = targets.load(write_run(tmp_path, sample_rows()))
    assert (run.nranks, run.commit, run.graph, run.stopped_early) == ("2", "abc1234", False, False)
    points = {p.size: p for p in run.points}
    assert sorted(points) == [1 * KIB, 2 * KIB, 4 * KIB, 8 * KIB]
    one = points[1 * KIB]
    assert one.auto == targets.Timed("auto", 4.0, "oneshot-ll")
    assert one.peer == targets.Timed("torch", 5.0, "")  # the allgather's 1.0 is not a peer's
    assert one.own == targets.Timed("oneshot-ll", 3.9, "")
    assert one.peer_over_auto == pytest.approx(5.0 / 4.0)
    assert points[8 * KIB].peer_over_auto == pytest.approx(6.0 / 7.5)
    assert (points[2 * KIB].auto, points[2 * KIB].peer_over_auto) == (None, None)
    assert (points[4 * KIB].peer, points[4 * KIB].own, points[4 * KIB].peer_over_auto) == (None, None, None)
    assert (run.wrong, run.unchecked) == (3, 1)  # the failed row's 9 is not counted


def test_the_eager_summary(tmp_path: Path) -> None:
    lines = targets.summary(targets.load(write_run(tmp_path, sample_rows())))
    assert lines == [
        "n/a (auto or every peer has no ok row; left out of the ratios): 2 KiB, 4 KiB",
        "best peer / auto over 2 sizes: 0.80 at 8 KiB to 1.25 at 1 KiB; below 0.95: 8 KiB (0.800) "
        "[>= 0.95 at every size 1 KiB-1 MiB: NOT met]",
        "eager, 8 KiB: auto 7.50 us [<= 8.0 us: met]; auto / best peer 1.25 [<= 0.85: NOT met]",
        "wrong elements over the ok rows: 3 (1 ok rows unchecked)"]


def test_the_095_floor_holds_over_1_kib_to_1_mib_only(tmp_path: Path) -> None:
    """0.95 itself meets it; a size below it above 1 MiB is listed but does not fail it."""
    rows = [row(KIB, "auto", 10.0), row(KIB, "nccl-direct", 9.5),
            row(2 * KIB, "auto", 10.0), row(2 * KIB, "nccl-direct", 9.6),
            row(2 << 20, "auto", 10.0), row(2 << 20, "torch", 5.0)]
    run = targets.load(write_run(tmp_path, rows))
    assert targets.summary(run)[1] == (
        "best peer / auto over 3 sizes: 0.50 at 2 MiB to 0.96 at 2 KiB; below 0.95: 2 MiB (0.500) "
        "[>= 0.95 at every size 1 KiB-1 MiB: met]")
    rows[1] = row(KIB, "nccl-direct", 9.49)
    assert targets.summary(targets.load(write_run(tmp_path, rows, "low.csv")))[1].endswith(
        "below 0.95: 1 KiB (0.949), 2 MiB (0.500) [>= 0.95 at every size 1 KiB-1 MiB: NOT met]")


def test_the_table_marks_n_a(tmp_path: Path) -> None:
    text = targets.report(targets.load(write_run(tmp_path, sample_rows())))
    lines = text.splitlines()
    assert lines[0] == f"{tmp_path / 'run.csv'}: 2 ranks, commit abc1234, eager calls (timing from its JSON)"
    assert lines[2].split() == ["1", "KiB", "4.00", "us", "(oneshot-ll)", "torch", "5.00", "us", "1.25",
                                "oneshot-ll", "3.90", "us"]
    assert lines[3].split() == ["2", "KiB", "n/a", "nccl-direct", "7.00", "us", "n/a", "oneshot", "6.50",
                                "us"]
    assert lines[4].split() == ["4", "KiB", "5.00", "us", "(oneshot)", "n/a", "n/a", "n/a"]


def test_a_graph_run_is_held_to_the_graph_targets(tmp_path: Path) -> None:
    rows = [row(KIB, "auto", 4.0, resolved="oneshot-ll"), row(KIB, "nccl-direct", 8.0),
            row(32 * KIB, "auto", 4.6, resolved="oneshot-ll"), row(32 * KIB, "nccl-direct", 5.0),
            row(64 * KIB, "auto", 4.2), row(128 * KIB, "auto", 9.0), row(128 * KIB, "torch", 9.5)]
    run = targets.load(write_run(tmp_path, rows, timing="graph", complete=False))
    assert run.graph and run.stopped_early
    assert targets.summary(run)[2] == (  # 64 KiB has no peer: its time counts, its share cannot
        "graphs, 1 KiB-64 KiB: largest auto time 4.60 us at 32 KiB [<= 4.5 us: NOT met]; "
        "largest auto / best peer 0.92 at 32 KiB [<= 0.8: NOT met]")
    assert "eager, 8 KiB" not in "\n".join(targets.summary(run))
    head = targets.report(run).splitlines()[0]
    assert "CUDA graph replays (--graph)" in head and "stopped before its end" in head
    fast = [row(KIB, "auto", 3.0), row(KIB, "nccl-symm", 6.0), row(2 * KIB, "auto", 4.5),
            row(2 * KIB, "nccl-symm", 6.0)]
    assert targets.summary(targets.load(write_run(tmp_path, fast, "fast.csv", "graph")))[2] == (
        "graphs, 1 KiB-64 KiB: largest auto time 4.50 us at 2 KiB [<= 4.5 us: met]; "
        "largest auto / best peer 0.75 at 2 KiB [<= 0.8: met]")


def test_without_a_json_the_name_says_graph_and_the_rows_the_ranks_and_commit(tmp_path: Path) -> None:
    rows = [row(8 * KIB, "auto", 9.0, nranks=4, commit="fff0000"), row(8 * KIB, "torch", 9.0, nranks=4)]
    eager = targets.load(write_run(tmp_path, rows, "h-small.csv", timing=None))
    graph = targets.load(write_run(tmp_path, rows, "h-graph-small.csv", timing=None))
    assert (eager.graph, graph.graph) == (False, True)
    assert (eager.nranks, eager.commit) == ("4", "fff0000")
    assert eager.timing_from == "timing from its name: no JSON beside it records it"
    # the JSON's timing wins over the name
    assert not targets.load(write_run(tmp_path, rows, "x-graph.csv", timing="eager")).graph
    assert targets.summary(eager)[2] == (
        "eager, 8 KiB: auto 9.00 us [<= 8.0 us: NOT met]; auto / best peer 1.00 [<= 0.85: NOT met]")


def test_a_run_without_8_kib_or_any_ratio_says_so(tmp_path: Path) -> None:
    run = targets.load(write_run(tmp_path, [row(KIB, "auto", 4.0), row(KIB, "oneshot", 5.0)]))
    assert targets.summary(run)[:2] == [
        "n/a (auto or every peer has no ok row; left out of the ratios): 1 KiB",
        "eager, 8 KiB: auto not timed"]


def test_missing_files_and_runs_without_auto_exit_2(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert targets.main([str(tmp_path / "absent.csv")]) == 2
    assert f"{tmp_path / 'absent.csv'}: no such file" in capsys.readouterr().err
    no_auto = write_run(tmp_path, [row(KIB, "nccl-direct", 5.0)], "no-auto.csv")
    good = write_run(tmp_path, sample_rows())
    assert targets.main([str(good), str(no_auto)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "no-auto.csv: no auto row" in err
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert targets.main([str(tmp_path / "other.csv")]) == 2
    assert "not an mpiring.bench CSV" in capsys.readouterr().err
    assert targets.main([str(good)]) == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(1.0, 100.0), st.lists(st.floats(1.0, 100.0), min_size=1, max_size=3)),
                min_size=1, max_size=8))
def test_the_ratio_range_is_the_min_and_max_over_the_sizes(
        tmp_path_factory: pytest.TempPathFactory, times: list[tuple[float, list[float]]]) -> None:
    peers = ("nccl-direct", "torch", "nccl-symm")
    rows, ratios = [], {}
    for index, (auto, peer_times) in enumerate(times):
        size = KIB << index
        rows.append(row(size, "auto", auto))
        rows += [row(size, name, t) for name, t in zip(peers[:len(peer_times)], peer_times, strict=True)]
        ratios[size] = min(peer_times) / auto
    run = targets.load(write_run(tmp_path_factory.mktemp("run"), rows))
    assert {p.size: p.peer_over_auto for p in run.points} == pytest.approx(ratios)
    low, high = min(ratios, key=ratios.__getitem__), max(ratios, key=ratios.__getitem__)
    line = targets.summary(run)[1]
    assert line.startswith(f"best peer / auto over {len(ratios)} sizes: {ratios[low]:.2f} at "
                           f"{format_size(low)} to {ratios[high]:.2f} at {format_size(high)};")
    below = [s for s, r in ratios.items() if r < 0.95]
    assert line.endswith("NOT met]" if any(s <= 1 << 20 for s in below) else ": met]")


def independent(path: Path) -> dict[int, dict[str, tuple[float, str]]]:
    """Per size, per algo, the (time, pick) of the ok allreduce rows, read with csv alone."""
    out: dict[int, dict[str, tuple[float, str]]] = {}
    with path.open() as f:
        for rec in csv.DictReader(f):
            if rec["status"] == "ok":
                at_size = out.setdefault(int(rec["size_bytes"]), {})
                at_size[rec["algo"]] = (float(rec["time_us"]), rec["resolved"])
    return out


def test_the_committed_43e05e3_runs(tool) -> None:
    done = tool("targets", [EAGER_CSV, GRAPH_CSV], limit=120)
    assert done.returncode == 0, done.stderr
    eager_block, graph_block = done.stdout.split("\n\n")
    peers = ("nccl-direct", "nccl-lib", "nccl-symm", "torch", "torch-symm-1shot", "torch-symm-2shot")
    eager = independent(ROOT / EAGER_CSV)
    ratios = {}
    for size, algos in eager.items():
        best = min((algos[p][0], p) for p in peers if p in algos)
        ratios[size] = best[0] / algos["auto"][0]
    assert eager[8 * KIB]["auto"] == (pytest.approx(4.44, abs=0.005), "oneshot-ll")
    assert eager[8 * KIB]["nccl-direct"][0] == pytest.approx(6.89, abs=0.005)
    assert min(ratios, key=ratios.__getitem__) == 512 * KIB and round(ratios[512 * KIB], 2) == 1.00
    assert "2 ranks, commit 43e05e3, eager calls" in eager_block
    assert "     8 KiB  4.44 us (oneshot-ll)     nccl-direct 6.89 us               1.55  oneshot-ll 4.45 us" \
        in eager_block.splitlines()
    highest = max(ratios.values())
    assert f"best peer / auto over 13 sizes: 1.00 at 512 KiB to {highest:.2f} at 1 KiB" in eager_block
    share = eager[8 * KIB]["auto"][0] / eager[8 * KIB]["nccl-direct"][0]
    assert f"eager, 8 KiB: auto 4.44 us [<= 8.0 us: met]; auto / best peer {share:.2f}" in eager_block
    assert "wrong elements over the ok rows: 0" in eager_block
    graph = independent(ROOT / GRAPH_CSV)
    small = [s for s in graph if s <= 64 * KIB]
    slowest = max(small, key=lambda s: graph[s]["auto"][0])
    worst = max(graph[s]["auto"][0] / min(graph[s][p][0] for p in peers if p in graph[s]) for s in small)
    assert (slowest, round(graph[slowest]["auto"][0], 2)) == (32 * KIB, 4.00)
    assert "CUDA graph replays (--graph)" in graph_block and "eager, 8 KiB" not in graph_block
    assert (f"graphs, 1 KiB-64 KiB: largest auto time 4.00 us at 32 KiB [<= 4.5 us: met]; "
            f"largest auto / best peer {worst:.2f} at 1 KiB [<= 0.8: met]") in graph_block
