"""mpiring.bench.overlap on the CPU: the arithmetic of --overlap gemm's slowdowns, and the
repetitions of mpiring.bench.overlap_run over a simulated GPU timeline (what the real
GpuTimeline reports, with chosen slowdowns). The makespan: tests/test_bench_makespan.py."""

from __future__ import annotations

import math

import pytest
from mpi4py import MPI

from mpiring.bench.overlap import (
    FIRST_GUESS,
    GEMM,
    MARGIN,
    MIN_INSIDE,
    MIN_WINDOW_GEMMS,
    WARMUP_CALLS,
    Rep,
    Shape,
    combine,
    gemms_inside,
    gemms_to_enqueue,
    rep_from_marks,
    shortfall,
    slowdown,
    window_calls,
)
from mpiring.bench.overlap_run import OverlapMeasurer


def test_window_calls_span_enough_gemms():
    assert window_calls(ar_s=10e-6, gemm_s=1.5e-3, iters=100) == 1200  # 8 GEMMs of 1.5 ms
    assert window_calls(ar_s=1e-3, gemm_s=1.5e-3, iters=100) == 100  # iters already span 66 ms
    assert window_calls(ar_s=35e-3, gemm_s=1.5e-3, iters=1) == 1
    assert window_calls(ar_s=1e-9, gemm_s=1.0, iters=1, max_calls=50) == 50
    assert window_calls(ar_s=0.0, gemm_s=1e-3, iters=7) == 7
    k = window_calls(ar_s=3e-6, gemm_s=2e-3, iters=1)
    assert k * 3e-6 >= MIN_WINDOW_GEMMS * 2e-3


def test_gemms_to_enqueue_outlast_the_slowed_loop():
    n = gemms_to_enqueue(window_s=30e-3, gemm_s=1.5e-3, slowdown_guess=2.0, margin=1.25, lead=2)
    assert n == 2 + 50
    assert gemms_to_enqueue(30e-3, 1.5e-3, 0.5) == gemms_to_enqueue(30e-3, 1.5e-3, 1.0)
    assert gemms_to_enqueue(0.0, 1e-3, 2.0) == 3  # at least one past the lead
    with pytest.raises(ValueError):
        gemms_to_enqueue(1.0, 0.0, 1.0)


def test_only_gemms_entirely_inside_the_loop_count():
    marks = [0.0, 1.0, 2.1, 3.3, 4.5, 5.5]  # GEMMs [0,1] [1,2.1] [2.1,3.3] [3.3,4.5] [4.5,5.5]
    assert gemms_inside(marks, 0.5, 4.6) == pytest.approx([1.1, 1.2, 1.2])
    assert gemms_inside(marks, 1.0, 2.1) == pytest.approx([1.1])  # edges count as inside
    assert gemms_inside(marks, 0.5, 0.9) == []
    assert gemms_inside([], 0, 1) == []


def test_slowdown():
    assert slowdown(3.0, 2.0) == 1.5
    assert math.isnan(slowdown(1.0, 0.0)) and math.isnan(slowdown(math.nan, 1.0))


def test_rep_from_marks():
    marks = [0.0, 1.0, 2.2, 3.4, 4.6, 5.8]
    rep = rep_from_marks(gemm_alone=1.0, ar_alone=0.1, calls=40, marks=marks, a0=0.5, a1=4.9)
    assert rep.inside == 3 and rep.gemm_with == pytest.approx(1.2)
    assert rep.ar_with == pytest.approx(4.4 / 40) and rep.ar_slowdown == pytest.approx(1.1)
    assert rep.covered
    short = rep_from_marks(1.0, 0.1, 40, marks, a0=0.5, a1=6.0)
    assert not short.covered
    none_inside = rep_from_marks(1.0, 0.1, 4, marks, a0=0.5, a1=1.5)
    assert none_inside.inside == 0 and math.isnan(none_inside.gemm_with)


def rep(gemm_with=1.1, ar_with=0.2, inside=5, covered=True, gemm_alone=1.0, ar_alone=0.1):
    return Rep(gemm_alone, ar_alone, gemm_with, ar_with, inside, covered)


def test_shortfall_asks_for_more_gemms_before_more_calls():
    assert shortfall([rep(), rep()]) == ""
    assert shortfall([rep(), rep(covered=False, inside=0)]) == "gemms"
    assert shortfall([rep(inside=MIN_INSIDE - 1), rep()]) == "calls"


def test_combine_takes_the_worst_gemm_rank_and_the_slowest_allreduce_rank():
    per_rank = [
        [rep(gemm_with=1.05, ar_with=0.20), rep(gemm_with=1.07, ar_with=0.22),
         rep(gemm_with=1.06, ar_with=0.21)],
        [rep(gemm_with=1.25, gemm_alone=1.2, ar_with=0.25, ar_alone=0.12)] * 3,
    ]
    res = combine(per_rank, calls=40)
    assert res.gemm_slowdown == pytest.approx(1.06)  # rank 0: 1.06 / 1.0 beats 1.25 / 1.2
    assert (res.gemm_alone_s, res.gemm_with_s) == (1.0, pytest.approx(1.06))
    assert (res.ar_alone_s, res.ar_with_s) == (0.12, 0.25)
    assert res.ar_slowdown == pytest.approx(0.25 / 0.12)
    assert (res.calls, res.reps, res.note) == (40, 3, "")


