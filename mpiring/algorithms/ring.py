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

from ..core.buffers import Memory
from ..cuda.fold_kernel import THREADS
from ..cuda.grids import copy_blocks, copy_unit, fold_blocks
from ..ring.schedule import RingPlan
from .base import BOTH, Algorithm, Call, CallShape, Collective, SmWork

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


def fold_traffic(ranks: int) -> float:
    """Memory the ring's folds move per byte of an allreduce, per rank: ``3 (n - 1) / n``.

    Each of the ``n - 1`` reduce-scatter steps folds one chunk of ``1 / n`` of the message:
    ``out = input (op) slot`` reads the rank's input chunk and the chunk that arrived in its
    receive slot and writes its output chunk, 3 bytes per byte (all local memory: the previous
    rank's copy engine wrote the slot). Over the ranks each block is folded by ``n - 1`` of
    them. The all-gather steps' slot-to-output copies (a copy kernel, ``2 (n - 1) / n``) are
    no fold and not counted, nor the division of ``avg`` (the dispatcher's, after the row)."""
    return 3 * (ranks - 1) / ranks


def most_blocks(plan: RingPlan, itemsize: int, cap: int) -> int:
    """The largest grid of the fold and copy kernels over ``plan``'s transfers on any rank, as
    the CUDA IPC transport launches them: every chunk of every block is folded by some rank
    (reduce-scatter) and copied out of a slot by another (all-gather); the slots are 256-byte
    aligned and the caller's buffers taken as 16-byte aligned, so a chunk's alignment is that
    of its offset."""
    most = 0
    for block in range(plan.size):
        for lo, hi in plan.pieces[block]:
            offset, nbytes = (plan.blocks[block][0] + lo) * itemsize, (hi - lo) * itemsize
            if not nbytes:
                continue
            fold = fold_blocks(hi - lo, itemsize, offset % 16 == 0, cap, THREADS)
            copy = copy_blocks(nbytes, copy_unit(offset, 0, nbytes), cap, THREADS)
            most = max(most, fold, copy)
    return most


def sm_work(shape: CallShape) -> SmWork:
    """The ring's SM work: the largest fold or copy grid of the call (0 on host memory, where
    the host folds; 0 on one rank, where the ring has no step) and :func:`fold_traffic`."""
    traffic = fold_traffic(shape.ranks) if shape.count else None
    if shape.memory is Memory.HOST or shape.ranks < 2 or not shape.count:
        return SmWork(0, traffic)
    if shape.grids is None or shape.batches is None:
        return SmWork(None, traffic)
    plan = RingPlan(shape.ranks, shape.count, shape.batches)
    return SmWork(most_blocks(plan, shape.itemsize, shape.grids.fold_cap), traffic)


ROW = Algorithm(
    "ring", 1, BOTH, run,
    summary="the double-buffered asynchronous ring on copy engines (AsyncAllReduce); GPU-signalled "
            "(stream memory operations on flags)",
    best_for="large messages (beside compute its folds wait for SMs: see Results)",
    batches=batches, auto=True, reduce_scatter=reduce_scatter, allgather=allgather, sm_work=sm_work,
)
