"""ce-twoshot's timeline: when each device operation of this rank's calls ran, on its stream.

Given an :class:`AllToAllTracer`, :meth:`AllToAllEngine.enqueue
<mpiring.ring.alltoall_engine.AllToAllEngine.enqueue>` (the engine's Python walk of the issue
order, not the compiled executor) puts a mark of the tracer's :class:`Marks` on each
operation's stream before and after it (on a GPU a CUDA event,
:class:`~.transports.tracing.CudaEvents`; the tests' simulated GPUs record theirs)::

    ("rs", o):  [wait inbound_free[o]] [copy -> o's inbound] [write o's arrived[me]]
    "fold":     [wait arrived[p]] ... [fold] [write p's inbound_free[me]] ... [write folded]
    ("ag", o):  [wait folded] [wait gather_free[o]] [copy -> o's gather] [write o's gathered[me]]
    "collect":  [wait gathered[o]] [copy -> my output] [write o's gather_free[me]] ...

Each span (:class:`OpSpan`) runs from the stream reaching the operation (the work before it on
that CUDA stream has run: where the plan's streams share one, as the pushes to every peer do
by default, that is the other peers' operations too) to the operation's end: for a wait, how
long the stream stood until the flag came (the peer named by the flag's index was late, or
its GPU, or the copies before it); for a copy, its time on the copy engine; for a write, the
write behind its fence; for a fold, its time on the SMs *including any wait for SMs*. Times
are seconds from the call's reference mark, recorded on the caller's stream and waited for by
every one of the call's streams (:meth:`AllToAllTracer.begin`), so no span starts before it.
A gap between one span's end and the next one's start on the same CUDA stream is time that
stream had nothing to run: the host had not enqueued it yet (the Python walk issues slower
than the compiled executor: hold the calls' stream until they are enqueued to see the GPU's
own pace, as ``python -m tools.timeline --algo ce-twoshot`` does).

Nothing here runs unless a caller sets a tracer in the communicator's :class:`TraceHook`
(:func:`mpiring.trace.alltoall_timeline`): the untraced call tests one attribute.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .alltoall_schedule import Copy, Flag, Fold, Operation, Signal, Stream, Wait

WAIT, WRITE, COPY, FOLD = KINDS = ("wait", "write", "copy", "fold")  # what a span's operation is


@dataclass(frozen=True)
class OpSpan:
    """One device operation of one ce-twoshot call: on the plan's ``stream`` (``("rs", o)``,
    ``"fold"``, ``("ag", o)``, ``"collect"``), an operation of ``kind`` (:data:`KINDS`) of round
    ``round`` of the call, from ``start`` to ``end`` seconds after the call's reference mark.
    A wait or write names its ``flag`` (name, the rank whose memory holds it, the peer it is
    about: node ranks) and ``value``; a copy or fold its ``elements``."""

    stream: Stream
    kind: str
    round: int
    start: float
    end: float
    flag: Flag | None = None
    value: int = 0
    elements: int = 0

    @property
    def seconds(self) -> float:
        return self.end - self.start


def stream_label(stream: Stream | list) -> str:
    """``"rs 2"`` for ``("rs", 2)``, ``"fold"`` for ``"fold"`` (a span read back from JSON
    holds a list)."""
    return stream if isinstance(stream, str) else f"{stream[0]} {stream[1]}"


def flag_label(flag: Flag | list) -> str:
    """``"arrived[2]"``: the flag's name and the peer it is about."""
    return f"{flag[0]}[{flag[2]}]"


def op_span(stream: Stream, k: int, op: Operation, start: float, end: float) -> OpSpan:
    """The span of ``op`` of round ``k`` on ``stream``."""
    if isinstance(op, Wait):
        return OpSpan(stream, WAIT, k, start, end, op.flag, op.value)
    if isinstance(op, Signal):
        return OpSpan(stream, WRITE, k, start, end, op.flag, op.value)
    if isinstance(op, Copy):
        return OpSpan(stream, COPY, k, start, end, elements=op.elements)
    if isinstance(op, Fold):
        return OpSpan(stream, FOLD, k, start, end, elements=op.elements)
    raise TypeError(f"unknown operation {op!r}")  # pragma: no cover - the schedule has no other


class Marks(Protocol):
    """Marks on a device's streams (handles are ints), read once the work has run."""

    def record(self, stream: int) -> Any:
        """A mark on ``stream``, reached once the work enqueued there so far ran."""
        ...

    def wait(self, stream: int, mark: Any) -> None:
        """``stream``'s later work waits until ``mark`` is reached."""
        ...

    def seconds(self, reference: Any, mark: Any) -> float:
        """Seconds from ``reference`` to ``mark``; valid once both have been reached."""
        ...

    def close(self) -> None:
        """Release what the marks hold."""
        ...


class AllToAllTracer:
    """The marks of ce-twoshot calls (the engine's :class:`~.alltoall_engine.OpTrace`): per call
    since the tracer was made, its reference mark and, per operation in issue order, its
    stream, round, operation and two marks; :meth:`timeline` reads them."""

    def __init__(self, marks: Marks) -> None:
        self.marks = marks
        self.calls: list[tuple[Any, list[tuple[Stream, int, Operation, Any, Any]]]] = []

    def begin(self, call_stream: int, streams: Iterable[int]) -> None:
        """A new call: its reference mark on ``call_stream`` (after what the call waits for
        there), which each of the call's ``streams`` then waits for."""
        reference = self.marks.record(call_stream)
        for stream in dict.fromkeys(streams):  # each once, in order
            self.marks.wait(stream, reference)
        self.calls.append((reference, []))

    def mark(self, stream: int) -> Any:
        return self.marks.record(stream)

    def add(self, stream: Stream, k: int, op: Operation, before: Any, after: Any) -> None:
        if not self.calls:
            raise RuntimeError("an operation traced before any call began (AllToAllTracer.begin)")
        self.calls[-1][1].append((stream, k, op, before, after))

    def timeline(self) -> list[list[OpSpan]]:
        """Per call, its spans in the order they were enqueued (read the marks: on a device,
        only once the calls' work has run)."""
        seconds = self.marks.seconds
        return [[op_span(stream, k, op, seconds(ref, a), seconds(ref, b)) for stream, k, op, a, b in ops]
                for ref, ops in self.calls]


class TraceHook:
    """Where one communicator's ce-twoshot calls look for a tracer: :attr:`tracer`, None outside
    :meth:`tracing` (made per communicator by :func:`mpiring.algorithms.ce_twoshot.trace_hook`,
    reached through ``Communicator.ce_twoshot_hook()``)."""

    def __init__(self) -> None:
        self.tracer: AllToAllTracer | None = None

    @contextlib.contextmanager
    def tracing(self, tracer: AllToAllTracer) -> Iterator[AllToAllTracer]:
        """Inside the block, this communicator's ce-twoshot calls are issued by the engine's
        Python walk with ``tracer``'s marks. Not nested: a second block raises."""
        if self.tracer is not None:
            raise RuntimeError("this communicator's ce-twoshot calls are already being traced")
        self.tracer = tracer
        try:
            yield tracer
        finally:
            self.tracer = None
