"""What ``Communicator(reproducible=True)`` returns, bit for bit, as plain numpy code.

In that mode every element of an allreduce's (and ``Reduce_scatter_block``'s) result is the
reduction of the ranks' values **in rank order** — rank 0's value, then rank 1's folded in,
then rank 2's, and so on — accumulated in float32 for float16 and bfloat16 and in the type
itself for float32, float64 and the integers, and rounded to the type once. That does not
depend on the message size, on how a row cuts the message into chunks or batches, on which
row runs it, on the placement (in or out of place), or on eager or CUDA-graph calls: the same
inputs give the same bits from every row the mode allows. :func:`reference` is that rule; the
tests compare every element of every allowed row with it.

Rows that reduce some other way (NCCL's trees and rings, the ring's partial sums passed from
rank to rank, MPI's own algorithm, ``hier``'s node-then-rail sums) are left out of ``auto`` in
this mode and refuse by name (:attr:`mpiring.algorithms.Algorithm.rank_ordered`).

On GPUs the kernels run with float32 subnormals flushed to zero (CuPy compiles every kernel
with ``-ftz=true``): for float32 and bfloat16 the rule there holds wherever no input or partial
result is a float32 subnormal (docs/reproducible.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .ops import Op, divide_by_ranks, normalize_op


def accumulation_dtype(dtype: np.dtype) -> np.dtype:
    """The type the reduction accumulates in: float32 for 2-byte floats (float16, bfloat16),
    the type itself otherwise."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.kind in "fV" and dtype.itemsize == 2 else dtype


def reference(inputs: Sequence[np.ndarray], op: Op | str = Op.SUM) -> np.ndarray:
    """The result every rank holds after a reproducible allreduce, where ``inputs[q]`` is rank
    q's array: the exact bits, for every allowed row, size and placement."""
    op = normalize_op(op)
    dtype = inputs[0].dtype
    wide = accumulation_dtype(dtype)
    fold = Op.SUM.ufunc if op is Op.AVG else op.ufunc  # avg: the sum, divided below
    with np.errstate(all="ignore"):  # IEEE results (inf, nan) and integer wrap-around, no warnings
        acc = inputs[0].astype(wide)  # rank 0's values ...
        for x in inputs[1:]:  # ... then rank 1's, 2's, ..., n-1's folded in, in this order
            acc = fold(acc, x.astype(wide))
        result = acc.astype(dtype)  # rounded to the type once (to nearest, ties to even)
    if op is Op.AVG:  # then divided by the rank count: in float32 for 2-byte floats, rounded once
        divide_by_ranks(result, len(inputs))
    return result
