"""``--overlap gemm,train``: an allreduce beside matmuls, as a training step overlaps them.

Training overlaps gradient allreduces with matmuls. An allreduce that moves and adds data with
kernels (NCCL) takes SMs from the matmuls; one that moves data with the copy engines (mpiring's
``ring``) should leave them nearly alone, but its own small kernels may then wait for SMs. What
a user cares about is how long the two take together. Two workload shapes (:class:`Shape`):

  gemm   ``C = A @ B``, N x N float16 (``--gemm-size``, default 8192: 1.1 TFLOP, 1-2 ms on an
         H200), CuPy's cuBLAS matmul; the allreduce starts together with the first GEMM.
  train  a sequence of smaller GEMMs (``--train-gemm-size``, default 4096; bfloat16 through
         torch where it is importable, else float16 through CuPy, and the banner says so); the
         allreduce starts once the first GEMM is done, as a data-parallel backward pass issues
         a gradient bucket's allreduce after layer L and runs layers L-1.. beside it.
The GEMMs run on one non-blocking stream, the point's own allreduce call (buffers, algorithm,
batches, placement) on a second; neither waits for the other except where a shape says so.
The GPU side is :mod:`mpiring.bench.loads`; everything here runs on the CPU too.

The makespan (both shapes). A fixed amount of work per size: ``k`` allreduce calls and ``g``
GEMMs, fixed at the first algorithm measured at that size (the baseline, where it runs) so that
every algorithm at a size does the same work: ``k`` = that point's timed iterations, raised
until the calls span ``window_gemms`` GEMMs (:func:`window_calls`), ``g = after + max(1,
round(k * t_ar / t_one_gemm))`` (:func:`gemm_count`; at most MAX_GEMMS): the GEMMs take about
as long as the calls.
Per repetition, each part after a device synchronize and an MPI barrier:
  T_gemm  the ``g`` GEMMs alone, between two CUDA events;
  T_ar    the ``k`` calls alone;
  T_both  both at once: the GEMM stream is held on a host flag (a start gate) while its GEMMs
          are enqueued behind a start event S; the allreduce stream waits for S (train: for the
          event after the first GEMM); the flag is released; the ``k`` calls are enqueued. The
          makespan is the later of the two streams' end events, minus S.
  efficiency = (T_gemm + T_ar - T_both) / min(T_gemm, T_ar): 1 = the shorter one perfectly
          hidden, 0 = no better than one after the other, negative = worse than serial.
Reported: the slowest rank's (largest median T_both) medians over the repetitions, and the
efficiency of those three numbers, so the CSV's columns reproduce it. Train's first GEMM runs
before any call by construction: there perfect hiding is T_both = max(T_gemm, t_one + T_ar).

The slowdowns (gemm shape only; the columns ``gemm_slowdown`` and ``ar_slowdown``). Per
point, ``WARMUP_CALLS`` untimed calls first; then per repetition, each part after a device
synchronize and an MPI barrier:
  1. GEMM alone: ``GEMMS_ALONE`` GEMMs back to back between two CUDA events: ``t_gemm``.
  2. allreduce alone: ``k`` calls back to back between two CUDA events: ``t_ar``.
  3. both: ``n`` GEMMs are enqueued with an event after each (``e_0`` before the first), then
     the same ``k`` calls run between events ``a0`` and ``a1``. The GEMM stream runs without a
     gap from ``e_0`` to ``e_n`` (hence the floor on a GEMM, MIN_GEMM_S).
       allreduce time with the GEMM  = (a1 - a0) / k
       GEMM time with the allreduce  = mean duration e_i - e_(i-1) of the GEMMs that ran
                                       entirely inside [a0, a1], under the allreduce throughout
     A repetition counts only if the GEMMs outlasted the loop (``e_n >= a1``) and at least
     ``MIN_INSIDE`` of them fell inside it; otherwise every rank repeats it with twice the
     GEMMs (or twice the calls), at most ``MAX_ATTEMPTS`` times.
``k`` here is the point's own (:func:`window_calls` of its own time), ``n = LEAD + ceil(MARGIN *
k * t_ar * s / t_gemm)``, ``s`` the expected allreduce slowdown: the largest seen so far for the
algorithm (``FIRST_GUESS`` before any), doubled after a repetition whose GEMMs ran out.
Reported: each rank's median of each time; the GEMM slowdown of the worst-hit rank, the
allreduce's of the slowest rank's medians (a collective ends when its slowest rank does).

The SMs the allreduce holds: :func:`sms_held`, the seam where a communicator states a budget.
Events resolve about 0.5 us. The measurer is in :mod:`mpiring.bench.overlap_run`.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .. import algorithms

GEMMS_ALONE = 5  # GEMMs timed alone per repetition (slowdowns)
WARMUP_CALLS = 3  # untimed calls on the allreduce stream before a point's repetitions
MIN_WINDOW_GEMMS = 8  # the allreduce loop spans at least this many GEMM-alone times
MIN_INSIDE = 3  # GEMMs that must run entirely inside the loop for a repetition to count
LEAD = 2  # extra GEMMs: some run while the host is still enqueueing the rest
MARGIN = 1.25  # GEMMs enqueued for this multiple of the expected (slowed) loop
FIRST_GUESS = 2.0  # allreduce slowdown assumed before any is measured
MAX_ATTEMPTS = 4  # tries of one repetition before the point's overlap is given up
MAX_CALLS = 1_000_000
# GEMMs of one makespan repetition, at most: all are enqueued behind the start gate, and a stream
# that cannot run yet takes about a thousand launches before the host blocks (a deadlock then).
MAX_GEMMS = 256
MIN_GEMM_S = 100e-6  # a GEMM must outlast its launch (tens of us), or the stream idles

GEMM, TRAIN = "gemm", "train"
SHAPES = (GEMM, TRAIN)


# -- pure arithmetic: the slowdowns ------------------------------------------------------


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
    """One repetition of the slowdowns on one rank, in seconds per GEMM or per call."""

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


# -- pure arithmetic: the makespan -------------------------------------------------------


def efficiency(t_gemm: float, t_ar: float, t_both: float) -> float:
    """``(T_gemm + T_ar - T_both) / min(T_gemm, T_ar)``: 1 when the shorter of the two is
    perfectly hidden (``T_both = max``), 0 when they take as long as one after the other,
    negative when longer; NaN when a time is missing or not positive. Not clamped: a value
    above 1 means ``T_both`` came out below the longer one alone (noise, or clocks that moved)."""
    times = (t_gemm, t_ar, t_both)
    if not all(math.isfinite(t) and t > 0 for t in times):
        return math.nan
    return (t_gemm + t_ar - t_both) / min(t_gemm, t_ar)


def gemm_count(work_s: float, gemm_s: float, after: int = 0, max_gemms: int = MAX_GEMMS) -> int:
    """GEMMs of a makespan: ``after`` that run before the allreduce may start, then as many as
    take about ``work_s`` (the allreduce calls alone), at least one."""
    if not gemm_s > 0 or not math.isfinite(gemm_s):
        raise ValueError(f"a GEMM must take some time, got {gemm_s} s")
    beside = round(work_s / gemm_s) if math.isfinite(work_s) and work_s > 0 else 1
    return min(max_gemms, after + max(1, beside))


class Work(NamedTuple):
    """The fixed work of a makespan: ``calls`` allreduce calls and ``gemms`` GEMMs."""

    calls: int
    gemms: int


def makespan_work(ar_s: float, iters: int, gemm_s: float, after: int, window_gemms: int) -> Work:
    """The work of one size from its first measured point (``ar_s`` seconds per call, ``iters``
    timed iterations) and the shape's GEMM (``gemm_s`` alone, ``after``, ``window_gemms``)."""
    calls = window_calls(ar_s, gemm_s, iters, window_gemms)
    per_call = ar_s if math.isfinite(ar_s) and ar_s > 0 else gemm_s
    return Work(calls, gemm_count(calls * per_call, gemm_s, after))


