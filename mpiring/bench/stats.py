"""Statistics of timed repetitions and the bandwidth figures of nccl-tests.

Pure code; :func:`slowest_rank` takes any object with mpi4py's ``allgather`` (no import of
MPI here).

Definitions (nccl-tests, doc/PERFORMANCE.md):
  algbw = bytes / time                       (GB/s, 1 GB = 1e9 bytes)
  busbw = algbw * 2 (n - 1) / n              (allreduce over n ranks)
  busbw = algbw * (n - 1) / n                (reduce_scatter, allgather; bytes: the whole buffer)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

STAT_FIELDS = ("mean", "std", "min", "max", "median")
# nccl-tests' -a: how the ranks' times make the reported time
RANK0, AVERAGE, FASTEST, SLOWEST = 0, 1, 2, 3
BUS_FACTORS = {"allreduce": 2.0, "reduce_scatter": 1.0, "allgather": 1.0}  # times (n - 1) / n
AVERAGES = {RANK0: "rank 0", AVERAGE: "average", FASTEST: "minimum", SLOWEST: "maximum"}


@dataclass(frozen=True)
class Stats:
    """Per-iteration time in seconds, over timed repetitions."""

    mean: float
    std: float
    min: float
    max: float
    median: float

    def as_tuple(self) -> tuple[float, ...]:
        return tuple(getattr(self, name) for name in STAT_FIELDS)



def summarize(samples: list[float]) -> Stats:
    """Mean, sample standard deviation (0 for one sample), min, max and median."""
    if not samples:
        raise ValueError("no samples to summarize")
    values = [float(v) for v in samples]
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return Stats(
        mean=statistics.fmean(values),
        std=std,
        min=min(values),
        max=max(values),
        median=statistics.median(values),
    )


def slowest(per_rank: list[Stats]) -> Stats:
    """The slowest rank's figures: the maximum of every statistic over ranks."""
    if not per_rank:
        raise ValueError("no ranks to compare")
    return Stats(*(max(getattr(s, name) for s in per_rank) for name in STAT_FIELDS))


def slowest_rank(comm: Any, local: Stats) -> tuple[Stats, int]:
    """Collective: gather every rank's stats; return the per-statistic maximum and the rank
    with the largest median (every rank gets the same answer)."""
    return slowest_of([Stats(*t) for t in comm.allgather(local.as_tuple())])


def slowest_of(per_rank: list[Stats]) -> tuple[Stats, int]:
    """The per-statistic maximum over ranks, and the rank with the largest median."""
    worst = max(range(len(per_rank)), key=lambda r: per_rank[r].median)
    return slowest(per_rank), worst


def combine(per_rank: list[Stats], average: int = SLOWEST) -> tuple[Stats, int]:
    """The reported figures from every rank's, as nccl-tests' ``-a``: rank 0's (0), the mean
    (1), the minimum (2) or the maximum (3, the slowest rank) of each statistic over ranks;
    and the rank with the largest median (the slowest, whatever the mode)."""
    if not per_rank:
        raise ValueError("no ranks to combine")
    if average not in AVERAGES:
        raise ValueError(f"averaging mode must be one of {sorted(AVERAGES)}, got {average}")
    worst = max(range(len(per_rank)), key=lambda r: per_rank[r].median)
    if average == RANK0:
        return per_rank[0], worst
    picks: dict[int, Callable[[list[float]], float]] = {AVERAGE: statistics.fmean, FASTEST: min,
                                                        SLOWEST: max}
    pick = picks[average]
    return Stats(*(pick([getattr(s, name) for s in per_rank]) for name in STAT_FIELDS)), worst


def bus_factor(nranks: int, collective: str = "allreduce") -> float:
    """nccl-tests' bus-bandwidth factor: ``2 (n - 1) / n`` for allreduce, ``(n - 1) / n`` for
    reduce_scatter and allgather."""
    if nranks < 1:
        raise ValueError(f"rank count must be positive, got {nranks}")
    if collective not in BUS_FACTORS:
        raise ValueError(f"unknown collective {collective!r}: choose from {', '.join(BUS_FACTORS)}")
    return BUS_FACTORS[collective] * (nranks - 1) / nranks


def algbw(nbytes: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s (1e9 bytes per second)."""
    if seconds <= 0 or not math.isfinite(seconds):
        return math.nan
    return nbytes / seconds / 1e9


def busbw(nbytes: int, seconds: float, nranks: int, collective: str = "allreduce") -> float:
    """Bus bandwidth in GB/s: algbw times :func:`bus_factor`."""
    return algbw(nbytes, seconds) * bus_factor(nranks, collective)


def iterations_for(budget_s: float, per_iter_s: float, reps: int, max_iters: int) -> int:
    """Timed iterations per repetition so that ``reps`` repetitions fill ``budget_s``:
    at least 1, at most ``max_iters``."""
    if max_iters < 1:
        raise ValueError(f"iteration cap must be at least 1, got {max_iters}")
    if per_iter_s <= 0 or not math.isfinite(per_iter_s):
        return max_iters
    k = int(budget_s / (reps * per_iter_s))
    return max(1, min(max_iters, k))
