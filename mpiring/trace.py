"""``ring_timeline(comm)`` and ``alltoall_timeline(comm)``: when each step of this rank's ring
calls, or each device operation of its ``ce-twoshot`` calls, ran, and where the time went.

Reference semantics, as plain code::

    with mpiring.trace.ring_timeline(comm) as timeline:
        comm.Allreduce(x, out, algorithm="ring")        # any ring calls
    timeline.calls[0]     # [Span(queue="copy", step="send", seq=3, start=..., end=...), ...]
    timeline.summary()    # medians over the calls: the call, the copies, the folds, the waits

A span is one step of one ring call on one queue (:mod:`mpiring.ring.transports.tracing`): on the
copy queue the wait for the next rank's "free" and the copy into its slot, on the fold queue
the wait for this rank's slot to be "full" and the fold (which, on a GPU, includes any wait for
SMs to run it). The block traces the ring pipeline of the communicator's GPU path (its host
path on a communicator without GPUs; on GPUs the ``ring`` row's, not ``ring-events``'s, whose
signals are host waits); each run of the pipeline is one entry of ``calls``
(a reduce-scatter or all-gather phase too). On a GPU the marks are CUDA events on the ring's
own streams, read when the block ends (after ``comm.synchronize()``). Tracing adds a mark
before and after each step, so a traced call is not a timed call: it shows where the time goes,
the benchmark says how much there is (``python -m tools.timeline`` in a checkout runs both, beside a
GEMM).

``ce-twoshot`` (GPU arrays only), as plain code::

    with mpiring.trace.alltoall_timeline(comm) as timeline:
        comm.Allreduce(x, out, algorithm="ce-twoshot")  # any ce-twoshot calls, any collective
    timeline.calls[0]   # [OpSpan(stream=("rs", 1), kind="copy", round=0, start=..., end=...),
                        #  OpSpan(stream="fold", kind="wait", round=0, flag=("arrived", 0, 2), ...), ...]
    timeline.summary()  # medians over the calls: the call, per stream and kind, the longest wait
    timeline.slowest_waits()  # the waits with the longest median, by stream, flag and round

Inside the block each ce-twoshot call is issued by the engine's Python walk (not the compiled
executor) with a CUDA event before and after each operation on its stream (a wait on a flag,
a flag write, a copy-engine copy, the fold), read when the block ends (after
``comm.synchronize()``): :mod:`mpiring.ring.alltoall_tracing` says what a span covers. The
results are those of an untraced call; after the block the calls go back to their own path.
The Python walk and the marks can take the host longer than the call takes the GPU: a stream
that waits for the host shows as gaps between spans, and as operations that look fast (the
GPU waited before them). ``python -m tools.timeline --algo ce-twoshot`` holds the calls' stream
until they are enqueued, so that the spans are the GPU's own.
"""

from __future__ import annotations

import contextlib
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .core.errors import CommunicatorClosedError
from .ring.alltoall_tracing import KINDS, WAIT, AllToAllTracer, OpSpan, flag_label, stream_label
from .ring.transports.tracing import (
    FOLD_STEP,
    SEND,
    WAIT_FREE,
    WAIT_FULL,
    Clock,
    CudaEventClock,
    CudaEvents,
    HostClock,
    Span,
    TracingTransport,
)

__all__ = ["AllToAllSummary", "AllToAllTimeline", "CallSummary", "OpSpan", "RingTimeline", "Span",
           "alltoall_timeline", "median_alltoall", "median_summary", "ring_timeline", "slowest_waits",
           "summarize", "summarize_alltoall"]


@dataclass(frozen=True)
class CallSummary:
    """Seconds of one ring call (or the median over calls, field by field): ``call`` from its
    start to its last step's end; per step kind the sum of its spans (``copies``, ``folds``,
    ``wait_full``, ``wait_free``); ``slowest_fold``: the longest single fold span."""

    call: float
    copies: float
    folds: float
    wait_full: float
    wait_free: float
    slowest_fold: float
    steps: int  # spans in the call

    def line(self) -> str:
        us = 1e6
        return (f"call {self.call * us:9.1f} us  copies {self.copies * us:9.1f}  folds "
                f"{self.folds * us:9.1f} (slowest {self.slowest_fold * us:8.1f})  waits: full "
                f"{self.wait_full * us:9.1f}, free {self.wait_free * us:9.1f}  ({self.steps} spans)")


