"""The makespan of --overlap on the CPU: its arithmetic (efficiency, GEMM counts, medians over
ranks), the SM seam, and the measurer's makespan over a simulated timeline (the work a size
fixes for every algorithm, repetitions that do not count)."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from mpi4py import MPI

from mpiring.bench.overlap import (
    ALL_SMS,
    GEMM,
    MAX_ATTEMPTS,
    MAX_GEMMS,
    SHAPES,
    TRAIN,
    Makespan,
    OverlapResult,
    RankTimes,
    Shape,
    Work,
    combine_spans,
    efficiency,
    gemm_count,
    makespan_work,
    sm_hold,
    sms_held,
    sms_label,
    window_calls,
)
from mpiring.bench.overlap_run import OverlapMeasurer
from mpiring.bench.results import MAKESPAN_COLUMNS

times = st.floats(min_value=1e-6, max_value=10.0, allow_nan=False, allow_infinity=False)


# -- efficiency ------------------------------------------------------------------------


@given(times, times)
def test_efficiency_is_1_when_the_shorter_is_hidden_and_0_when_serial(t_gemm, t_ar):
    assert efficiency(t_gemm, t_ar, max(t_gemm, t_ar)) == pytest.approx(1.0, rel=1e-9)
    assert efficiency(t_gemm, t_ar, t_gemm + t_ar) == pytest.approx(0.0, abs=1e-9)


@given(times, times, st.floats(min_value=0.0, max_value=1.0))
def test_efficiency_between_hidden_and_serial_lies_in_0_1(t_gemm, t_ar, where):
    lo, hi = max(t_gemm, t_ar), t_gemm + t_ar
    eff = efficiency(t_gemm, t_ar, lo + where * (hi - lo))
    assert -1e-9 <= eff <= 1 + 1e-9
    assert eff == pytest.approx(1 - where, abs=1e-6)  # linear in T_both over that range


@given(times, times, st.floats(min_value=1.001, max_value=10.0))
def test_efficiency_is_negative_when_worse_than_serial(t_gemm, t_ar, factor):
    assert efficiency(t_gemm, t_ar, factor * (t_gemm + t_ar)) < 0


@given(times, times, times, times)
def test_efficiency_is_symmetric_and_falls_as_the_makespan_grows(t_gemm, t_ar, a, b):
    # b longer than a by more than rounding: T_gemm + T_ar - T_both loses a's last bits
    # (hypothesis found a = 1e-6, b one ulp above it, on T_gemm = T_ar = 1)
    assume(b - a > 1e-12 * (t_gemm + t_ar + b))
    assert efficiency(t_gemm, t_ar, a) == efficiency(t_ar, t_gemm, a)
    assert efficiency(t_gemm, t_ar, a) > efficiency(t_gemm, t_ar, b)


def test_efficiency_examples_and_what_is_not_measurable():
    assert efficiency(10.0, 4.0, 11.0) == pytest.approx(0.75)  # 3 of the 4 hidden
    assert efficiency(10.0, 4.0, 16.0) == pytest.approx(-0.5)
    assert efficiency(10.0, 4.0, 9.0) == pytest.approx(1.25)  # not clamped: below the longer
    for bad in ((0.0, 1.0, 1.0), (1.0, -1.0, 1.0), (1.0, 1.0, math.nan), (math.inf, 1.0, 1.0)):
        assert math.isnan(efficiency(*bad))


# -- counts ----------------------------------------------------------------------------


def test_gemm_count_matches_the_calls_time():
    assert gemm_count(13.6e-3, 1.7e-3) == 8
    assert gemm_count(13.6e-3, 0.2e-3, after=1) == 1 + 68
    assert gemm_count(1e-6, 1.7e-3) == 1  # at least one beside the calls
    assert gemm_count(0.0, 1e-3, after=1) == 2 and gemm_count(math.nan, 1e-3) == 1
    assert gemm_count(1e3, 1e-6) == MAX_GEMMS
    with pytest.raises(ValueError):
        gemm_count(1.0, 0.0)


@given(st.floats(min_value=1e-5, max_value=1.0), st.floats(min_value=1e-4, max_value=1e-2),
       st.integers(min_value=0, max_value=3))
def test_gemm_count_is_within_half_a_gemm_of_the_work(work_s, gemm_s, after):
    g = gemm_count(work_s, gemm_s, after)
    assert g >= after + 1
    if g < MAX_GEMMS and work_s >= gemm_s:
        assert abs((g - after) * gemm_s - work_s) <= gemm_s / 2 + 1e-12


@given(st.floats(min_value=1e-6, max_value=0.1), st.integers(min_value=1, max_value=1000),
       st.sampled_from([(1.7e-3, 0, 8), (0.2e-3, 1, 64)]))
def test_makespan_work_spans_the_window_and_matches_its_gemms(ar_s, iters, shape):
    gemm_s, after, window = shape
    work = makespan_work(ar_s, iters, gemm_s, after, window)
    assert work.calls == window_calls(ar_s, gemm_s, iters, window) >= iters
    assert work.gemms == gemm_count(work.calls * ar_s, gemm_s, after)
    assert makespan_work(ar_s, iters, gemm_s, after, window) == work  # the same on every rank


def test_makespan_work_without_a_time_falls_back_on_the_gemm():
    assert makespan_work(math.nan, 5, 1e-3, 0, 8) == Work(5, 5)


# -- spans and their medians over ranks ------------------------------------------------------


def test_span_makespan_is_the_later_stream():
    assert RankTimes(1.0, 2.0, 1.5, 2.5).t_both == 2.5 and RankTimes(1.0, 2.0, 3.0, 2.5).t_both == 3.0
    assert RankTimes(1.0, 2.0, 1.5, 2.5).ok
    assert not RankTimes(1.0, 2.0, math.nan, 2.5).ok and not RankTimes(0.0, 2.0, 1.0, 2.0).ok


def test_combine_spans_takes_the_slowest_ranks_medians():
    fast = [RankTimes(10.0, 8.0, 10.5, 9.0), RankTimes(10.2, 8.1, 10.4, 9.1), RankTimes(9.9, 8.0, 10.6, 9.0)]
    slow = [RankTimes(11.0, 8.2, 11.0, 13.0), RankTimes(11.1, 8.0, 11.2, 12.0),
            RankTimes(50.0, 8.1, 11.0, 99.0)]
    res = combine_spans([fast, slow], Work(calls=40, gemms=8))
    assert res.rank == 1 and res.reps == 3 and (res.calls, res.gemms) == (40, 8)
    assert (res.t_gemm_s, res.t_ar_s, res.t_both_s) == (11.1, 8.1, 13.0)  # one outlier is not it
    assert res.efficiency == pytest.approx((11.1 + 8.1 - 13.0) / 8.1)
    assert res.note == ""


def test_makespan_shapes_and_columns_agree():
    assert set(MAKESPAN_COLUMNS) == set(SHAPES) == {GEMM, TRAIN}


# -- the SMs held ------------------------------------------------------------------------


class Budget:
    def __init__(self, budget):
        self.sm_budget = budget


def test_sms_held_reads_the_communicators_budget():
    assert sms_held(Budget(24), "ring") == 24 and sms_held(Budget(24), "oneshot-ll") == 24
    assert sm_hold(Budget(16), "twoshot") == (16, "comm.sm_budget")
    per_row = Budget(lambda algo: 8 if algo == "ring" else None)
    assert sms_held(per_row, "ring") == 8
    assert sm_hold(per_row, "oneshot", {}) == (None, ALL_SMS)  # no budget for this row
    assert sm_hold(Budget(None), "ring") == (None, ALL_SMS)
    assert sm_hold(object(), "ring", {}).sms is None
    # A rival's kernels are not mpiring's: the budget does not bound them.
    assert sm_hold(Budget(24), "torch-symm-1shot", {}).sms is None


def test_the_budget_does_not_bound_nccl():
    """NCCL's kernels are NCCL's: its channel cap, not mpiring's sm_budget, bounds them."""
    assert sm_hold(Budget(12), "nccl", {"NCCL_MAX_NCHANNELS": "16"}).sms == 16
    assert sm_hold(Budget(12), "nccl-ring", {}).sms is None


