"""mpiring.bench.rowmaker.stated_sm_work: what the bench asks a communicator of a row's SM work,
and what it leaves empty (another library's row, a row that states nothing, a failed ask)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from mpiring.algorithms import SmWork
from mpiring.bench.measure import Point
from mpiring.bench.rowmaker import stated_sm_work
from mpiring.core.errors import InvalidArgumentError


class Comm:
    """A communicator's ``sm_work``, recording what it was asked."""

    def __init__(self, work: SmWork | None | Exception) -> None:
        self.work, self.asked = work, []

    def sm_work(self, count, dtype, *, gpu, algorithm, batches):
        self.asked.append((count, np.dtype(dtype).name, gpu, algorithm, batches))
        if isinstance(self.work, Exception):
            raise self.work
        return self.work


SW = SimpleNamespace(dtype=np.dtype("float32"), mode="gpu")


def point(algo: str) -> Point:
    return Point(1024, 256, "float32", "sum", algo, "auto", "out")


def test_the_bench_asks_the_rows_statement():
    comm = Comm(SmWork(528, 5.0, 132))
    work = stated_sm_work(SW, point("oneshot"), comm, "oneshot")
    assert (work.sms, work.blocks, work.fold_traffic) == (132, 528, 5.0)
    assert comm.asked == [(256, "float32", True, "oneshot", None)]


def test_rivals_silent_rows_and_refusals_are_empty():
    assert stated_sm_work(SW, point("nccl"), Comm(None), "nccl") is None
    assert stated_sm_work(SW, point("ring"), Comm(InvalidArgumentError("no")), "ring") is None
    rival = Comm(SmWork(1, 1.0))
    assert stated_sm_work(SW, point("torch-symm-1shot"), rival, "torch-symm-1shot") is None
    assert rival.asked == []
