"""``ring_timeline(comm)``: when each step of this rank's ring calls ran, and where the time went.

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
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .core.errors import CommunicatorClosedError
from .ring.transports.tracing import (
    FOLD_STEP,
    SEND,
    WAIT_FREE,
    WAIT_FULL,
    Clock,
    CudaEventClock,
    HostClock,
    Span,
    TracingTransport,
)

__all__ = ["CallSummary", "RingTimeline", "Span", "median_summary", "ring_timeline", "summarize"]


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
