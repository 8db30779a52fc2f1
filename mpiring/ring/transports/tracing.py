"""The ring's timeline: a transport that records when each step of a call ran, on each queue.

Issue 14 asks where a ring call's time goes beside a GEMM: in the copies, in the waits for a
peer's signal, or in folds that wait for SMs. :class:`TracingTransport` wraps any
:class:`~mpiring.ring.transports.base.RingTransport` and puts a mark of a :class:`Clock` before and
after the steps of each queue (the same marks on the host transport, where a step runs at once,
and on CUDA streams, where a mark is an event and times what the GPU did)::

    copy queue:  [wait free seq] [send seq]          (then post full seq)
    fold queue:  [wait full seq] [fold seq]          (then post free seq)

so each span's ``end - start`` is, for a wait, how long the queue stood until the peer's signal
(beside a GEMM: also until the steps before it had run), and for a fold, its time on the SMs
*including the wait for SMs to run it*. Spans are in seconds since the call began: the clock's
``begin`` mark, taken before the call's start on its queues, so that no span starts before it.
A send span covers the copy only; a send of zero elements has a span of no length. Nothing here
runs unless a caller wraps the transport (:func:`mpiring.trace.ring_timeline`): the ring's own
path has no tracing branch.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..schedule import Source
from .base import CallBuffers, RingTransport

COPY, FOLD = "copy", "fold"  # the queues
WAIT_FREE, SEND, WAIT_FULL, FOLD_STEP = "wait free", "send", "wait full", "fold"  # the steps
QUEUE_OF = {WAIT_FREE: COPY, SEND: COPY, WAIT_FULL: FOLD, FOLD_STEP: FOLD}


@dataclass(frozen=True)
class Span:
    """One step of one ring call: on ``queue``, ``step`` of transfer ``seq``, from ``start`` to
    ``end`` seconds after the call began."""

    queue: str
    step: str
    seq: int
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Clock(ABC):
    """Marks on the transport's queues, read once the call's work has run."""

    @abstractmethod
    def begin(self, call: CallBuffers) -> Any:
        """The reference mark of ``call``, taken before the transport's ``begin``: every mark on
        the queues comes after it."""

    @abstractmethod
    def mark(self, queue: str) -> Any:
        """A mark on ``queue`` (COPY or FOLD), after the work enqueued there so far."""

    @abstractmethod
    def seconds(self, reference: Any, mark: Any) -> float:
        """Seconds from ``reference`` to ``mark``; valid once both have been reached."""

    def close(self) -> None:  # noqa: B027 - only device clocks hold anything
        """Release what the marks hold."""


class HostClock(Clock):
    """``time.perf_counter``: the host transport runs each step at once, so the host's time is
    the step's time."""

    def begin(self, call: CallBuffers) -> float:
        return time.perf_counter()

    def mark(self, queue: str) -> float:
        return time.perf_counter()

    def seconds(self, reference: float, mark: float) -> float:
        return mark - reference


