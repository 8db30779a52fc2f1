"""The test matrix shared by the host MPI tests (tests/mpi) and the GPU tests (tests/gpu), as
mpi4py's buffer tests share theirs: which algorithms, dtypes, ops, sizes and placements every
backend is checked over. It reads mpiring's own tables, so a new row is tested everywhere.
"""

from __future__ import annotations

import numpy as np

from mpiring import algorithms
from mpiring.algorithms import Collective
from mpiring.core.buffers import Memory
from mpiring.core.ops import DTYPES, REDUCTIONS, Op

# The reductions with a fold of their own; avg (sum, then / n) has its own tests (test_*_avg.py).
OPS: list[Op] = list(REDUCTIONS)
# Every dtype of the table; host arrays of bfloat16 come from ml_dtypes (a dependency).
HOST_DTYPES: list[np.dtype] = [row.numpy for row in DTYPES.values()]
# CuPy has no bfloat16: the GPU matrix covers it through torch tensors (test_gpu_allreduce).
GPU_DTYPES: list[str] = [name for name in DTYPES if name != "bfloat16"]
HOST_ALGORITHMS: list[str] = list(algorithms.names(Memory.HOST))
GPU_ALGORITHMS: list[str] = list(algorithms.names(Memory.CUDA))
# Reduce_scatter_block and Allgather: the rows that have them, per kind of memory (and auto).
BLOCK_COLLECTIVES: list[Collective] = [Collective.REDUCE_SCATTER, Collective.ALLGATHER]


def block_algorithms(memory: Memory, collective: Collective) -> list[str]:
    return list(algorithms.names(memory, collective=collective))
# Placements: separate output, MPI.IN_PLACE, None for IN_PLACE, the same array twice, allreduce().
PLACEMENTS: list[str] = ["out", "in_place", "none", "same", "new"]


def block_sizes() -> list[int]:
    """Elements per rank's block of Reduce_scatter_block / Allgather."""
    return [0, 1, 3, 1031, (1 << 14) + 5]


def sizes(nranks: int) -> list[int]:
    """Element counts that hit every edge of the schedules: empty, one, fewer than the ranks, a
    prime, and one past a power of two."""
    return [0, 1, max(nranks - 1, 1), 7919, (1 << 16) + 3]
