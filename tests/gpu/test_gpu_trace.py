"""The ring's timeline on GPUs (mpiring.trace.ring_timeline with CUDA events on the ring's own
copy and fold streams): traced ring calls stay exact on changing data; each call's spans cover
every transfer once per queue, in sequence, with event times inside the call; a rank held back
on the GPU shows as the next rank's wait for a full slot; the events are freed; and
``python -m tools.timeline`` (the repository's tools/) runs alone and beside a GEMM.

ce-twoshot's (mpiring.trace.alltoall_timeline: CUDA events around each operation on its
stream): traced calls of one and of three rounds stay exact; each call's spans are its plan's
operations in issue order, none before the call's reference; the communicator runs untraced
after the block; a rank held back on the GPU shows as the peers' fold waiting for its piece;
and ``python -m tools.timeline --algo ce-twoshot`` runs alone and beside a GEMM.

Run under mpirun on 1+ GPUs, or on one shared GPU (``MPIRING_SHARE_GPU=1``: jobs/gpu-shared.sh).
"""

from __future__ import annotations

import json
from pathlib import Path

import cupy
import pytest
from gpu_helpers import WORLD, agree, gpu_nap, poison, rank_input, reference
from trace_checks import span_problems

import mpiring
from mpiring import trace
from mpiring.algorithms.ce_twoshot import area_bytes
from mpiring.ring.alltoall_schedule import AllToAllPlan, Copy, Rounds
from mpiring.ring.alltoall_tracing import KINDS, op_span

RANK, SIZE = WORLD.rank, WORLD.size
pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("count", [4096, 3 << 20])
def test_traced_ring_calls_are_exact_and_span_every_transfer(count: int) -> None:
    problems: list[str] = []
    with mpiring.Communicator(WORLD, gpu=True, algorithm="ring") as c:
        want = reference(mpiring.Op.SUM, SIZE, count).astype(cupy.float32)
        outs = [cupy.empty(count, dtype=cupy.float32) for _ in range(20)]
        for out in outs:
            poison(out)
        with trace.ring_timeline(c) as timeline:
            for call, out in enumerate(outs):
                c.Allreduce(rank_input(RANK, count, cupy.float32) + call, out)
        for call, out in enumerate(outs):
            wrong = int(cupy.count_nonzero(out != want + SIZE * call))
            if wrong:
                problems.append(f"call {call}: {wrong} wrong")
        if len(timeline.calls) != len(outs):
            problems.append(f"{len(timeline.calls)} calls traced")
        for k, spans in enumerate(timeline.calls):
            problems += span_problems(spans, SIZE, f"call {k}")
        if SIZE > 1 and not timeline.summary().call > 0:
            problems.append(f"summary {timeline.summary()}")
    agree(not problems, "; ".join(problems[:5]))


def test_a_rank_held_back_on_the_gpu_shows_as_the_next_ranks_wait() -> None:
    """Rank 0's stream sleeps 50 ms before its call (the check off, so nothing waits on the
    host): rank 1's fold queue stands at its first full slot about that long."""
    if SIZE == 1:
        pytest.skip("needs 2 ranks")
    count = 1 << 20
    problems: list[str] = []
    with mpiring.Communicator(WORLD, gpu=True, algorithm="ring", check=False) as c:
        x = rank_input(RANK, count, cupy.float32)
        out = cupy.empty_like(x)
        c.Allreduce(x, out)  # warm-up
        c.synchronize()
        WORLD.Barrier()
        with trace.ring_timeline(c) as timeline:
            if RANK == 0:
                gpu_nap(cupy.cuda.get_current_stream(), 0.05)  # the call starts 50 ms late
            c.Allreduce(x, out)
        if RANK == 1:
            waited = trace.summarize(timeline.calls[0]).wait_full
            if waited < 0.03:
                problems.append(f"rank 1 waited {waited * 1e3:.1f} ms for full slots; rank 0 slept 50 ms")
    agree(not problems, "; ".join(problems))


def test_the_timeline_command_beside_a_gemm(tmp_path_factory) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for its tools/
    from tools import timeline as command

    path = WORLD.bcast(str(tmp_path_factory.mktemp("timeline") / "t.json") if RANK == 0 else None)
    status = command.main(["-b", "16M", "--calls", "5", "--gemm", "4096", "--json", path], WORLD)
    problems = [] if status == 0 else [f"exit status {status}"]
    if RANK == 0:
        doc = json.loads(Path(path).read_text())
        for r, settings in enumerate(doc["ranks"]):
            if sorted(settings) != sorted([command.ALONE, command.BESIDE]):
                problems.append(f"rank {r}: settings {sorted(settings)}")
    agree(not problems, "; ".join(problems))


# -- ce-twoshot ----------------------------------------------------------------------------------


def expected_ops(plan: AllToAllPlan, rank: int, done: Rounds) -> list[tuple]:
    """(stream, kind, round) of every operation a traced call of ``plan`` marks, in issue order."""
    return [(key, op_span(key, k, op, 0.0, 0.0).kind, k) for k, key, op in plan.issue_rounds(rank, done)
            if not (isinstance(op, Copy) and not op.elements)]