class TracingTransport(RingTransport):
    """``inner`` with a mark before and after each wait, send and fold (module docstring).
    ``calls`` holds, per call since it was made, the raw marks; :meth:`timeline` reads them."""

    def __init__(self, inner: RingTransport, clock: Clock) -> None:
        self.inner, self.clock = inner, clock
        self.rank, self.size, self.slot_bytes = inner.rank, inner.size, inner.slot_bytes
        self.calls: list[tuple[Any, list[list[Any]]]] = []  # (reference, [[step, seq, a, b]])
        self._steps: list[list[Any]] = []
        # The send (copy queue) or fold (fold queue) whose seq the post after it tells.
        self._pending: dict[str, list[Any] | None] = {COPY: None, FOLD: None}

    def _around(self, step: str, seq: int, work: Any, *args: Any) -> list[Any]:
        queue = QUEUE_OF[step]
        before = self.clock.mark(queue)
        work(*args)
        entry = [step, seq, before, self.clock.mark(queue)]
        self._steps.append(entry)
        return entry

    def begin(self, call: CallBuffers) -> None:
        reference = self.clock.begin(call)  # before the queues start: no span begins before it
        self.inner.begin(call)
        self._steps = []
        self.calls.append((reference, self._steps))

    def end(self) -> None:
        self.inner.end()

    def wait_slot_free(self, slot: int, seq: int) -> None:
        self._around(WAIT_FREE, seq, self.inner.wait_slot_free, slot, seq)

    def send(self, slot: int, source: Source, start: int, count: int) -> None:
        self._pending[COPY] = self._around(SEND, -1, self.inner.send, slot, source, start, count)

    def post_slot_full(self, slot: int, seq: int) -> None:
        self.inner.post_slot_full(slot, seq)
        self._tell_seq(COPY, seq)  # the pipeline posts each send's seq right after it

    def wait_slot_full(self, slot: int, seq: int) -> None:
        self._around(WAIT_FULL, seq, self.inner.wait_slot_full, slot, seq)

    def mark_sent(self, index: int) -> None:
        self.inner.mark_sent(index)

    def wait_sent(self, index: int) -> None:
        self.inner.wait_sent(index)

    def fold(self, slot: int, start: int, count: int, reduce: bool, out_start: int) -> None:
        self._pending[FOLD] = self._around(FOLD_STEP, -1, self.inner.fold, slot, start, count,
                                           reduce, out_start)

    def post_slot_free(self, slot: int, seq: int) -> None:
        self.inner.post_slot_free(slot, seq)
        self._tell_seq(FOLD, seq)

    def _tell_seq(self, queue: str, seq: int) -> None:
        entry = self._pending[queue]
        if entry is not None:
            entry[1] = seq
            self._pending[queue] = None

    def copy_input(self) -> None:
        self.inner.copy_input()

    def slot_capacity(self, dtype: np.dtype) -> int:
        return self.inner.slot_capacity(dtype)

    def close(self, abandon: bool = False) -> None:
        self.inner.close(abandon)

    def timeline(self) -> list[list[Span]]:
        """Per call, its spans in the order they were enqueued (read the clock: on a device,
        only once the calls' work has run)."""
        seconds = self.clock.seconds
        return [[Span(QUEUE_OF[step], step, seq, seconds(ref, a), seconds(ref, b))
                 for step, seq, a, b in steps] for ref, steps in self.calls]


class CudaEvents:
    """CUDA events (timing enabled) recorded on streams given by handle: each :meth:`record`
    makes one (tracing is a measurement mode: made per mark, freed by :meth:`close`). Read once
    the marks have been reached (after ``Communicator.synchronize``). The marks of
    :class:`CudaEventClock` and of ce-twoshot's tracer (:mod:`mpiring.ring.alltoall_tracing`)."""

    def __init__(self) -> None:
        import cupy

        self._rt = cupy.cuda.runtime
        self._events: list[int] = []

    def record(self, stream: int) -> int:
        """A new event recorded on ``stream``: reached once the work enqueued there so far ran."""
        event = self._rt.eventCreate()
        self._events.append(event)
        self._rt.eventRecord(event, stream)
        return event

    def wait(self, stream: int, event: int) -> None:
        """``stream``'s later work waits until ``event`` is reached."""
        self._rt.streamWaitEvent(stream, event, 0)

    def seconds(self, reference: int, mark: int) -> float:
        """Seconds from ``reference`` to ``mark`` (both reached)."""
        return self._rt.eventElapsedTime(reference, mark) / 1e3

    def close(self) -> None:
        for event in self._events:
            self._rt.eventDestroy(event)
        self._events.clear()


class CudaEventClock(Clock):
    """:class:`CudaEvents` recorded on the transport's copy and fold streams; read once the
    calls have run (after ``Communicator.synchronize``)."""

    def __init__(self, copy_stream: int, fold_stream: int) -> None:
        self._events = CudaEvents()
        self._streams = {COPY: copy_stream, FOLD: fold_stream}

    def begin(self, call: CallBuffers) -> int:
        # On the call's own stream, ahead of the start event that the copy and fold streams wait
        # for: every mark on them completes after it. A reference on one of those streams would
        # not order the other's first mark (both wait only for the start), so that mark could read
        # a few microseconds before the call began, more beside another process's kernels.
        return self._events.record(call.stream.ptr)

    def mark(self, queue: str) -> int:
        return self._events.record(self._streams[queue])

    def seconds(self, reference: int, mark: int) -> float:
        return self._events.seconds(reference, mark)

    def close(self) -> None:
        self._events.close()