def test_nccl_holds_its_channel_cap_if_the_environment_sets_one():
    env = {"NCCL_MAX_NCHANNELS": "16"}
    assert sm_hold(object(), "nccl", env).sms == 16
    assert "NCCL_MAX_NCHANNELS=16" in sm_hold(object(), "nccl", env).source
    assert sm_hold(object(), "nccl-ring", dict(env, NCCL_MAX_P2P_NCHANNELS="4")).sms == 4
    assert sm_hold(object(), "nccl-ring", env).sms == 16
    unknown = sm_hold(object(), "nccl", {"NCCL_MIN_NCHANNELS": "8", "NCCL_MAX_NCHANNELS": "x"})
    assert unknown.sms is None and "unknown" in unknown.source and "at least 8" in unknown.source
    assert sm_hold(object(), "nccl", {}).source.startswith("unknown")


def test_sms_label():
    assert sms_label(24, "comm.sm_budget") == "24"
    assert sms_label(None, ALL_SMS) == "all" and sms_label(None, "unknown: ...") == "?"


# -- the measurer's makespan -------------------------------------------------------------


class Timeline:
    """Alone: GEMMs of ``gemm_s``, calls of ``ar_s[algo]``; together, the makespan of
    ``hidden`` overlap (1: the shorter one hidden); ``bad`` repetitions return NaN first."""

    def __init__(self, gemm_s=1e-3, hidden=0.5, bad=0):
        self.gemm_s, self.hidden, self.bad = gemm_s, hidden, bad
        self.ar_s = 50e-6
        self.together_calls: list[tuple[str, int, int, int]] = []

    def synchronize(self):
        pass

    def gemms_alone(self, load, n):
        return self.gemm_s

    def calls_alone(self, call, k):
        return self.ar_s

    def beside(self, load, call, k, n):
        raise AssertionError("no slowdowns without the gemm shape's flag")

    def together(self, load, call, k, g, after):
        self.together_calls.append((load, k, g, after))
        if self.bad:
            self.bad -= 1
            return math.nan, 1.0
        t_gemm, t_ar = g * self.gemm_s, k * self.ar_s
        both = t_gemm + t_ar - self.hidden * min(t_gemm, t_ar)
        return both, t_ar

    def close(self):
        pass