def summarize(spans: Sequence[Span]) -> CallSummary:
    """One call's :class:`CallSummary`."""
    def total(step: str) -> float:
        return sum(s.seconds for s in spans if s.step == step)

    folds = [s.seconds for s in spans if s.step == FOLD_STEP]
    return CallSummary(max((s.end for s in spans), default=0.0), total(SEND), total(FOLD_STEP),
                       total(WAIT_FULL), total(WAIT_FREE), max(folds, default=0.0), len(spans))


def median_summary(summaries: Sequence[CallSummary]) -> CallSummary:
    """The median of each field over ``summaries`` (not one call's summary: a summary of them)."""
    if not summaries:
        raise ValueError("no ring call was traced")
    fields = CallSummary.__dataclass_fields__
    return CallSummary(**{f: type(getattr(summaries[0], f))(statistics.median(
        getattr(s, f) for s in summaries)) for f in fields})


class RingTimeline:
    """What :func:`ring_timeline` yields; ``calls`` is filled when the block ends."""

    def __init__(self) -> None:
        self.calls: list[list[Span]] = []

    def summary(self) -> CallSummary:
        """Medians over the traced calls (ValueError if none)."""
        return median_summary([summarize(c) for c in self.calls])


@contextlib.contextmanager
def ring_timeline(comm: Any) -> Iterator[RingTimeline]:
    """Trace this rank's ring calls made on ``comm`` inside the block (module docstring).
    Local: every rank may trace or not; the calls themselves are unchanged."""
    if comm.closed:
        raise CommunicatorClosedError("ring_timeline: this communicator is closed")
    pipeline = comm.ring_pipeline()  # the path whose pipeline runs the ring: GPU where there are GPUs
    clocks: list[Clock] = []

    def tracing(inner: Any) -> TracingTransport:
        clocks.append(CudaEventClock(inner.copy_stream.ptr, inner.fold_stream.ptr) if comm.gpu
                      else HostClock())
        return TracingTransport(inner, clocks[0])

    timeline = RingTimeline()
    try:
        with pipeline.wrapped(tracing) as tracer:
            yield timeline
            if comm.gpu:
                comm.synchronize()  # every mark has been reached
            timeline.calls = tracer.timeline()
    finally:
        for clock in clocks:
            clock.close()


# -- ce-twoshot ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllToAllSummary:
    """Seconds of one ce-twoshot call (or the median over calls: :func:`median_alltoall`):
    ``call`` from its reference mark to its last operation's end; ``streams``: per stream
    (``"rs 1"``, ``"fold"``, ``"ag 1"``, ``"collect"``) and per operation kind (``wait``,
    ``write``, ``copy``, ``fold``) the sum of its spans; ``waits``: every wait's span summed;
    ``longest_wait``: the longest single wait, and ``longest`` which one (stream, flag and its
    peer, round: ``"fold arrived[2] round 0"``; over calls the most frequent, with how often)."""

    call: float
    waits: float
    longest_wait: float
    longest: str
    streams: dict[str, dict[str, float]]
    spans: int  # spans in the call

    def line(self) -> str:
        us = 1e6
        return (f"call {self.call * us:9.1f} us  waits {self.waits * us:9.1f} (longest "
                f"{self.longest_wait * us:8.1f}: {self.longest or '-'})  ({self.spans} spans)")

    def stream_lines(self) -> list[str]:
        """A table: per stream, microseconds per operation kind ("-": none)."""
        us = 1e6
        lines = ["stream     " + "".join(f"{kind:>10s}" for kind in KINDS)]
        for stream, kinds in self.streams.items():
            lines.append(f"{stream:10s} " + "".join(
                f"{kinds[kind] * us:10.1f}" if kind in kinds else f"{'-':>10s}" for kind in KINDS))
        return lines