class RankTimes(NamedTuple):
    """One makespan repetition on one rank, in seconds: the GEMMs alone, the calls alone, and
    when each stream ended after the common start when both ran at once."""

    t_gemm: float
    t_ar: float
    gemm_end: float
    ar_end: float

    @property
    def t_both(self) -> float:
        return max(self.gemm_end, self.ar_end)

    @property
    def ok(self) -> bool:
        """Whether it counts: every time finite and positive."""
        return all(math.isfinite(t) and t > 0 for t in self)


@dataclass(frozen=True)
class Makespan:
    """One shape's figures at one point (seconds), from the slowest rank; ``note`` when not
    measured (then the times are None)."""

    t_gemm_s: float | None = None
    t_ar_s: float | None = None
    t_both_s: float | None = None
    efficiency: float | None = None
    gemms: int = 0
    calls: int = 0
    rank: int | None = None  # the rank whose medians these are
    reps: int = 0
    note: str = ""


def combine_spans(per_rank: Sequence[Sequence[RankTimes]], work: Work) -> Makespan:
    """Per rank the median of T_gemm, T_ar and T_both over its repetitions; the rank with the
    largest median T_both, its three medians and their efficiency."""
    medians = [(statistics.median(s.t_gemm for s in spans), statistics.median(s.t_ar for s in spans),
                statistics.median(s.t_both for s in spans)) for spans in per_rank]
    rank = max(range(len(medians)), key=lambda r: medians[r][2])
    t_gemm, t_ar, t_both = medians[rank]
    eff = efficiency(t_gemm, t_ar, t_both)
    return Makespan(t_gemm, t_ar, t_both, eff if math.isfinite(eff) else None, work.gemms,
                    work.calls, rank, len(per_rank[0]))


# -- what a point reports ----------------------------------------------------------------


