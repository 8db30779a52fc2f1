"""The repetitions of ``--overlap`` on every rank and their agreement across ranks, over any
:class:`Timeline`: the GPU's is :class:`mpiring.bench.loads.GpuTimeline`, the tests' a
simulated one. What is measured, and the arithmetic: :mod:`mpiring.bench.overlap`.

Every count that a collective call depends on (calls per loop, GEMMs) comes from figures all
ranks share (the point's agreed median time, the GEMM times agreed at set-up) and passes
through :func:`~mpiring.bench.measure.agree` besides; every repetition is one ``agree`` of
every rank's figures, so all ranks keep or repeat it alike.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from .measure import agree
from .overlap import (
    FIRST_GUESS,
    GEMMS_ALONE,
    MAX_ATTEMPTS,
    MAX_CALLS,
    MIN_INSIDE,
    WARMUP_CALLS,
    Makespan,
    OverlapResult,
    RankTimes,
    Rep,
    Shape,
    Work,
    combine,
    combine_spans,
    gemms_to_enqueue,
    makespan_work,
    rep_from_marks,
    shortfall,
    window_calls,
)

TimedCall = Callable[[], None]  # one collective call of the point, bound: what the measurer times


class Timeline(Protocol):
    """What the measurer needs of the GPU: times in seconds, every method returning once the
    GPU work it enqueued is done."""

    def synchronize(self) -> None:
        """Wait for all work on the device."""

    def gemms_alone(self, load: Any, n: int) -> float:
        """Seconds per GEMM of ``n`` GEMMs of ``load`` back to back, alone."""

    def calls_alone(self, call: TimedCall, k: int) -> float:
        """Seconds per call of ``k`` calls back to back on the allreduce stream, alone."""

    def beside(self, load: Any, call: TimedCall, k: int, n: int) -> tuple[Sequence[float], float, float]:
        """Enqueue ``n`` GEMMs, then run ``k`` calls: the GEMMs' marks, the loop's start and end
        (seconds after the first mark)."""

    def together(self, load: Any, call: TimedCall, k: int, g: int, after: int) -> tuple[float, float]:
        """``g`` GEMMs and ``k`` calls from one start event, the calls once ``after`` GEMMs are
        done: when the GEMM stream and when the allreduce stream ended, after the start."""

    def close(self) -> None:
        """Release what the timeline holds."""


_LACK = {"gemms": "outlasted the GEMMs enqueued", "calls": f"held fewer than {MIN_INSIDE} whole GEMMs"}


class OverlapMeasurer:
    """Runs the repetitions of each point on every rank and agrees on them: the slowdowns beside
    the shape that asks for them, and every shape's makespan."""

    def __init__(self, world: Any, timeline: Timeline, shapes: Sequence[Shape], reps: int) -> None:
        if not shapes:
            raise ValueError("--overlap needs at least one workload shape")
        self.world, self.timeline, self.reps = world, timeline, reps
        self.shapes = tuple(shapes)
        self._guess: dict[str, float] = {}  # per algorithm: the largest allreduce slowdown
        self._work: dict[tuple[int, str], Work] = {}  # per (size, shape): the makespan's work
        self.note = ""  # about the timeline, for the banner (e.g. it runs without its gate)

    def describe(self) -> str:
        """The shapes in words, for the banner."""
        parts = [f"{s.name}: {s.label}" if s.label else s.name for s in self.shapes]
        return "; ".join(parts + ([self.note] if self.note else []))

    def close(self) -> None:
        self.timeline.close()

    def measure(self, call: TimedCall, algo: str, ar_s: float, iters: int,
                size: int | None = None) -> OverlapResult:
        """Collective: the overlap figures of one point whose calls take ``ar_s`` alone, timed
        ``iters`` times per repetition; ``size`` (bytes) keys the makespan's work, which the
        first point of a size fixes for every later one (None: this point's own)."""
        agree(self.world, lambda: self.timeline.calls_alone(call, WARMUP_CALLS))
        result = OverlapResult()
        for shape in self.shapes:
            if shape.slowdowns:
                result = self._slowdowns(call, shape, algo, ar_s, iters)
        spans = {shape.name: self._makespan(call, shape, ar_s, iters, size) for shape in self.shapes}
        return replace(result, makespans=spans)

    # -- the makespan ------------------------------------------------------------------

    def work(self, shape: Shape, ar_s: float, iters: int, size: int | None) -> Work:
        """Collective: the makespan's work at ``size`` (fixed by its first point)."""
        key = None if size is None else (size, shape.name)
        if key is not None and key in self._work:
            return self._work[key]
        mine = makespan_work(ar_s, iters, shape.gemm_s, shape.after, shape.window_gemms)
        work = max(agree(self.world, lambda: mine, share=True))  # equal: from shared figures
        if key is not None:
            self._work[key] = work
        return work

    def _makespan(self, call: TimedCall, shape: Shape, ar_s: float, iters: int,
                  size: int | None) -> Makespan:
        work = self.work(shape, ar_s, iters, size)
        per_rank: list[list[RankTimes]] = [[] for _ in range(self.world.size)]
        attempts = 0
        while len(per_rank[0]) < self.reps:
            spans = agree(self.world, functools.partial(self._span, call, shape, work), share=True)
            if not all(s.ok for s in spans):
                attempts += 1
                if attempts >= MAX_ATTEMPTS:
                    return Makespan(gemms=work.gemms, calls=work.calls,
                                    note=f"makespan not measured: {attempts} tries gave a time "
                                         "that is not a positive number")
                continue
            attempts = 0
            for mine, span in zip(per_rank, spans, strict=True):
                mine.append(span)
        return combine_spans(per_rank, work)

    def _span(self, call: TimedCall, shape: Shape, work: Work) -> RankTimes:
        tl, world = self.timeline, self.world
        tl.synchronize()
        world.Barrier()
        t_gemm = tl.gemms_alone(shape.load, work.gemms) * work.gemms
        tl.synchronize()
        world.Barrier()
        t_ar = tl.calls_alone(call, work.calls) * work.calls
        tl.synchronize()
        world.Barrier()
        gemm_end, ar_end = tl.together(shape.load, call, work.calls, work.gemms, shape.after)
        return RankTimes(t_gemm, t_ar, gemm_end, ar_end)

    # -- the slowdowns -----------------------------------------------------------------

    def _slowdowns(self, call: TimedCall, shape: Shape, algo: str, ar_s: float,
                   iters: int) -> OverlapResult:
        own = window_calls(ar_s, shape.gemm_s, iters, shape.window_gemms)
        calls = max(agree(self.world, lambda: own, share=True))  # equal: from shared figures
        guess = self._guess.get(algo, FIRST_GUESS)
        seen = 1.0
        per_rank: list[list[Rep]] = [[] for _ in range(self.world.size)]
        attempts = 0  # of the current repetition
        while len(per_rank[0]) < self.reps:
            n = gemms_to_enqueue(calls * ar_s, shape.gemm_s, guess)
            reps = agree(self.world, functools.partial(self._rep, call, shape, calls, n),
                         share=True)
            lack = shortfall(reps)
            if lack:
                attempts += 1
                if attempts >= MAX_ATTEMPTS:
                    return OverlapResult(note=f"overlap not measured: after {attempts} tries the "
                                              f"loop of {calls} calls still {_LACK[lack]}")
                if lack == "gemms":
                    guess *= 2
                else:
                    calls = min(MAX_CALLS, 2 * calls)
                continue
            attempts = 0
            for mine, rep in zip(per_rank, reps, strict=True):
                mine.append(rep)
            seen = max([seen] + [r.ar_slowdown for r in reps if math.isfinite(r.ar_slowdown)])
            guess = seen
        self._guess[algo] = seen
        return combine(per_rank, calls)

    def _rep(self, call: TimedCall, shape: Shape, calls: int, n: int) -> Rep:
        tl, world = self.timeline, self.world
        tl.synchronize()
        world.Barrier()
        gemm_alone = tl.gemms_alone(shape.load, GEMMS_ALONE)
        tl.synchronize()
        world.Barrier()
        ar_alone = tl.calls_alone(call, calls)
        tl.synchronize()
        world.Barrier()
        marks, a0, a1 = tl.beside(shape.load, call, calls, n)
        return rep_from_marks(gemm_alone, ar_alone, calls, marks, a0, a1)
