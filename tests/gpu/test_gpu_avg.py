"""``op="avg"`` on GPU arrays: every GPU row (and auto), Allreduce and Reduce_scatter_block,
every CuPy floating dtype, in and out of place, inside a CUDA graph, and integers refused.

Inputs are small integers, so every sum is exact and mpiring's rows (sum, then divide once by
the rank count: ``mpiring.core.ops.divide_by_ranks``) must give the host rule's bits exactly. NCCL
averages by its own rule (``ncclAvg``): within one rounding of sum / n.
"""

from __future__ import annotations

import cupy
import numpy as np
import pytest
from gpu_helpers import WORLD, agree, fit, poison, rank_input, reference
from matrix import GPU_ALGORITHMS, block_algorithms
from mpi4py import MPI

import mpiring
from mpiring.algorithms import Collective
from mpiring.core.buffers import Memory
from mpiring.core.ops import divide_by_ranks

FLOATS = ["float16", "float32", "float64"]
RANK = WORLD.rank


@pytest.fixture(scope="module")
def comm():
    c = mpiring.Communicator(WORLD, gpu=True)
    yield c
    c.close()


def expected(count: int, dtype: str, salt: int) -> np.ndarray:
    """The host rule applied to the exact sum: what every summing row must give, bit for bit."""
    want = cupy.asnumpy(reference(mpiring.Op.SUM, WORLD.size, count, salt)).astype(dtype)
    divide_by_ranks(want, WORLD.size)
    return want


def wrong(got: cupy.ndarray, want: np.ndarray, row: str) -> int:
    """Elements of ``got`` that miss ``want`` (``row``: the algorithm that ran)."""
    got_h = cupy.asnumpy(got)
    if row == "nccl":  # its own rule: within two roundings of the host rule's quotient
        eps = float(np.finfo(got_h.dtype).eps)
        w = want.astype(np.float64)
        return int(np.count_nonzero(~(np.abs(got_h.astype(np.float64) - w) <= 2 * eps * np.abs(w))))
    return int(np.count_nonzero(got_h.view(f"u{got_h.itemsize}") != want.view(f"u{want.itemsize}")))


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("algo", GPU_ALGORITHMS)
def test_allreduce_avg(comm, algo, dtype, in_place):
    errors = []
    for count in (0, 1, 7919, (1 << 20) + 3):
        count = fit(algo, count, dtype)
        x = rank_input(RANK, count, dtype, salt=count)
        if in_place:
            out = x
            comm.Allreduce(MPI.IN_PLACE, out, "avg", algorithm=algo)
        else:
            out = cupy.empty_like(x)
            poison(out)
            comm.Allreduce(x, out, "avg", algorithm=algo)
        bad = wrong(out, expected(count, dtype, count), comm.resolve(count, dtype, algo))
        if bad:
            errors.append(f"{algo} {dtype} n={count} in_place={in_place}: {bad} wrong")
    agree(not errors, "; ".join(errors))


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("algo", block_algorithms(Memory.CUDA, Collective.REDUCE_SCATTER))
def test_reduce_scatter_avg(comm, algo, dtype):
    n, errors = WORLD.size, []
    for m in (1, 1031, 300_001):
        x = rank_input(RANK, n * m, dtype, salt=m)
        want = expected(n * m, dtype, m)[RANK * m:(RANK + 1) * m]
        out = cupy.empty(m, dtype=dtype)
        poison(out)
        comm.Reduce_scatter_block(x, out, "avg", algorithm=algo)
        inplace = x.copy()
        comm.Reduce_scatter_block(MPI.IN_PLACE, inplace, "avg", algorithm=algo)
        for label, got in (("out", out), ("in place", inplace[:m])):
            bad = wrong(got, want, comm.resolve(n * m, dtype, algo, collective=Collective.REDUCE_SCATTER))
            if bad:
                errors.append(f"{algo} RS {dtype} m={m} {label}: {bad} wrong")
    agree(not errors, "; ".join(errors))


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("algo", ["oneshot", "twoshot", "nccl", "auto"])
def test_avg_in_a_cuda_graph(comm, algo):
    """The division is one more captured launch: 30 replays on changing inputs stay exact."""
    count = 200_003
    stream = cupy.cuda.Stream(non_blocking=True)
    errors = []
    with stream:
        x = cupy.zeros(count, dtype=cupy.float32)
        out = cupy.empty_like(x)
        comm.Allreduce(x, out, "avg", algorithm=algo)  # the first call on this stream, outside capture
        stream.begin_capture()
        try:  # a failed call must not leave the stream capturing (it would break later tests)
            row = comm.resolve(count, x.dtype, algo)
            comm.Allreduce(x, out, "avg", algorithm=algo)
        finally:
            graph = stream.end_capture()
        for replay in range(30):
            x[...] = rank_input(RANK, count, cupy.float32, salt=replay)
            poison(out)
            graph.launch(stream)
            bad = wrong(out, expected(count, "float32", replay), row)
            if bad:
                errors.append(f"replay {replay}: {bad} wrong")
    agree(not errors, "; ".join(errors[:5]))


@pytest.mark.mpi(min_size=1)
def test_avg_refuses_integers_on_every_rank(comm):
    x = cupy.ones(100, dtype=cupy.int32)
    with pytest.raises(mpiring.InvalidArgumentError, match="op 'avg' averages floating-point arrays"):
        comm.Allreduce(MPI.IN_PLACE, x, "avg")
    y = cupy.ones(100, dtype=cupy.float32)
    comm.Allreduce(MPI.IN_PLACE, y, "avg")  # still usable
    agree(bool((y == 1).all()), "avg of ones is not one after a refused call")
