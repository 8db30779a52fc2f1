"""``python -m tools.timeline --host``: every rank's medians and spans in the JSON, the code named,
the result checked; no GEMM setting on host arrays; a size that is no float32 count refused.
On one rank in this process, and as a job of two and three ranks. ``--algo ce-twoshot`` (GPUs
only): parsed, refused on host arrays and without GPUs, its gate's group size, and rank 0's
report and JSON from the ranks' records. (Beside a GEMM and ce-twoshot's run, on GPUs:
tests/gpu/test_gpu_trace.py.)"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from mpi4py import MPI
from trace_checks import span_problems

from mpiring.bench.metadata import provenance
from mpiring.ring.alltoall_tracing import OpSpan, stream_label
from mpiring.ring.transports.tracing import Span
from mpiring.trace import AllToAllTimeline
from tools import timeline


def json_problems(path: Path, ranks: int, calls: int) -> list[str]:
    doc = json.loads(path.read_text())
    problems = []
    if {k: doc.get(k) for k in ("mpiring", "commit")} != provenance():
        problems.append(f"the JSON does not name the code: {doc.get('mpiring')} {doc.get('commit')}")
    if len(doc["ranks"]) != ranks or doc["errors"]:
        problems.append(f"{len(doc['ranks'])} ranks reported, errors {doc['errors']}")
    for r, settings in enumerate(doc["ranks"]):
        if list(settings) != [timeline.ALONE] or len(settings[timeline.ALONE]["calls"]) != calls:
            problems.append(f"rank {r}: settings {list(settings)}")
            continue
        for k, spans in enumerate(settings[timeline.ALONE]["calls"]):
            problems += span_problems([Span(**s) for s in spans], ranks, f"rank {r} call {k}")
    return problems


def test_a_size_that_is_no_float32_count_is_refused() -> None:
    with pytest.raises(SystemExit):
        timeline.parse_args(["-b", "6"])
    assert timeline.parse_args(["-b", "1M"]).bytes == 1 << 20


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_on_one_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "timeline.json"
    assert timeline.main(["--host", "-b", "64K", "--calls", "4", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "# ring timeline: 4 calls of 65536 bytes" in out and "no GEMM setting: host arrays" in out
    assert json_problems(path, 1, 4) == []


@pytest.mark.parametrize("ranks", [2, 3])
def test_on_several_ranks_as_a_user_runs_it(tool, tmp_path: Path, ranks: int) -> None:
    path = tmp_path / "timeline.json"
    done = tool("timeline", ["--host", "-b", "64K", "--calls", "4", "--json", str(path)], ranks=ranks)
    assert done.returncode == 0, done.stderr
    assert "no GEMM setting: host arrays" in done.stdout, done.stdout
    assert sum(line.startswith("alone") for line in done.stdout.splitlines()) == ranks, done.stdout
    assert json_problems(path, ranks, 4) == []


# -- --algo ce-twoshot (GPUs only: its run is tests/gpu/test_gpu_trace.py's) --------------------


def test_ce_twoshot_is_parsed_and_refused_on_host_arrays() -> None:
    assert timeline.parse_args([]).algo == "ring"
    args = timeline.parse_args(["--algo", "ce-twoshot", "-b", "1M", "--calls", "20", "--gate-calls", "0"])
    assert (args.algo, args.bytes, args.calls, args.gate_calls) == ("ce-twoshot", 1 << 20, 20, 0)
    assert timeline.parse_args(["--algo", "ce-twoshot"]).gate_calls is None  # sized per call
    for bad in (["--algo", "ce-twoshot", "--host"], ["--algo", "twoshot"], ["--gate-calls", "-1"]):
        with pytest.raises(SystemExit):
            timeline.parse_args(bad)


def test_the_gate_holds_a_bounded_group_of_calls() -> None:
    one_round = timeline.gate_group(4, (1 << 20) // 4, 0)  # 1 MiB on 4 ranks: one round
    assert 1 < one_round <= timeline.GATE_MOST
    assert timeline.gate_group(4, (1 << 30) // 4, 3) < one_round  # 8 rounds a call: fewer calls
    assert timeline.gate_group(8, (1 << 34) // 4, 0) == 1  # many rounds: one call at a time
    assert timeline.gate_group(2, 256, 1) == timeline.GATE_MOST


def op_spans(fold_wait: float) -> list[OpSpan]:
    return [OpSpan(("rs", 1), "wait", 0, 0, 1e-6, ("inbound_free", 0, 1), 3),
            OpSpan(("rs", 1), "copy", 0, 1e-6, 4e-6, elements=10),
            OpSpan("fold", "wait", 0, 0, fold_wait, ("arrived", 0, 1), 4),
            OpSpan("fold", "fold", 0, fold_wait, fold_wait + 2e-6, elements=10)]


def test_the_ce_twoshot_report_and_json_from_every_ranks_spans(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """What rank 0 prints and writes from the ranks' records (as gathered: through JSON)."""
    traced = AllToAllTimeline()
    traced.calls = [op_spans(5e-6), op_spans(9e-6), op_spans(7e-6)]
    gated = {"gate_calls": 14, "gate_limit_s": 10.0, "enqueue_s": [0.02, 12.5]}
    mine = json.loads(json.dumps({timeline.ALONE: timeline.record(traced, gated)}))
    one_rank = json.loads(json.dumps({timeline.ALONE: timeline.record(AllToAllTimeline(), gated)}))
    path = tmp_path / "ce.json"
    args = timeline.parse_args(["--algo", "ce-twoshot", "-b", "1M", "--calls", "3", "--json", str(path)])
    status = timeline.report(args, 3, [(mine, ""), (one_rank, ""), ({}, "RuntimeError: a rank's error")])
    out, err = capsys.readouterr()
    assert status == 1 and "# FAILED rank 2: RuntimeError: a rank's error" in err
    assert "# ce-twoshot timeline: 3 calls of 1048576 bytes (float32 sum) per setting, 3 ranks" in out
    assert "behind a gate, 14 calls at a time" in out
    assert "alone        rank 0: call       9.0 us  waits       8.0 (longest      7.0: fold arrived[1] " \
        "round 0 (3/3 calls))  (4 spans)" in out, out
    table = [line.split() for line in out.splitlines()
             if line.strip().startswith(("stream", "rs 1", "fold "))]
    assert table == [["stream", "wait", "write", "copy", "fold"], ["rs", "1", "1.0", "-", "3.0", "-"],
                     ["fold", "7.0", "-", "-", "2.0"]]
    assert "slowest waits (median over the calls that have them):\n" \
        "                7.0 us  fold arrived[1] round 0 (3 calls)\n" \
        "                1.0 us  rs 1 inbound_free[1] round 0 (3 calls)\n" in out, out
    assert "past the gate's 10.0 s" in out
    assert "rank 1: no call traced (on one rank a ce-twoshot call is a copy)" in out
    doc = json.loads(path.read_text())
    assert doc["algo"] == "ce-twoshot" and doc["errors"] == ["rank 2: RuntimeError: a rank's error"]
    spans = [OpSpan(**s) for s in doc["ranks"][0][timeline.ALONE]["calls"][1]]
    assert [(stream_label(s.stream), s.kind, s.seconds) for s in spans] == \
        [(stream_label(s.stream), s.kind, s.seconds) for s in op_spans(9e-6)]


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="a GPU machine runs ce-twoshot")
@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
def test_ce_twoshot_without_gpus_fails_with_a_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert timeline.main(["--algo", "ce-twoshot", "-b", "64K", "--calls", "2"]) == 1
    assert "ce-twoshot runs on GPU arrays only" in capsys.readouterr().err
