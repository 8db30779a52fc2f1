"""``python -m tools.timeline --host``: every rank's medians and spans in the JSON, the code named,
the result checked; no GEMM setting on host arrays; a size that is no float32 count refused.
On one rank in this process, and as a job of two and three ranks. (Beside a GEMM, on GPUs:
tests/gpu/test_gpu_trace.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mpi4py import MPI
from trace_checks import span_problems

from mpiring.bench.metadata import provenance
from mpiring.ring.transports.tracing import Span
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