def shapes(gemm_s=1e-3):
    return [Shape(GEMM, "big", gemm_s), Shape(TRAIN, "small", gemm_s / 8, after=1, window_gemms=64)]


def test_every_algorithm_at_a_size_gets_the_first_ones_work():
    tl = Timeline()
    m = OverlapMeasurer(MPI.COMM_SELF, tl, shapes(), reps=3)
    first = m.measure(lambda: None, "nccl", 50e-6, 20, size=1 << 20)
    tl.ar_s = 200e-6  # a slower algorithm at the same size: the same calls and GEMMs
    second = m.measure(lambda: None, "ring", 200e-6, 5, size=1 << 20)
    for shape in (GEMM, TRAIN):
        a, b = first.makespans[shape], second.makespans[shape]
        assert (a.calls, a.gemms) == (b.calls, b.gemms)
        assert b.t_gemm_s == pytest.approx(a.t_gemm_s) and b.t_ar_s == pytest.approx(4 * a.t_ar_s)
    gemm, train = first.makespans[GEMM], first.makespans[TRAIN]
    assert (gemm.calls, gemm.gemms) == (160, 8)  # 8 GEMMs of 1 ms, 160 calls of 50 us
    assert (train.calls, train.gemms) == (160, 1 + 64)  # the first GEMM before the calls
    assert gemm.efficiency == pytest.approx(0.5) and gemm.reps == 3 and gemm.rank == 0
    assert {(load, after) for load, _, _, after in tl.together_calls} == {("big", 0), ("small", 1)}
    other = m.measure(lambda: None, "ring", 200e-6, 5, size=1 << 22)  # a new size: its own
    assert other.makespans[GEMM].calls == window_calls(200e-6, 1e-3, 5)
    own = m.measure(lambda: None, "ring", 200e-6, 5)  # no size: this point's own work
    assert own.makespans[GEMM].calls == other.makespans[GEMM].calls
    assert (first.gemm_slowdown, first.note) == (None, "")  # no shape asked for slowdowns


