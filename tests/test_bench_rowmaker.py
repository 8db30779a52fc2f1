"""mpiring.bench.rowmaker: a row reports its point's median time (and the bandwidths from it),
a failed point's row keeps its verdict and its count of wrong elements and no time, and a
speed-up divides by the baseline's timed row of the same collective, size and placement."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mpiring.bench import rowmaker
from mpiring.bench.collectives import ALLREDUCE, REDUCE_SCATTER
from mpiring.bench.measure import Outcome, Point
from mpiring.bench.stats import Stats, algbw, busbw

RANKS = 2


def sweep(baseline: str = "nccl-direct") -> SimpleNamespace:
    """What make_row and speedup read of a run (rows of other libraries: no communicator asked)."""
    return SimpleNamespace(world=SimpleNamespace(size=RANKS), comm=SimpleNamespace(), mode="gpu",
                           baseline=baseline, dtype=np.dtype(np.float32), rows=[], variants={})


def point(algo: str, collective: str = ALLREDUCE, nbytes: int = 4096) -> Point:
    return Point(nbytes, nbytes // 4, "float32", "sum", algo, None, "out", collective)


def test_a_row_reports_the_median_and_the_bandwidths_from_it() -> None:
    stats = Stats(mean=5e-6, std=4e-6, min=1e-6, max=20e-6, median=2e-6)
    row = rowmaker.make_row(sweep(), point("torch"), Outcome("ok", "OK", stats=stats, wrong=0, iters=7))
    assert row.time_us == pytest.approx(2.0) and row.mean_us == pytest.approx(5.0)
    assert (row.min_us, row.max_us) == (pytest.approx(1.0), pytest.approx(20.0))
    assert row.algbw_gbs == pytest.approx(algbw(4096, 2e-6))
    assert row.busbw_gbs == pytest.approx(busbw(4096, 2e-6, RANKS, ALLREDUCE))
    assert (row.status, row.check, row.wrong, row.iters) == ("ok", "OK", 0, 7)


def test_a_failed_point_keeps_its_verdict_and_its_wrong_elements_and_no_time() -> None:
    out = Outcome("fail", "FAIL", note="rank 1: 3 of 1024 elements wrong", wrong=3)
    row = rowmaker.make_row(sweep(), point("torch"), out)
    assert (row.status, row.check, row.wrong) == ("fail", "FAIL", 3)
    assert row.time_us is None and not row.timed and "3 of 1024 elements wrong" in row.note
    assert rowmaker.speedup(sweep(), row) is None


def _row(sw: SimpleNamespace, algo: str, time_us: float, collective: str = ALLREDUCE,
         status: str = "ok") -> object:
    stats = Stats(mean=time_us * 1e-6, std=0.0, min=time_us * 1e-6, max=time_us * 1e-6, median=time_us * 1e-6)
    row = rowmaker.make_row(sw, point(algo, collective), Outcome(status, "OK", stats=stats, wrong=0))
    row.speedup = rowmaker.speedup(sw, row)
    sw.rows.append(row)
    return row


def test_a_speedup_divides_by_the_timed_baseline_of_the_same_collective() -> None:
    """The baseline's allreduce and reduce-scatter rows of one size are different baselines;
    a baseline row that failed (whatever time it carries) is none."""
    sw = sweep()
    _row(sw, "nccl-direct", 40.0)
    _row(sw, "nccl-direct", 10.0, REDUCE_SCATTER)
    assert _row(sw, "torch", 20.0).speedup == pytest.approx(2.0)
    assert _row(sw, "torch", 20.0, REDUCE_SCATTER).speedup == pytest.approx(0.5)
    failed = sweep()
    _row(failed, "nccl-direct", 40.0, status="fail")
    assert _row(failed, "torch", 20.0).speedup is None