class SimulatedLoad:
    """A GPU timeline without a GPU: GEMMs of ``gemm_s`` alone, calls of ``ar_s`` alone; beside
    each other the GEMMs take ``gemm_slow`` and the calls ``ar_slow`` times longer. The loop
    starts ``lead_s`` after the first GEMM mark. Together from one start (the makespan), the
    shorter part is hidden up to ``hidden`` of it."""

    def __init__(self, gemm_s=1e-3, ar_s=50e-6, gemm_slow=1.2, ar_slow=1.5, lead_s=0.3e-3,
                 gemm_cap=None, hidden=1.0):
        self.gemm_s, self.ar_s, self.hidden = gemm_s, ar_s, hidden
        self.gemm_slow, self.ar_slow, self.lead_s = gemm_slow, ar_slow, lead_s
        self.gemm_cap = gemm_cap  # GEMMs that actually run (a broken enqueue), or None
        self.both_calls: list[tuple[int, int]] = []
        self.calls = 0

    def synchronize(self):
        pass

    def gemms_alone(self, load, n):
        return self.gemm_s

    def calls_alone(self, call, k):
        for _ in range(k):
            call()
        return self.ar_s

    def together(self, load, call, k, g, after):
        for _ in range(k):
            call()
        t_gemm, t_ar = g * self.gemm_s, k * self.ar_s
        both = t_gemm + t_ar - self.hidden * min(t_gemm, t_ar)
        return (both, t_ar) if t_gemm >= t_ar else (t_gemm, both)

    def close(self):
        pass

    def beside(self, load, call, k, n):
        self.both_calls.append((k, n))
        for _ in range(k):
            call()
        ran = n if self.gemm_cap is None else min(n, self.gemm_cap)
        marks = [i * self.gemm_s * self.gemm_slow for i in range(ran + 1)]
        a0 = self.lead_s
        return marks, a0, a0 + k * self.ar_s * self.ar_slow


def gemm_shape(load):
    return Shape(GEMM, "the GEMM", load.gemm_s, slowdowns=True)


def measure(load, reps=3, iters=20, algo="ring", measurer=None):
    counter = []
    m = measurer or OverlapMeasurer(MPI.COMM_SELF, load, [gemm_shape(load)], reps)
    res = m.measure(lambda: counter.append(1), algo, load.ar_s, iters)
    return res, m, len(counter)


def test_measures_the_simulated_slowdowns():
    load = SimulatedLoad(gemm_slow=1.2, ar_slow=1.5)
    res, _, ncalls = measure(load)
    assert res.note == "" and res.reps == 3
    assert res.gemm_slowdown == pytest.approx(1.2) and res.ar_slowdown == pytest.approx(1.5)
    assert res.gemm_alone_s == load.gemm_s and res.ar_alone_s == load.ar_s
    k = window_calls(load.ar_s, load.gemm_s, 20)
    assert res.calls == k == 160
    work = res.makespans[GEMM]
    assert (work.calls, work.gemms) == (k, 8)  # 160 calls of 50 us: 8 GEMMs of 1 ms
    # then alone and beside per repetition, and the makespan's alone and together
    assert ncalls == WARMUP_CALLS + 3 * 2 * k + 3 * 2 * work.calls
    first_n = load.both_calls[0][1]
    assert first_n == gemms_to_enqueue(k * load.ar_s, load.gemm_s, FIRST_GUESS)
    assert load.both_calls[1][1] < first_n  # then sized from the slowdown seen (1.5)


def test_more_gemms_when_the_loop_outlasts_them():
    load = SimulatedLoad(ar_slow=6.0)  # beyond FIRST_GUESS * MARGIN: the first try runs dry
    assert 6.0 > FIRST_GUESS * MARGIN
    res, m, _ = measure(load)
    assert res.note == "" and res.ar_slowdown == pytest.approx(6.0)
    ns = [n for _, n in load.both_calls]
    assert ns[1] > ns[0] and len(load.both_calls) == 3 + 1
    m.timeline = load2 = SimulatedLoad(ar_slow=6.0)  # the algorithm's next point starts from 6x
    res2, _, _ = measure(load2, measurer=m)
    assert res2.note == "" and len(load2.both_calls) == 3  # no try wasted


def test_more_calls_when_too_few_gemms_fit_inside():
    load = SimulatedLoad(gemm_slow=4.0)  # 8 GEMM-alone times hold 2 slowed GEMMs, at most
    res, _, _ = measure(load)
    ks = [k for k, _ in load.both_calls]
    assert ks[0] < ks[-1] and res.calls == ks[-1]
    assert res.note == "" and res.gemm_slowdown == pytest.approx(4.0)


def test_gives_up_with_a_note_when_the_gemms_never_outlast_the_loop():
    load = SimulatedLoad(gemm_cap=3)
    res, _, _ = measure(load)
    assert res.gemm_slowdown is None and res.ar_slowdown is None
    assert res.note.startswith("overlap not measured: after 4 tries")
    assert "outlasted the GEMMs" in res.note
    assert res.makespans[GEMM].t_both_s is not None  # the makespan is measured all the same
    assert res.notes == res.note


def test_the_boundaries_of_a_repetition_that_counts():
    """A loop that ends exactly at the last GEMM mark is covered, and exactly MIN_INSIDE GEMMs
    inside it are enough (event times tie at their 0.5 us resolution)."""
    exact = rep_from_marks(1.0, 0.1, 10, [0.0, 1.0, 2.0, 3.0, 4.0], a0=0.0, a1=4.0)
    assert exact.covered and exact.inside == 4
    assert shortfall([rep(inside=MIN_INSIDE), rep()]) == ""