def test_a_repetition_that_does_not_count_is_repeated_then_given_up():
    tl = Timeline(bad=MAX_ATTEMPTS - 1)
    m = OverlapMeasurer(MPI.COMM_SELF, tl, shapes()[:1], reps=2)
    res = m.measure(lambda: None, "nccl", 50e-6, 20, size=64)
    assert res.makespans[GEMM].reps == 2 and len(tl.together_calls) == MAX_ATTEMPTS - 1 + 2
    tl = Timeline(bad=MAX_ATTEMPTS)
    m = OverlapMeasurer(MPI.COMM_SELF, tl, shapes()[:1], reps=2)
    res = m.measure(lambda: None, "nccl", 50e-6, 20, size=64)
    span = res.makespans[GEMM]
    assert span.t_both_s is None and span.note.startswith("makespan not measured")
    assert res.notes == f"gemm: {span.note}"


def test_results_notes_join_the_slowdowns_and_the_shapes():
    res = OverlapResult(note="overlap not measured: x",
                        makespans={GEMM: Makespan(), TRAIN: Makespan(note="makespan not measured")})
    assert res.notes == "overlap not measured: x; train: makespan not measured"


def test_the_measurer_needs_a_shape_and_describes_them():
    with pytest.raises(ValueError):
        OverlapMeasurer(MPI.COMM_SELF, Timeline(), [], reps=1)
    m = OverlapMeasurer(MPI.COMM_SELF, Timeline(),
                        [Shape(GEMM, "big", 1e-3, label="8192x8192 float16 GEMMs")], reps=1)
    m.note = "no start gate (x)"
    assert m.describe() == "gemm: 8192x8192 float16 GEMMs; no start gate (x)"


def test_the_slowest_rank_is_the_one_with_the_longest_makespan():
    """combine_spans reports the rank whose median T_both is largest, with that rank's T_gemm
    and T_ar: here rank 0 has the longer GEMMs but rank 1 the longer makespan."""
    longer_gemms = [RankTimes(12.0, 8.0, 12.5, 9.0)] * 3
    longer_makespan = [RankTimes(10.0, 8.0, 10.0, 14.0)] * 3
    res = combine_spans([longer_gemms, longer_makespan], Work(40, 8))
    assert (res.rank, res.t_both_s, res.t_gemm_s) == (1, 14.0, 10.0)


class EveryOtherTryBad(Timeline):
    """A timeline whose every second makespan repetition does not count."""

    def together(self, load, call, k, g, after):
        self.bad = len(self.together_calls) % 2  # the 2nd, 4th, ... try gives no time
        return super().together(load, call, k, g, after)


def test_tries_that_do_not_count_are_given_up_on_only_when_they_come_in_a_row():
    """MAX_ATTEMPTS bounds the failed tries of one repetition, not of the whole point: a point
    whose every other try fails still gets all its repetitions."""
    assert MAX_ATTEMPTS > 1
    m = OverlapMeasurer(MPI.COMM_SELF, EveryOtherTryBad(), shapes()[:1], reps=5)
    span = m.measure(lambda: None, "nccl", 50e-6, 20, size=64).makespans[GEMM]
    assert (span.note, span.reps) == ("", 5)
