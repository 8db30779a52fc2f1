"""The ring's timeline (mpiring.ring.transports.tracing, mpiring.trace): a tracing transport puts a
mark before and after each wait, send and fold of the pipeline, passes every call through
unchanged, and tells each span its transfer's sequence number; the summary's arithmetic. The
host transport under real ranks: tests/mpi/test_mpi_trace.py."""

from __future__ import annotations

import itertools
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_pipeline import RecordingTransport, call_buffers, expected_calls

from mpiring import trace
from mpiring.ring.pipeline import RingPipeline
from mpiring.ring.schedule import FIRST_SEQ, SLOTS, Phase, RingPlan, issue_order
from mpiring.ring.transports.tracing import (
    COPY,
    FOLD,
    FOLD_STEP,
    SEND,
    WAIT_FREE,
    WAIT_FULL,
    Clock,
    Span,
    TracingTransport,
)


class TickClock(Clock):
    """Each mark is the next integer; marks remember their queue (to check where they went)."""

    def __init__(self) -> None:
        self.ticks = itertools.count()
        self.queues: list[str] = []

    def begin(self, call) -> int:
        self.queues.append("begin")
        return next(self.ticks)

    def mark(self, queue: str) -> int:
        self.queues.append(queue)
        return next(self.ticks)

    def seconds(self, reference: int, mark: int) -> float:
        return float(mark - reference)


def expected_spans(plan: RingPlan, rank: int, base: int) -> list[tuple[str, str, int]]:
    """(queue, step, seq) of every span of one run, in issue order."""
    out = []
    for kind, t in issue_order(plan):
        seq = base + t
        if kind == "send":
            if seq - SLOTS >= FIRST_SEQ:
                out.append((COPY, WAIT_FREE, seq - SLOTS))
            out.append((COPY, SEND, seq))
        else:
            out += [(FOLD, WAIT_FULL, seq), (FOLD, FOLD_STEP, seq)]
    return out


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize(("size", "rank"), [(2, 0), (3, 2), (4, 1)])
def test_the_tracer_passes_every_call_through_and_spans_every_step(size: int, rank: int,
                                                                   compact: bool) -> None:
    inner = RecordingTransport(rank, size)
    clock = TickClock()
    tracer = TracingTransport(inner, clock)
    pipe = RingPipeline(tracer)
    phase = Phase.REDUCE_SCATTER if compact else Phase.ALLREDUCE
    runs = [(RingPlan(size, 120 * size, 3, phase, compact), False),
            (RingPlan(size, 12 * size, 1, phase, compact), True)]
    bases = []
    for plan, in_place in runs:
        bases.append(pipe.next_seq)
        inner.calls.clear()
        pipe.run(plan, call_buffers(plan.count, in_place))
        assert inner.calls == expected_calls(plan, rank, bases[-1], in_place)  # unchanged
    calls = tracer.timeline()
    assert len(calls) == 2
    for (plan, _), base, spans in zip(runs, bases, calls, strict=True):
        assert [(s.queue, s.step, s.seq) for s in spans] == expected_spans(plan, rank, base)
        assert all(s.start < s.end for s in spans)  # a mark before and one after each step
        assert all(b.start > a.end for a, b in itertools.pairwise(spans))  # in issue order
    # Marks went to the queue the step runs on, and each call has one reference mark.
    assert clock.queues.count("begin") == 2
    steps = [s for spans in calls for s in spans]
    assert clock.queues.count(COPY) == 2 * sum(s.queue == COPY for s in steps)
    assert clock.queues.count(FOLD) == 2 * sum(s.queue == FOLD for s in steps)


def test_a_ring_of_one_has_no_spans() -> None:
    tracer = TracingTransport(RecordingTransport(0, 1), TickClock())
    RingPipeline(tracer).run(RingPlan(1, 10, 1), call_buffers(10, False))
    assert tracer.timeline() == [[]]
    assert tracer.inner.calls == [("begin", False), ("copy_input",), ("end",)]


class Closable(RecordingTransport):
    def close(self, abandon: bool = False) -> None:
        self.calls.append(("close", abandon))


def test_the_tracer_delegates_what_it_does_not_time() -> None:
    inner = Closable(1, 4)
    tracer = TracingTransport(inner, TickClock())
    assert (tracer.rank, tracer.size, tracer.slot_bytes) == (1, 4, 4096)
    assert tracer.slot_capacity(call_buffers(1, True).dtype) == 512
    tracer.close(abandon=True)
    assert inner.calls == [("close", True)]


def span(step: str, start: float, end: float, seq: int = 3) -> Span:
    queue = COPY if step in (SEND, WAIT_FREE) else FOLD
    return Span(queue, step, seq, start, end)


def test_a_calls_summary() -> None:
    spans = [span(SEND, 0, 2), span(WAIT_FULL, 0, 3), span(FOLD_STEP, 3, 4), span(WAIT_FREE, 2, 2.5),
             span(SEND, 2.5, 5), span(WAIT_FULL, 4, 5.5), span(FOLD_STEP, 5.5, 9)]
    s = trace.summarize(spans)
    assert (s.call, s.copies, s.folds, s.wait_full, s.wait_free, s.slowest_fold, s.steps) == \
        (9, 4.5, 4.5, 4.5, 0.5, 3.5, 7)
    assert "call       9.0" not in s.line()  # seconds are printed as microseconds
    assert "call 9000000.0 us" in s.line()
    assert trace.summarize([]).call == 0.0


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=9))
def test_the_median_summary_is_the_median_of_each_field(calls) -> None:
    summaries = [trace.summarize([span(SEND, 0, a), span(FOLD_STEP, a, a + b), span(WAIT_FULL, 0, c),
                                  span(WAIT_FREE, 0, c * b)])
                 for a, b, c in calls]
    med = trace.median_summary(summaries)
    for field in ("call", "copies", "folds", "wait_full", "wait_free", "slowest_fold"):
        assert getattr(med, field) == statistics.median(getattr(s, field) for s in summaries), field
    assert med.steps == 4
    with pytest.raises(ValueError, match="no ring call was traced"):
        trace.median_summary([])