def _wait_name(span: OpSpan) -> str:
    assert span.flag is not None  # a wait names its flag
    return f"{stream_label(span.stream)} {flag_label(span.flag)} round {span.round}"


def summarize_alltoall(spans: Sequence[OpSpan]) -> AllToAllSummary:
    """One ce-twoshot call's :class:`AllToAllSummary`."""
    streams: dict[str, dict[str, float]] = {}
    for s in spans:
        kinds = streams.setdefault(stream_label(s.stream), {})
        kinds[s.kind] = kinds.get(s.kind, 0.0) + s.seconds
    waits = [s for s in spans if s.kind == WAIT]
    longest = max(waits, key=lambda s: s.seconds, default=None)
    return AllToAllSummary(max((s.end for s in spans), default=0.0), sum(s.seconds for s in waits),
                           longest.seconds if longest is not None else 0.0,
                           _wait_name(longest) if longest is not None else "", streams, len(spans))


def median_alltoall(summaries: Sequence[AllToAllSummary]) -> AllToAllSummary:
    """The median of each number over ``summaries`` (a stream's kind a call lacks counts 0), and
    the most frequent longest wait, with how often: ``"fold arrived[2] round 0 (14/20 calls)"``."""
    if not summaries:
        raise ValueError("no ce-twoshot call was traced")

    def median(values: Iterable[float]) -> float:
        return float(statistics.median(values))

    streams: dict[str, dict[str, float]] = {}
    for s in summaries:  # every stream and kind seen, in the order first seen
        for stream, kinds in s.streams.items():
            streams.setdefault(stream, {}).update(dict.fromkeys(kinds, 0.0))
    for stream, kinds in streams.items():
        for kind in kinds:
            kinds[kind] = median(s.streams.get(stream, {}).get(kind, 0.0) for s in summaries)
    which, times = Counter(s.longest for s in summaries).most_common(1)[0]
    return AllToAllSummary(median(s.call for s in summaries), median(s.waits for s in summaries),
                           median(s.longest_wait for s in summaries),
                           f"{which} ({times}/{len(summaries)} calls)" if which else "", streams,
                           int(statistics.median(s.spans for s in summaries)))


def slowest_waits(calls: Sequence[Sequence[OpSpan]], count: int = 5) -> list[tuple[str, float, int]]:
    """The ``count`` waits (by stream, flag and round) with the longest median over the calls
    that have them: (name, median seconds, calls that have it), longest first."""
    seen: dict[str, list[float]] = {}
    for spans in calls:
        for s in spans:
            if s.kind == WAIT:
                seen.setdefault(_wait_name(s), []).append(s.seconds)
    ranked = sorted(((name, float(statistics.median(v)), len(v)) for name, v in seen.items()),
                    key=lambda t: -t[1])
    return ranked[:count]


class AllToAllTimeline:
    """What :func:`alltoall_timeline` yields; ``calls`` is filled when the block ends."""

    def __init__(self) -> None:
        self.calls: list[list[OpSpan]] = []

    def summary(self) -> AllToAllSummary:
        """Medians over the traced calls (ValueError if none)."""
        return median_alltoall([summarize_alltoall(c) for c in self.calls])

    def slowest_waits(self, count: int = 5) -> list[tuple[str, float, int]]:
        """:func:`slowest_waits` of the traced calls."""
        return slowest_waits(self.calls, count)


@contextlib.contextmanager
def alltoall_timeline(comm: Any) -> Iterator[AllToAllTimeline]:
    """Trace this rank's ce-twoshot calls made on ``comm`` inside the block (module docstring).
    GPU arrays only (:class:`~mpiring.core.errors.UnavailableError` without GPUs). Local: every
    rank may trace or not; the calls' results are unchanged. Not nested."""
    if comm.closed:
        raise CommunicatorClosedError("alltoall_timeline: this communicator is closed")
    hook = comm.ce_twoshot_hook()
    marks = CudaEvents()
    timeline = AllToAllTimeline()
    try:
        with hook.tracing(AllToAllTracer(marks)) as tracer:
            yield timeline
            comm.synchronize()  # every mark has been reached
            timeline.calls = tracer.timeline()
    finally:
        marks.close()
