"""mpiring.trace.ring_timeline on the host transport, on real ranks: traced ring calls give exact
results; each call's spans cover every transfer once on each queue, in sequence; a late rank
shows up as the next rank's wait for a full slot; the block leaves the ring as it found it.
alltoall_timeline (ce-twoshot's) refuses a communicator without GPUs, and a closed one."""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok, check_result, gather_inputs, make_input
from trace_checks import span_problems

from mpiring import Communicator, trace
from mpiring.core.errors import CommunicatorClosedError, UnavailableError
from mpiring.core.ops import Op
from mpiring.ring.transports.tracing import SEND, TracingTransport

world = MPI.COMM_WORLD
LATE = 0.3  # seconds rank 0 starts late in the straggler test


@pytest.mark.parametrize("count", [1, 1000, 40_000])
def test_traced_calls_are_exact_and_span_every_transfer(small_comm, count: int) -> None:
    problems: list[str] = []
    with trace.ring_timeline(small_comm) as timeline:
        for seed in range(3):
            x = make_input(np.dtype(np.float64), Op.SUM, count, seed)
            out = np.full_like(x, np.nan)
            small_comm.Allreduce(x, out, algorithm="ring")
            problems += check_result(out, gather_inputs(x), Op.SUM, f"count {count} seed {seed}")
    problems += [] if len(timeline.calls) == 3 else [f"{len(timeline.calls)} calls traced, not 3"]
    for k, spans in enumerate(timeline.calls):
        problems += span_problems(spans, world.size, f"call {k}")
    if world.size > 1:
        first, second = ([s.seq for s in spans if s.step == SEND] for spans in timeline.calls[:2])
        if min(second) != max(first) + 1:
            problems.append(f"the second call's seqs {min(second)}.. do not follow the first's "
                            f"..{max(first)}")
        summary = timeline.summary()
        if not (summary.call > 0 and summary.steps in {len(c) for c in timeline.calls}):
            problems.append(f"summary {summary}")
    all_ok(problems)
    assert not isinstance(small_comm.ring_pipeline(gpu=False).transport, TracingTransport)


def test_a_late_rank_shows_as_the_next_ranks_wait_for_a_full_slot(world) -> None:
    """Rank 0 starts each call LATE seconds after the others: rank 1's folds wait for its data.
    (With the per-call check off: with it on, the check meets the late rank before the ring.)"""
    x = np.arange(4096, dtype=np.float64) + world.rank
    problems: list[str] = []
    with Communicator(world, gpu=False, slot_bytes=4096, check=False, timeout=60) as comm, \
            trace.ring_timeline(comm) as timeline:
        for _ in range(2):
            world.Barrier()
            if world.rank == 0:
                time.sleep(LATE)
            out = np.full_like(x, np.nan)
            comm.Allreduce(x, out, algorithm="ring")
            problems += check_result(out, gather_inputs(x), Op.SUM, "straggler")
    if world.size > 1 and world.rank == 1:
        waited = [trace.summarize(spans).wait_full for spans in timeline.calls]
        if min(waited) < 0.8 * LATE:
            problems.append(f"rank 1 waited {waited} s for full slots; rank 0 was {LATE} s late")
    all_ok(problems)


def test_one_trace_at_a_time_and_the_ring_restored_after_an_error(small_comm) -> None:
    pipeline = small_comm.ring_pipeline(gpu=False)
    ring = pipeline.transport
    with trace.ring_timeline(small_comm), pytest.raises(RuntimeError, match="already being traced"), \
            trace.ring_timeline(small_comm):
        pass
    assert pipeline.transport is ring
    with pytest.raises(KeyError), trace.ring_timeline(small_comm):
        raise KeyError("the block's own error")
    assert pipeline.transport is ring
    x = np.ones(100)
    out = np.zeros(100)
    small_comm.Allreduce(x, out, algorithm="ring")  # the ring still runs, untraced
    all_ok([] if np.all(out == world.size) else [f"after tracing: {out[:4]}"])


def test_a_closed_communicator_cannot_be_traced(world) -> None:
    comm = Communicator(world, gpu=False)
    comm.close()
    with pytest.raises(CommunicatorClosedError, match="ring_timeline: this communicator is closed"), \
            trace.ring_timeline(comm):
        pass


def test_ce_twoshots_timeline_needs_gpus_and_an_open_communicator(small_comm, world) -> None:
    """ce-twoshot runs on GPU arrays only (its timeline's GPU test: tests/gpu/test_gpu_trace.py)."""
    with pytest.raises(UnavailableError, match="ce-twoshot runs on GPU arrays only"), \
            trace.alltoall_timeline(small_comm):
        pass
    comm = Communicator(world, gpu=False)
    comm.close()
    with pytest.raises(CommunicatorClosedError, match="alltoall_timeline: this communicator is closed"), \
            trace.alltoall_timeline(comm):
        pass