@pytest.mark.parametrize("area_mib", [32, 1])  # 12 MiB: one round; 1 MiB areas: several a call
def test_traced_ce_twoshot_calls_are_exact_and_span_every_operation(monkeypatch, area_mib: int) -> None:
    if SIZE == 1:
        pytest.skip("ce-twoshot on one rank is a copy: nothing to trace")
    monkeypatch.setenv("MPIRING_CE_AREA_MIB", str(area_mib))  # every rank alike, before the communicator
    count = 3 << 20
    problems: list[str] = []
    with mpiring.Communicator(WORLD, gpu=True) as c:
        want = reference(mpiring.Op.SUM, SIZE, count).astype(cupy.float32)
        x = rank_input(RANK, count, cupy.float32)
        first = cupy.empty_like(x)
        c.Allreduce(x, first, algorithm="ce-twoshot")  # untraced: the staging, then rounds carry on
        plan = AllToAllPlan(SIZE, count, area_bytes() // 4)
        outs = [cupy.empty(count, dtype=cupy.float32) for _ in range(6)]
        for out in outs:
            poison(out)
        with trace.alltoall_timeline(c) as timeline:
            for call, out in enumerate(outs):
                c.Allreduce(x + call, out, algorithm="ce-twoshot")
        if c.ce_twoshot_hook().tracer is not None:
            problems.append("the hook still holds the tracer after the block")
        after = cupy.empty_like(x)
        poison(after)
        c.Allreduce(x, after, algorithm="ce-twoshot")  # untraced again
        c.synchronize()
        for call, out in enumerate([first, *outs, after]):
            wrong = int(cupy.count_nonzero(out != want + SIZE * (call - 1 if 0 < call <= len(outs) else 0)))
            if wrong:
                problems.append(f"call {call}: {wrong} wrong")
        if len(timeline.calls) != len(outs):
            problems.append(f"{len(timeline.calls)} calls traced, not {len(outs)}")
        for k, spans in enumerate(timeline.calls):
            done = Rounds((k + 1) * plan.rounds, (k + 1) * plan.rounds)  # after the first call and k more
            got = [(s.stream, s.kind, s.round) for s in spans]
            if got != expected_ops(plan, RANK, done):
                problems.append(f"call {k}: spans {got[:4]}... are not the plan's operations")
            if any(s.start < 0 or s.end < s.start or s.kind not in KINDS for s in spans):
                problems.append(f"call {k}: a span before the call or ending before it starts")
        summary = timeline.summary()
        if not (summary.call > 0 and "fold" in summary.streams and "fold" in summary.streams["fold"]):
            problems.append(f"summary {summary}")
    agree(not problems, "; ".join(problems[:5]))


def test_a_rank_held_back_on_the_gpu_shows_as_the_peers_fold_waiting_for_its_piece() -> None:
    """Rank 0's stream sleeps 50 ms before its call (the check off, so nothing waits on the
    host): every other rank's fold stands at its wait for rank 0's piece (arrived[0]) about that
    long."""
    if SIZE == 1:
        pytest.skip("needs 2 ranks")
    count = 1 << 20
    problems: list[str] = []
    with mpiring.Communicator(WORLD, gpu=True, check=False) as c:
        x = rank_input(RANK, count, cupy.float32)
        out = cupy.empty_like(x)
        c.Allreduce(x, out, algorithm="ce-twoshot")  # warm-up: the staging, the fold kernel
        c.synchronize()
        WORLD.Barrier()
        with trace.alltoall_timeline(c) as timeline:
            if RANK == 0:
                gpu_nap(cupy.cuda.get_current_stream(), 0.05)  # the call starts 50 ms late
            c.Allreduce(x, out, algorithm="ce-twoshot")
        if RANK != 0:
            waited = [s.seconds for s in timeline.calls[0]
                      if s.stream == "fold" and s.kind == "wait" and s.flag is not None
                      and s.flag[0] == "arrived" and s.flag[2] == 0]
            if len(waited) != 1 or waited[0] < 0.03:
                problems.append(f"the fold waited {waited} s for rank 0's piece; rank 0 slept 50 ms")
    agree(not problems, "; ".join(problems))


def test_the_timeline_command_traces_ce_twoshot_beside_a_gemm(tmp_path_factory) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout, for its tools/
    from tools import timeline as command

    path = WORLD.bcast(str(tmp_path_factory.mktemp("timeline") / "ce.json") if RANK == 0 else None)
    status = command.main(["--algo", "ce-twoshot", "-b", "1M", "--calls", "5", "--gemm", "4096",
                           "--json", path], WORLD)
    problems = [] if status == 0 else [f"exit status {status}"]
    if RANK == 0 and not problems:
        doc = json.loads(Path(path).read_text())
        for r, settings in enumerate(doc["ranks"]):
            if sorted(settings) != sorted([command.ALONE, command.BESIDE]):
                problems.append(f"rank {r}: settings {sorted(settings)}")
                continue
            for name, setting in settings.items():
                calls = setting["calls"]
                if len(calls) != (5 if SIZE > 1 else 0) or any(
                        s["kind"] not in KINDS or s["end"] < s["start"] for c in calls for s in c):
                    first = calls[0][:2] if calls else []
                    problems.append(f"rank {r} {name}: {len(calls)} calls, spans {first}")
    agree(not problems, "; ".join(problems))
