"""The NCCL baselines: ``nccl`` (``ncclAllReduce``, ``ncclReduceScatter``, ``ncclAllGather``)
and ``nccl-ring`` (the AsyncAllReduce paper's baseline: a ring of ``ncclSend``/``ncclRecv``
pairs in groups plus a fold kernel, on one stream). Both run on any number of nodes. Their
communicators are made on first use (``mpiring.baselines.nccl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .base import GPU, Algorithm, Call, Collective, Scope

if TYPE_CHECKING:
    from ..backends.base import Backend


def run_allreduce(backend: Backend, call: Call) -> None:
    backend.run_nccl(call, Collective.ALLREDUCE)


def run_reduce_scatter(backend: Backend, call: Call) -> None:
    backend.run_nccl(call, Collective.REDUCE_SCATTER)


def run_allgather(backend: Backend, call: Call) -> None:
    backend.run_nccl(call, Collective.ALLGATHER)


def run_ring(backend: Backend, call: Call) -> None:
    backend.run_nccl_ring(call)


def ring_batches(backend: Backend, count: int, dtype: np.dtype, asked: int | None) -> int:
    return backend.nccl_ring_batches(count, dtype, asked)


NCCL = Algorithm(
    "nccl", 2, GPU, run_allreduce,
    summary="`ncclAllReduce`", best_for="baseline",
    graph_capturable=True, auto=True, baseline=True, scope=Scope.ANY,
    reduce_scatter=run_reduce_scatter, allgather=run_allgather, averages=True, nccl=True, lazy=True,
)
NCCL_RING = Algorithm(
    "nccl-ring", 3, GPU, run_ring,
    summary="the paper's baseline: ring of `ncclSend`/`ncclRecv` in groups + a fold kernel, one stream",
    best_for="baseline",
    batches=ring_batches, baseline=True, scope=Scope.ANY, nccl=True, lazy=True,
)
