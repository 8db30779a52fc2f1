"""The NCCL baselines: ``nccl`` (``ncclAllReduce``, ``ncclReduceScatter``, ``ncclAllGather``)
and ``nccl-ring`` (the AsyncAllReduce paper's baseline: a ring of ``ncclSend``/``ncclRecv``
pairs in groups plus a fold kernel, on one stream). Both run on any number of nodes. Their
communicators are made on first use (``mpiring.context.nccl``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np

from ..ring.schedule import RingPlan, choose_batches
from .base import GPU, Algorithm, Call, Collective, Scope

if TYPE_CHECKING:
    from ..context.base import Backend
    from ..context.gpu import GpuBackend


def _nccl(collective: Collective) -> Callable[[Backend, Call], None]:
    """``ncclAllReduce``, ``ncclReduceScatter`` or ``ncclAllGather`` over every rank."""

    def run(backend: Backend, call: Call) -> None:
        gpu = cast("GpuBackend", backend)  # the rows serve GPU memory only
        gpu.nccl_baselines().run(collective, call.send, call.recv, call.op, gpu.ordered_stream())
    return run


def bind_allreduce(backend: Backend, call: Call) -> Callable[[], None]:
    """``ncclAllReduce`` of ``call`` with every argument fixed, on the caller's ordered stream
    at each call: the eager fast path (:mod:`mpiring.call.replay`), which keeps the host check."""
    gpu = cast("GpuBackend", backend)
    recv = call.recv
    send = recv.address if call.send is None else call.send.address
    return gpu.nccl_baselines().bind_allreduce(send, recv.address, recv.count, recv.dtype, call.op,
                                               gpu.ordered_stream)


def run_ring(backend: Backend, call: Call) -> None:
    gpu = cast("GpuBackend", backend)
    nccl = gpu.nccl_baselines()
    stream = gpu.ordered_stream()  # nccl-ring reuses one staging buffer across calls
    recv = call.recv
    if gpu.size == 1:
        if call.send is not None:
            gpu.copy(recv.address, call.send.address, recv.nbytes, stream)
        return
    nb = ring_batches(backend, recv.count, recv.dtype, call.batches)
    nccl.ring(RingPlan(gpu.size, recv.count, nb), call.source.address, recv.address, recv.dtype,
              call.op, stream)


def ring_batches(backend: Backend, count: int, dtype: np.dtype, asked: int | None) -> int:
    """Mini-batches of nccl-ring: as asked (default 1), raised so a chunk fits the staging."""
    gpu = cast("GpuBackend", backend)
    capacity = gpu.slot_bytes // np.dtype(dtype).itemsize
    return choose_batches(count, gpu.size, capacity, asked, 1)


NCCL = Algorithm(
    "nccl", 2, GPU, _nccl(Collective.ALLREDUCE),
    summary="`ncclAllReduce`", best_for="baseline",
    graph_capturable=True, auto=True, baseline=True, scope=Scope.ANY,
    reduce_scatter=_nccl(Collective.REDUCE_SCATTER), allgather=_nccl(Collective.ALLGATHER),
    averages=True, nccl=True, lazy=True, bind=bind_allreduce,
)
NCCL_RING = Algorithm(
    "nccl-ring", 3, GPU, run_ring,
    summary="the paper's baseline: ring of `ncclSend`/`ncclRecv` in groups + a fold kernel, one stream",
    best_for="baseline",
    batches=ring_batches, baseline=True, scope=Scope.ANY, nccl=True, lazy=True,
)
