"""``ring``: the double-buffered asynchronous ring (the AsyncAllReduce design).

Reduce-scatter then all-gather, ``2(n-1)`` steps, each moving one chunk per mini-batch into
the next rank's receive slot, two slots alternating. On GPUs the copies run on copy engines
and every wait and signal is a stream memory operation on a flag in the IPC staging (the GPU
signals itself; the host only enqueues). On the host the same pipeline runs over node shared
memory. The schedule is :mod:`mpiring.ring.schedule`, the protocol :mod:`mpiring.ring.pipeline`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .base import BOTH, Algorithm, Call, Collective

if TYPE_CHECKING:
    from ..context.base import Backend


def run(backend: Backend, call: Call) -> None:
    backend.run_ring(call, Collective.ALLREDUCE)


def reduce_scatter(backend: Backend, call: Call) -> None:
    """The ring's reduce-scatter steps alone: rank r ends with block r."""
    backend.run_ring(call, Collective.REDUCE_SCATTER)


def allgather(backend: Backend, call: Call) -> None:
    """The ring's all-gather steps alone, from block r on rank r."""
    backend.run_ring(call, Collective.ALLGATHER)


def batches(backend: Backend, count: int, dtype: np.dtype, asked: int | None) -> int:
    return backend.ring_batches(count, dtype, asked)


ROW = Algorithm(
    "ring", 1, BOTH, run,
    summary="the double-buffered asynchronous ring on copy engines (AsyncAllReduce); GPU-signalled "
            "(stream memory operations on flags)",
    best_for="large messages (beside compute its folds wait for SMs: see Results)",
    batches=batches, auto=True, reduce_scatter=reduce_scatter, allgather=allgather,
)