@dataclass(frozen=True)
class OverlapResult:
    """The figures of one point (seconds). The slowdown fields are None without the gemm shape
    or with a ``note`` saying why; ``makespans`` per shape name."""

    gemm_alone_s: float | None = None
    gemm_with_s: float | None = None
    gemm_slowdown: float | None = None
    ar_alone_s: float | None = None
    ar_with_s: float | None = None
    ar_slowdown: float | None = None
    calls: int = 0
    reps: int = 0
    note: str = ""
    makespans: Mapping[str, Makespan] = field(default_factory=dict)

    @property
    def notes(self) -> str:
        """Every note of the point: the slowdowns', then each shape's."""
        parts = [self.note] + [f"{name}: {m.note}" for name, m in self.makespans.items() if m.note]
        return "; ".join(p for p in parts if p)


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


@dataclass(frozen=True)
class Shape:
    """A workload shape: its GEMM ``load`` (what the timeline enqueues), one GEMM's time alone
    (agreed at set-up: the slowest rank's), how many GEMMs run before the allreduce may start,
    how many GEMM times the overlapped loop spans, whether the slowdowns are measured beside
    it, and what it is in words (for the banner and the figure)."""

    name: str
    load: Any
    gemm_s: float
    after: int = 0
    window_gemms: int = MIN_WINDOW_GEMMS
    slowdowns: bool = False
    label: str = ""


# -- the SMs an allreduce holds ------------------------------------------------------------


class SmHold(NamedTuple):
    """The SMs an algorithm's calls hold (None: not stated) and where that figure comes from."""

    sms: int | None
    source: str


ALL_SMS = "all: its kernels launch the grid they want"
# NCCL's channel caps, first the one that applies: to its collectives, and to its send/recv.
NCCL_CAPS = ("NCCL_MAX_NCHANNELS", "NCCL_MAX_NRINGS")
NCCL_P2P_CAPS = ("NCCL_MAX_P2P_NCHANNELS", *NCCL_CAPS)
# The NCCL rows (``Algorithm.nccl`` in the table) whose transfers are NCCL send/recv, not one
# NCCL collective: the table does not say which.
NCCL_SEND_RECV = frozenset({"nccl-ring"})


def nccl_caps(algorithm: str) -> tuple[str, ...]:
    """The environment variables that cap the channels of an NCCL row of the algorithm table
    (``nccl=True``), the first that applies first; () for any other name."""
    if algorithm not in algorithms.names(with_auto=False) or not algorithms.get(algorithm).nccl:
        return ()
    return NCCL_P2P_CAPS if algorithm in NCCL_SEND_RECV else NCCL_CAPS


def _positive(env: Mapping[str, str], name: str) -> int | None:
    try:
        value = int(env.get(name, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def sm_hold(comm: Any, algorithm: str, environ: Mapping[str, str] | None = None) -> SmHold:
    """The SMs ``algorithm``'s calls on ``comm`` hold, and why that number.

    mpiring's own rows (the ring's fold and copy kernels, the one-/two-shot kernels, oneshot-ll)
    hold ``comm.sm_budget`` where the communicator states one (``Communicator(sm_budget=N)``,
    ``MPIRING_SM_BUDGET``; also read as a callable ``sm_budget(algorithm) -> int | None`` per
    row), else whatever grid they want: None, "all". The NCCL rows are not bounded by it: they
    hold one thread block, so one SM, per channel, and NCCL's channel cap is what the
    environment sets (``NCCL_MAX_NCHANNELS``; ``NCCL_MAX_P2P_NCHANNELS`` first for send/recv),
    an upper bound; without one the count is NCCL's choice, unknown here, as for the rivals."""
    caps = nccl_caps(algorithm)
    if caps:
        env = os.environ if environ is None else environ
        for name in caps:
            cap = _positive(env, name)
            if cap is not None:
                return SmHold(cap, f"{name}={cap}: NCCL's channel cap, one block per channel")
        floor = _positive(env, "NCCL_MIN_NCHANNELS")
        return SmHold(None, "unknown: NCCL picks its channel count"
                      + (f" (at least {floor}: NCCL_MIN_NCHANNELS)" if floor else ""))
    if algorithm not in algorithms.names():
        return SmHold(None, "unknown: a rival's kernels launch the grid they want")
    budget = getattr(comm, "sm_budget", None)
    if callable(budget):
        budget = budget(algorithm)
    if budget is not None:
        return SmHold(int(budget), "comm.sm_budget")
    return SmHold(None, ALL_SMS)


def sms_held(comm: Any, algorithm: str) -> int | None:
    """The SMs ``algorithm``'s calls on ``comm`` hold, None for "all it wants" or unknown
    (:func:`sm_hold` says which, and why)."""
    return sm_hold(comm, algorithm).sms


def sms_label(sms: int | None, source: str) -> str:
    """The table's cell: the number, "all" (mpiring's kernels, no budget) or "?" (unknown)."""
    if sms is not None:
        return str(sms)
    return "all" if source.startswith("all") else "?"

