"""ce-twoshot's timeline on the CPU (mpiring.ring.alltoall_tracing, ce_twoshot.issue_traced,
mpiring.trace's summaries), over the engine tests' devices:

* a traced call asks the device for exactly the operations of the untraced Python walk, in the
  same order, each between two marks on that operation's stream, after one reference mark on
  the caller's stream that every one of the call's streams waits for; the tracer keeps them per
  call with the plan's stream name, round and operation (any plan, rank, rounds, streams);
* an untraced call records no event (the same device that records them);
* on simulated GPUs that run the marks as events (tests/test_alltoall_engine.py, ``via="traced"``,
  whose random-order tests also check the traced calls' results bitwise): per call its spans, in
  issue order, each ending after it starts, none before the reference; the operations of one
  CUDA stream one after the other; every wait ending after the peer's write of its flag; a
  traced call's results equal an untraced one's, and the engine goes on untraced after;
* the hook: one tracer at a time, None again after the block (an error too);
* the summaries' arithmetic: per call, the median over calls, the slowest waits.

The simulation's clock counts operations, not seconds: these check order and structure, not
durations (tests/gpu/test_gpu_trace.py runs the CUDA events on GPUs).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_alltoall_engine import Node, one_call
from test_streamprog import AREA, DONE, PLANS, Recorder, engine

from mpiring import trace
from mpiring.algorithms.ce_twoshot import issue_traced
from mpiring.ring.alltoall_schedule import AllToAllPlan, Copy, Rounds, Signal, Wait
from mpiring.ring.alltoall_tracing import (
    COPY,
    FOLD,
    WAIT,
    WRITE,
    AllToAllTracer,
    OpSpan,
    TraceHook,
    flag_label,
    op_span,
    stream_label,
)
from mpiring.ring.schedule import Phase

CALLER = 5  # the caller's stream in the recorded calls (none of the engine's)


class MarkingRecorder(Recorder):
    """A recording device that also records events and waits for them (the tracer's marks) into
    the same list, so their place among the operations shows."""

    def __init__(self) -> None:
        super().__init__()
        self.events = itertools.count(1)

    def record(self, stream: int) -> int:
        event = next(self.events)
        self.calls.append(("event", stream, event))
        return event

    def wait(self, stream: int, mark: int) -> None:
        self.calls.append(("wait event", stream, mark))

    def seconds(self, reference: int, mark: int) -> float:
        return float(mark - reference)

    def close(self) -> None:
        pass


def triples(items: list) -> list[tuple]:
    return list(zip(*[iter(items)] * 3, strict=True))


def issued(plan: AllToAllPlan, rank: int, done: Rounds) -> list:
    """(round, stream, operation) of every operation the device is asked for: an empty copy is not."""
    return [(k, key, op) for k, key, op in plan.issue_rounds(rank, done)
            if not (isinstance(op, Copy) and not op.elements)]


@settings(max_examples=200, deadline=None)
@given(plan=PLANS, done=st.builds(Rounds, DONE, DONE), itemsize=st.sampled_from([2, 4, 8]),
       shared=st.booleans())
def test_a_traced_call_is_the_walks_operations_each_between_two_marks_on_its_stream(
        plan, done, itemsize, shared) -> None:
    plan, rank = plan
    if plan.chunk * itemsize > AREA:
        plan = AllToAllPlan(plan.size, plan.count, AREA // itemsize, plan.phase, plan.in_place)
    src, dst = 1 << 46, (1 << 46) + (1 << 30)
    want, got = Recorder(), MarkingRecorder()
    untraced, traced = engine(plan.size, rank, want, shared), engine(plan.size, rank, got, shared)
    untraced.done = traced.done = done
    untraced.enqueue(plan, src, dst, itemsize)
    tracer = AllToAllTracer(got)
    issue_traced(traced, tracer, CALLER, plan, src, dst, itemsize)
    assert traced.done == untraced.done == plan.after(done)
    # The reference mark on the caller's stream, which each of the call's streams waits for.
    streams = list(dict.fromkeys(traced.streams.values()))
    ref = got.calls[0]
    assert ref[:2] == ("event", CALLER)
    assert got.calls[1:1 + len(streams)] == [("wait event", s, ref[2]) for s in streams]
    body = got.calls[1 + len(streams):]
    # Then per operation: a mark on its stream, the operation (as untraced), a mark on its stream.
    assert len(body) == 3 * len(want.calls)
    for (before, op, after), untraced_op in zip(triples(body), want.calls, strict=True):
        assert op == untraced_op
        assert before[:2] == ("event", op[1]) and after[:2] == ("event", op[1])
    # The tracer's record of the call: per operation its plan stream, round and operation.
    assert len(tracer.calls) == 1 and tracer.calls[0][0] == ref[2]
    ops = issued(plan, rank, done)
    assert [(k, key, op) for key, k, op, _, _ in tracer.calls[0][1]] == ops
    for (key, _, _, before, after), (mark_before, op, mark_after) in zip(
            tracer.calls[0][1], triples(body), strict=True):
        assert (before, after) == (mark_before[2], mark_after[2])
        assert op[1] == traced.streams[key]
    spans = tracer.timeline()
    assert len(spans) == 1 and [(s.stream, s.round) for s in spans[0]] == [(key, k) for k, key, _ in ops]
    assert all(0 < s.start < s.end for s in spans[0])  # marks after the reference, in order


def test_an_untraced_call_records_no_event() -> None:
    device = MarkingRecorder()
    e = engine(4, 1, device)
    for _ in range(3):
        e.enqueue(AllToAllPlan(4, 4 * 300, 64), 1 << 46, 1 << 47, 4)
    assert device.calls and not [c for c in device.calls if c[0] in ("event", "wait event")]
    # ... and on simulated GPUs, which run them
    node = Node(3, 256, np.float32, via="reference")
    one_call(node, Phase.ALLREDUCE, 100, 2, False, "sum", np.random.default_rng(1))
    assert node.memory.events == 0 and not node.memory.reached


def absolute(node: Node, rank: int) -> list[list[tuple[OpSpan, int, int]]]:
    """Per call of ``rank``'s tracer, each span with the simulation's ticks of its marks."""
    tracer, reached = node.tracers[rank], node.memory.reached
    return [[(span, reached[a], reached[b]) for span, (*_, a, b) in zip(spans, ops, strict=True)]
            for spans, (_, ops) in zip(tracer.timeline(), tracer.calls, strict=True)]


@pytest.mark.parametrize("serial", [False, True])
@pytest.mark.parametrize("size", [2, 3, 4])
def test_traced_calls_on_simulated_gpus_span_every_operation_in_order(size: int, serial: bool) -> None:
    rng = np.random.default_rng(size + 10 * serial)
    node = Node(size, 256, np.float32, serial=serial, via="traced")
    calls = [(Phase.ALLREDUCE, 150, 3, False), (Phase.REDUCE_SCATTER, 70, 0, True),
             (Phase.ALLGATHER, 9, 0, False), (Phase.ALLREDUCE, 40, 1, True)]
    for phase, block, extra, in_place in calls:  # each checked bitwise against the reference
        one_call(node, phase, block, extra, in_place, "sum", rng)
    writes: dict[tuple, int] = {}  # (flag, value) -> the tick at which its write began, any rank
    for r in range(size):
        for spans in absolute(node, r):
            writes.update(((s.flag, s.value), a) for s, a, _ in spans if s.kind == WRITE)
    for r in range(size):
        timeline = node.tracers[r].timeline()
        assert len(timeline) == len(calls)  # per call
        for k, spans in enumerate(timeline):
            assert spans and all(0 < s.start < s.end for s in spans)
            assert {s.round for s in spans} == set(range(max(s.round for s in spans) + 1))
            kinds = {s.kind for s in spans}
            assert {COPY, WRITE} <= kinds and (FOLD in kinds) == (calls[k][0] is not Phase.ALLGATHER)
        for spans in absolute(node, r):
            by_stream: dict[int, list] = {}
            for span, a, b in spans:
                by_stream.setdefault(node.engines[r].streams[span.stream], []).append((a, b))
            for marks in by_stream.values():  # one CUDA stream runs its operations one by one
                assert all(b1 < a2 for (_, b1), (a2, _) in itertools.pairwise(marks))
            for span, _, b in spans:
                if span.kind == WAIT:  # released only once a peer (or this rank) wrote the flag
                    assert span.flag is not None
                    assert writes[(span.flag, span.value)] < b, span


def test_a_traced_call_gives_the_untraced_result_and_the_engine_goes_on_untraced() -> None:
    """The same calls, traced or not, from the same random draws: the same bytes everywhere
    (outputs, inputs, staging and flags)."""
    memories = []
    for via in ("reference", "traced"):
        rng, order = np.random.default_rng(5), np.random.default_rng(6)
        node = Node(4, 256, np.float32, via=via)
        # The streams' order drawn apart from the data and pieces: the traced calls have more
        # to run (their events), the data must not change with it.
        node.run_all = lambda _, op, node=node, order=order: Node.run_all(node, order, op)
        for phase in (Phase.ALLREDUCE, Phase.REDUCE_SCATTER, Phase.ALLREDUCE):
            one_call(node, phase, 90, 1, False, "sum", rng)
        node.via = "reference"  # after the block: untraced again, flags and slots carry on
        one_call(node, Phase.ALLREDUCE, 90, 1, False, "sum", rng)
        assert len(node.tracers[0].calls) == (3 if via == "traced" else 0)
        memories.append({i: b.tobytes() for i, b in node.memory.buffers.items()})
    assert memories[0] == memories[1]


def test_the_hook_holds_one_tracer_and_lets_it_go() -> None:
    hook = TraceHook()
    tracer = AllToAllTracer(MarkingRecorder())
    assert hook.tracer is None
    with hook.tracing(tracer) as inside:
        assert inside is tracer and hook.tracer is tracer
        with pytest.raises(RuntimeError, match="already being traced"), hook.tracing(tracer):
            pass
        assert hook.tracer is tracer
    assert hook.tracer is None
    with pytest.raises(KeyError), hook.tracing(tracer):
        raise KeyError("the block's own error")
    assert hook.tracer is None


def test_an_operation_before_any_call_is_refused() -> None:
    with pytest.raises(RuntimeError, match="before any call began"):
        AllToAllTracer(MarkingRecorder()).add("fold", 0, Signal(("folded", 0, 0), 1), 1, 2)


# -- the summaries ------------------------------------------------------------------------------


def wait(stream, flag, start: float, end: float, k: int = 0) -> OpSpan:
    return op_span(stream, k, Wait(flag, 3), start, end)


def call_spans(fold_wait: float, copy: float) -> list[OpSpan]:
    return [wait(("rs", 1), ("inbound_free", 0, 1), 0, 1),
            OpSpan(("rs", 1), COPY, 0, 1, 1 + copy, elements=10),
            OpSpan(("rs", 1), WRITE, 0, 1 + copy, 2 + copy, ("arrived", 1, 0), 3),
            wait("fold", ("arrived", 0, 1), 0, fold_wait),
            OpSpan("fold", FOLD, 0, fold_wait, fold_wait + 2, elements=10),
            wait("collect", ("gathered", 0, 1), 0, 0.5, k=1)]


def test_a_calls_summary() -> None:
    s = trace.summarize_alltoall(call_spans(fold_wait=7, copy=3))
    assert s.call == 9 and s.waits == 1 + 7 + 0.5 and s.longest_wait == 7 and s.spans == 6
    assert s.longest == "fold arrived[1] round 0"
    assert s.streams == {"rs 1": {WAIT: 1, COPY: 3, WRITE: 1}, "fold": {WAIT: 7, FOLD: 2},
                         "collect": {WAIT: 0.5}}
    assert "call 9000000.0 us" in s.line() and "fold arrived[1] round 0" in s.line()
    table = s.stream_lines()
    assert table[0].split() == ["stream", "wait", "write", "copy", "fold"]
    assert table[2].split() == ["fold", "7000000.0", "-", "-", "2000000.0"]
    empty = trace.summarize_alltoall([])
    assert (empty.call, empty.longest, empty.streams) == (0.0, "", {})


def test_the_median_over_calls_and_the_slowest_waits() -> None:
    calls = [call_spans(fold_wait=w, copy=c) for w, c in ((7, 3), (1, 5), (9, 4))]
    calls[1][-1] = wait("collect", ("gathered", 0, 1), 0, 2, k=1)  # longest in this call
    med = trace.median_alltoall([trace.summarize_alltoall(c) for c in calls])
    assert med.longest_wait == 7 and med.longest == "fold arrived[1] round 0 (2/3 calls)"
    assert med.streams["rs 1"][COPY] == 4 and med.streams["fold"][WAIT] == 7
    assert med.call == 9 and med.spans == 6
    assert trace.slowest_waits(calls, 3) == [("fold arrived[1] round 0", 7.0, 3),
                                             ("rs 1 inbound_free[1] round 0", 1.0, 3),
                                             ("collect gathered[1] round 1", 0.5, 3)]
    assert len(trace.slowest_waits(calls, 1)) == 1
    with pytest.raises(ValueError, match="no ce-twoshot call was traced"):
        trace.median_alltoall([])
    # A stream or kind one call lacks counts 0 in the median.
    shorter = [s for s in call_spans(1, 1) if s.stream != "collect"]
    both = trace.median_alltoall([trace.summarize_alltoall(c) for c in (calls[0], shorter, shorter)])
    assert both.streams["collect"] == {WAIT: 0.0}


def test_labels() -> None:
    assert stream_label(("ag", 3)) == "ag 3" and stream_label(["rs", 1]) == "rs 1"
    assert stream_label("collect") == "collect"
    assert flag_label(("gather_free", 2, 1)) == "gather_free[1]"
    assert flag_label(["folded", 0, 0]) == "folded[0]"
