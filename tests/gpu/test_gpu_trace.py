"""The ring's timeline on GPUs (mpiring.trace.ring_timeline with CUDA events on the ring's own
copy and fold streams): traced ring calls stay exact on changing data; each call's spans cover
every transfer once per queue, in sequence, with event times inside the call; a rank held back
on the GPU shows as the next rank's wait for a full slot; the events are freed; and
``python -m tools.timeline`` (the repository's tools/) runs alone and beside a GEMM.

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
