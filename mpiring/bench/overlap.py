"""``--overlap gemm``: how much an allreduce and a large matmul slow each other down.

Training overlaps gradient allreduces with matmuls. An allreduce that moves and adds data with
kernels (NCCL) takes SMs from the matmul; one that moves data with the copy engines (mpiring's
``ring``) should leave it nearly alone. This measures both slowdowns for every algorithm and
size, NCCL included.

The two loads
  GEMM       ``C = A @ B``, N x N float16 (``--gemm-size``, default 8192: 1.1 TFLOP, 1-2 ms on
             an H200), CuPy's cuBLAS matmul on a non-blocking stream of its own.
  allreduce  the point's own call (buffers, algorithm, batches, placement of its timing), on a
             second non-blocking stream: neither stream ever waits for the other.

Per point, ``WARMUP_CALLS`` untimed calls on the allreduce stream first; then per repetition,
each part after a device synchronize and an MPI barrier:
  1. GEMM alone: ``GEMMS_ALONE`` GEMMs back to back between two CUDA events: ``t_gemm``.
  2. allreduce alone: ``k`` calls back to back between two CUDA events: ``t_ar``.
  3. both: ``n`` GEMMs are enqueued on the GEMM stream with an event after each (``e_0`` before
     the first), then the same ``k`` calls run on the allreduce stream between events ``a0``
     and ``a1``. Enqueueing a GEMM takes the host microseconds and the GPU milliseconds, so
     the GEMM stream runs without a gap from ``e_0`` to ``e_n`` (hence the floor on a
     GEMM, MIN_GEMM_S). Times are read relative to ``e_0``, which both streams' events follow.
       allreduce time with the GEMM  = (a1 - a0) / k
       GEMM time with the allreduce  = mean duration e_i - e_(i-1) of the GEMMs that ran
                                       entirely inside [a0, a1], under the allreduce throughout
     A repetition counts only if the GEMMs outlasted the loop (``e_n >= a1``: contention the
     whole time) and at least ``MIN_INSIDE`` of them fell inside it; otherwise every rank
     repeats it with twice the GEMMs (or twice the calls), at most ``MAX_ATTEMPTS`` times
     before the point's overlap is reported as not measured.

How many: ``k`` = the point's timed iterations, raised until ``k * t_ar`` spans
``MIN_WINDOW_GEMMS`` GEMMs; it is the same on every rank (the calls are collective).
``n = LEAD + ceil(MARGIN * k * t_ar * s / t_gemm)``, ``s`` being the expected allreduce
slowdown: the largest seen at this point so far (before its first repetition: at the
algorithm's previous point, else ``FIRST_GUESS``), doubled after a repetition whose GEMMs ran
out. Enough GEMMs to outlast the slowed loop, without many left to wait for after it.

Reported per point: each rank's median of each time over the repetitions; the GEMM slowdown
is the largest over ranks of (median with / median alone), with that rank's two times; the
allreduce's is the slowest rank's median with over the slowest rank's median alone (a
collective ends when its slowest rank does). Events resolve about 0.5 us.

Pure arithmetic first (tested on CPU), then :class:`OverlapMeasurer` (the repetitions and their
agreement across ranks, over any "load") and :class:`GemmLoad` (the CuPy side).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .measure import agree

GEMMS_ALONE = 5  # GEMMs timed alone per repetition
WARMUP_CALLS = 3  # untimed calls on the allreduce stream before a point's repetitions
MIN_WINDOW_GEMMS = 8  # the allreduce loop spans at least this many GEMM-alone times
MIN_INSIDE = 3  # GEMMs that must run entirely inside the loop for a repetition to count
LEAD = 2  # extra GEMMs: some run while the host is still enqueueing the rest
MARGIN = 1.25  # GEMMs enqueued for this multiple of the expected (slowed) loop
FIRST_GUESS = 2.0  # allreduce slowdown assumed before any is measured
MAX_ATTEMPTS = 4  # tries of one repetition before the point's overlap is given up
MAX_CALLS = 1_000_000
MIN_GEMM_S = 100e-6  # a GEMM must outlast its launch (tens of us), or the stream idles


# -- pure arithmetic -------------------------------------------------------------------


def window_calls(ar_s: float, gemm_s: float, iters: int, min_window_gemms: int = MIN_WINDOW_GEMMS,
                 max_calls: int = MAX_CALLS) -> int:
    """Allreduce calls in the overlapped loop: at least ``iters``, and enough that the loop
    (``calls * ar_s``) spans ``min_window_gemms`` GEMMs of ``gemm_s``."""
    if ar_s <= 0 or not math.isfinite(ar_s):
        return max(1, iters)
    needed = math.ceil(min_window_gemms * gemm_s / ar_s)
    return max(1, min(max_calls, max(iters, needed)))


def gemms_to_enqueue(window_s: float, gemm_s: float, slowdown_guess: float,
                     margin: float = MARGIN, lead: int = LEAD) -> int:
    """GEMMs to enqueue so they outlast an allreduce loop of ``window_s`` (alone) that the GEMM
    slows down ``slowdown_guess`` times."""
    if gemm_s <= 0:
        raise ValueError(f"a GEMM must take some time, got {gemm_s} s")
    return lead + max(1, math.ceil(margin * window_s * max(1.0, slowdown_guess) / gemm_s))


def gemms_inside(marks: Sequence[float], a0: float, a1: float) -> list[float]:
    """Durations of the GEMMs that ran entirely inside ``[a0, a1]``; GEMM ``i`` ran from
    ``marks[i - 1]`` to ``marks[i]`` (events around back-to-back GEMMs, one time base)."""
    return [end - start for start, end in zip(marks, marks[1:], strict=False)
            if start >= a0 and end <= a1]


def slowdown(with_s: float, alone_s: float) -> float:
    """Time with the other load over time alone (NaN if not measurable)."""
    if not alone_s > 0 or not math.isfinite(with_s):
        return math.nan
    return with_s / alone_s


@dataclass(frozen=True)
class Rep:
    """One repetition on one rank, in seconds per GEMM or per allreduce call."""

    gemm_alone: float
    ar_alone: float
    gemm_with: float  # NaN when no GEMM ran entirely inside the loop
    ar_with: float
    inside: int  # GEMMs entirely inside the loop
    covered: bool  # the GEMMs outlasted the loop

    @property
    def ar_slowdown(self) -> float:
        return slowdown(self.ar_with, self.ar_alone)


def rep_from_marks(gemm_alone: float, ar_alone: float, calls: int, marks: Sequence[float],
                   a0: float, a1: float) -> Rep:
    """A repetition from its three parts: the alone times, and the events of the overlapped
    part (GEMM marks and the loop's ``a0``/``a1``, one time base)."""
    inside = gemms_inside(marks, a0, a1)
    gemm_with = statistics.fmean(inside) if inside else math.nan
    return Rep(gemm_alone, ar_alone, gemm_with, (a1 - a0) / calls, len(inside),
               bool(marks) and marks[-1] >= a1)


def shortfall(reps: Sequence[Rep], min_inside: int = MIN_INSIDE) -> str:
    """What a repetition (every rank's part) lacked: "gemms" (they ran out before the loop
    ended), "calls" (the loop held too few whole GEMMs), or "" (it counts)."""
    if not all(r.covered for r in reps):
        return "gemms"
    if any(r.inside < min_inside for r in reps):
        return "calls"
    return ""


@dataclass(frozen=True)
class OverlapResult:
    """The figures of one point (seconds); all None with a ``note`` when not measured."""

    gemm_alone_s: float | None = None
    gemm_with_s: float | None = None
    gemm_slowdown: float | None = None
    ar_alone_s: float | None = None
    ar_with_s: float | None = None
    ar_slowdown: float | None = None
    calls: int = 0
    reps: int = 0
    note: str = ""


def combine(per_rank: Sequence[Sequence[Rep]], calls: int) -> OverlapResult:
    """Per rank the median of each time over its repetitions; the GEMM slowdown of the
    worst-hit rank (with its times), the allreduce slowdown of the slowest rank's times."""
    medians = [{f: statistics.median(getattr(r, f) for r in reps)
                for f in ("gemm_alone", "gemm_with", "ar_alone", "ar_with")} for reps in per_rank]
    worst = max(medians, key=lambda m: slowdown(m["gemm_with"], m["gemm_alone"]))
    ar_alone = max(m["ar_alone"] for m in medians)
    ar_with = max(m["ar_with"] for m in medians)
    return OverlapResult(worst["gemm_alone"], worst["gemm_with"],
                         slowdown(worst["gemm_with"], worst["gemm_alone"]), ar_alone, ar_with,
                         slowdown(ar_with, ar_alone), calls, len(per_rank[0]))


# -- the repetitions, over any load ------------------------------------------------------


class OverlapMeasurer:
    """Runs the repetitions of each point on every rank and agrees on them.

    ``load`` provides ``synchronize()``, ``gemms_alone(n)`` and ``calls_alone(call, k)``
    (seconds per GEMM / per call), and ``both(call, k, n)`` returning the GEMM marks and the
    loop's ``a0``, ``a1`` (seconds, one time base); :class:`GemmLoad` is the GPU one.
    ``gemm_s`` is the agreed time of one GEMM alone, measured at set-up."""

    def __init__(self, world: Any, load: Any, reps: int, gemm_s: float) -> None:
        self.world, self.load, self.reps, self.gemm_s = world, load, reps, gemm_s
        self._guess: dict[str, float] = {}  # per algorithm: the largest allreduce slowdown

    def measure(self, call: Callable[[], None], algo: str, ar_s: float, iters: int) -> OverlapResult:
        """Collective: the overlap figures of one point whose calls take ``ar_s`` alone."""
        calls = window_calls(ar_s, self.gemm_s, iters)
        guess = self._guess.get(algo, FIRST_GUESS)
        seen = 1.0
        per_rank: list[list[Rep]] = [[] for _ in range(self.world.size)]
        agree(self.world, lambda: self.load.calls_alone(call, min(calls, WARMUP_CALLS)))
        attempts = 0  # of the current repetition
        while len(per_rank[0]) < self.reps:
            n = gemms_to_enqueue(calls * ar_s, self.gemm_s, guess)
            reps = agree(self.world, functools.partial(self._rep, call, calls, n), share=True)
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

    def _rep(self, call: Callable[[], None], calls: int, n: int) -> Rep:
        load, world = self.load, self.world
        load.synchronize()
        world.Barrier()
        gemm_alone = load.gemms_alone(GEMMS_ALONE)
        load.synchronize()
        world.Barrier()
        ar_alone = load.calls_alone(call, calls)
        load.synchronize()
        world.Barrier()
        marks, a0, a1 = load.both(call, calls, n)
        return rep_from_marks(gemm_alone, ar_alone, calls, marks, a0, a1)


_LACK = {"gemms": "outlasted the GEMMs enqueued", "calls": f"held fewer than {MIN_INSIDE} whole GEMMs"}


# -- the GPU side -------------------------------------------------------------------------


class GemmLoad:
    """A square float16 matmul on its own non-blocking CuPy stream, and a second non-blocking
    stream for the allreduce; everything timed with CUDA events."""

    dtype = "float16"

    def __init__(self, size: int, seed: int = 0) -> None:
        import cupy

        self.cp = cupy
        self.size = size
        self.gemm_stream = cupy.cuda.Stream(non_blocking=True)
        self.ar_stream = cupy.cuda.Stream(non_blocking=True)
        with self.gemm_stream:
            rng = cupy.random.RandomState(seed)
            self.a = rng.standard_normal((size, size), dtype=cupy.float32).astype(cupy.float16)
            self.b = rng.standard_normal((size, size), dtype=cupy.float32).astype(cupy.float16)
            self.c = cupy.empty((size, size), dtype=cupy.float16)
        self._events: list[Any] = []
        self.synchronize()

    @property
    def flop(self) -> int:
        """Floating-point operations of one GEMM."""
        return 2 * self.size**3

    @property
    def nbytes(self) -> int:
        return 3 * self.size * self.size * 2

    def describe(self, gemm_s: float) -> str:
        return (f"{self.size}x{self.size} {self.dtype} GEMM on its own stream, "
                f"{gemm_s * 1e3:.3g} ms alone ({self.flop / gemm_s / 1e12:.0f} TFLOP/s)")

    def _marks(self, count: int) -> list[Any]:
        while len(self._events) < count:
            self._events.append(self.cp.cuda.Event())
        return self._events[:count]

    def _seconds(self, begin: Any, end: Any) -> float:
        return self.cp.cuda.get_elapsed_time(begin, end) / 1e3

    def _enqueue_gemms(self, marks: Sequence[Any]) -> None:
        """One GEMM between each pair of consecutive ``marks`` (events) on the GEMM stream."""
        stream = self.gemm_stream
        marks[0].record(stream)
        with stream:
            for mark in marks[1:]:
                self.cp.matmul(self.a, self.b, out=self.c)
                mark.record(stream)

    def synchronize(self) -> None:
        self.cp.cuda.Device().synchronize()

    def calibrate(self, warmup: int = 2) -> float:
        """Seconds per GEMM alone, after a warm-up."""
        self._enqueue_gemms(self._marks(warmup + 1))
        self.synchronize()
        return self.gemms_alone(GEMMS_ALONE)

    def gemms_alone(self, n: int) -> float:
        marks = self._marks(n + 1)
        self._enqueue_gemms(marks)
        marks[-1].synchronize()
        return self._seconds(marks[0], marks[-1]) / n

    def calls_alone(self, call: Callable[[], None], calls: int) -> float:
        begin, end = self._marks(2)
        with self.ar_stream:
            begin.record(self.ar_stream)
            for _ in range(calls):
                call()
            end.record(self.ar_stream)
        end.synchronize()
        return self._seconds(begin, end) / calls

    def both(self, call: Callable[[], None], calls: int, n: int) -> tuple[list[float], float, float]:
        """Enqueue ``n`` GEMMs, then run ``calls`` calls: the GEMM marks and the loop's start
        and end, in seconds after the first mark."""
        marks = self._marks(n + 3)
        gemm_marks, a0, a1 = marks[:n + 1], marks[n + 1], marks[n + 2]
        self._enqueue_gemms(gemm_marks)
        with self.ar_stream:
            a0.record(self.ar_stream)
            for _ in range(calls):
                call()
            a1.record(self.ar_stream)
        a1.synchronize()
        gemm_marks[-1].synchronize()
        first = gemm_marks[0]
        return ([self._seconds(first, m) for m in gemm_marks], self._seconds(first, a0),
                self._seconds(first, a1))
