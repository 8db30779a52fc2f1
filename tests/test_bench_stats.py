"""mpiring.bench.stats: statistics, nccl-tests' bandwidth definitions, iteration planning."""

from __future__ import annotations

import math
import statistics

import pytest

from mpiring.bench.stats import (
    Stats,
    algbw,
    bus_factor,
    busbw,
    iterations_for,
    slowest,
    slowest_of,
    slowest_rank,
    summarize,
)


def test_summarize():
    s = summarize([3.0, 1.0, 2.0, 10.0, 4.0])
    assert s.mean == pytest.approx(4.0)
    assert s.std == pytest.approx(statistics.stdev([3, 1, 2, 10, 4]))
    assert (s.min, s.max, s.median) == (1.0, 10.0, 3.0)


def test_summarize_an_even_count_takes_the_mean_of_the_middle_two():
    assert summarize([10.0, 1.0, 3.0, 2.0]).median == 2.5


def test_the_slowest_rank_is_the_one_with_the_largest_median():
    """Not the one with the largest maximum (one slow iteration), nor the largest mean."""
    spiky = Stats(mean=5, std=4, min=1, max=20, median=2)
    steady = Stats(mean=3, std=0, min=3, max=3, median=3)
    assert slowest_of([spiky, steady]) == (Stats(5, 4, 3, 20, 3), 1)
    assert slowest_rank(_FakeComm([spiky.as_tuple(), steady.as_tuple()]), spiky)[1] == 1


def test_summarize_one_sample_has_zero_std():
    s = summarize([2.5])
    assert s == Stats(2.5, 0.0, 2.5, 2.5, 2.5)


def test_summarize_empty():
    with pytest.raises(ValueError):
        summarize([])


def test_slowest_takes_each_statistic_max():
    a = Stats(mean=1, std=0.5, min=0.5, max=3, median=1)
    b = Stats(mean=2, std=0.1, min=1.9, max=2.1, median=2)
    assert slowest([a, b]) == Stats(2, 0.5, 1.9, 3, 2)
    assert slowest_of([a, b]) == (Stats(2, 0.5, 1.9, 3, 2), 1)


class _FakeComm:
    """allgather over pretend ranks."""

    def __init__(self, values):
        self.values = values

    def allgather(self, local):
        return self.values


def test_slowest_rank_gathers():
    per_rank = [(1, 0, 1, 1, 1), (5, 0, 5, 5, 5), (2, 0, 2, 2, 2)]
    stats, rank = slowest_rank(_FakeComm(per_rank), Stats(*per_rank[0]))
    assert rank == 1 and stats.median == 5


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_bus_factor(n, factor):
    assert bus_factor(n) == pytest.approx(factor)


# Lines of a published all_reduce_perf run (16 H100 ranks; size, time us, algbw, busbw):
NCCL_TESTS_16_RANKS = [
    (134217728, 1652.2, 81.24, 152.32),
    (1073741824, 6759.0, 158.86, 297.86),
    (8589934592, 47535, 180.71, 338.82),
    (16384, 138.6, 0.12, 0.22),
]


@pytest.mark.parametrize(("size", "time_us", "alg", "bus"), NCCL_TESTS_16_RANKS)
def test_bandwidths_match_nccl_tests(size, time_us, alg, bus):
    assert algbw(size, time_us * 1e-6) == pytest.approx(alg, abs=0.006)
    assert busbw(size, time_us * 1e-6, 16) == pytest.approx(bus, abs=0.011)


def test_busbw_is_algbw_times_factor():
    assert busbw(1 << 30, 0.01, 4) == pytest.approx(algbw(1 << 30, 0.01) * 1.5)
    assert algbw(1e9, 1.0) == pytest.approx(1.0)


def test_bandwidth_of_bad_time_is_nan():
    assert math.isnan(algbw(100, 0.0))
    assert math.isnan(busbw(100, float("nan"), 4))


@pytest.mark.parametrize(("budget", "t", "reps", "cap", "k"), [
    (0.15, 1e-5, 5, 1000, 1000),  # capped
    (0.15, 1e-3, 5, 1000, 30),
    (0.15, 0.1, 5, 1000, 1),  # at least one
    (1.0, 0.01, 5, 1000, 20),
    (0.15, 0.0, 5, 7, 7),
])
def test_iterations_for(budget, t, reps, cap, k):
    assert iterations_for(budget, t, reps, cap) == k


def test_combine_is_nccl_tests_averaging():
    from mpiring.bench.stats import combine

    a, b, c = Stats(1, 0.1, 0.9, 1.2, 1.0), Stats(3, 0.3, 2.9, 3.5, 3.0), Stats(2, 0, 2, 2, 2)
    assert combine([a, b, c], 0) == (a, 1)
    assert combine([a, b, c], 1)[0] == Stats(2, pytest.approx(0.4 / 3), pytest.approx(5.8 / 3),
                                             pytest.approx(6.7 / 3), 2.0)
    assert combine([a, b, c], 2) == (Stats(1, 0, 0.9, 1.2, 1.0), 1)
    assert combine([a, b, c], 3) == (slowest([a, b, c]), 1)
    with pytest.raises(ValueError):
        combine([a], 4)
    with pytest.raises(ValueError):
        combine([], 1)


@pytest.mark.parametrize(("n", "factor"), [(1, 0.0), (2, 0.5), (4, 0.75), (8, 0.875)])
def test_bus_factor_of_reduce_scatter_and_allgather_is_nccl_tests(n, factor):
    """nccl-tests' doc/PERFORMANCE.md: (n-1)/n for ReduceScatter and AllGather."""
    for collective in ("reduce_scatter", "allgather"):
        assert bus_factor(n, collective) == pytest.approx(factor)
        assert busbw(1 << 20, 1e-3, n, collective) == pytest.approx(algbw(1 << 20, 1e-3) * factor)
    assert bus_factor(n, "allreduce") == pytest.approx(2 * factor)
    with pytest.raises(ValueError, match="unknown collective"):
        bus_factor(n, "alltoall")
