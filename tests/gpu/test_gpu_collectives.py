"""Reduce_scatter_block and Allgather on GPU arrays: every GPU row that has them (ring,
ring-events, nccl) and auto, every dtype and op, in place and out of place, blocks from 0 to
64 M elements (the compact reduce-scatter through many mini-batches of small slots), with
poisoned outputs checked element by element against the exact result."""

from __future__ import annotations

import cupy
import numpy as np
import pytest
from gpu_helpers import WORLD, agree, mismatches, poison, rank_input, reference, runnable, span_for
from matrix import GPU_DTYPES as DTYPES  # noqa: E402
from matrix import OPS, block_algorithms  # noqa: E402
from mpi4py import MPI

import mpiring
from mpiring.algorithms import Collective
from mpiring.core.buffers import Memory

RANK, SIZE = WORLD.rank, WORLD.size
RS = block_algorithms(Memory.CUDA, Collective.REDUCE_SCATTER)
AG = block_algorithms(Memory.CUDA, Collective.ALLGATHER)
BLOCKS = (0, 1, 1031, (1 << 20) + 7)


@pytest.fixture(scope="module")
def comm():
    c = mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20)  # 1 MiB slots: many mini-batches
    yield c
    c.close()


def scatter_case(c, algo: str, op, dtype: str, m: int, in_place: bool, salt: int) -> str | None:
    x = rank_input(RANK, SIZE * m, dtype, salt, span_for(op))
    keep = x.copy()
    want = reference(op, SIZE, SIZE * m, salt)[RANK * m:(RANK + 1) * m]
    if in_place:
        buf = x.copy()
        c.Reduce_scatter_block(MPI.IN_PLACE, buf, op, algorithm=algo)
        got = buf[:m]
    else:
        got = cupy.empty(m, dtype=dtype)
        poison(got)
        c.Reduce_scatter_block(x, got, op, algorithm=algo)
    wrong = mismatches(got, want)
    touched = not bool(cupy.all(x == keep))
    if wrong or touched:
        return (f"{algo} RS {op.name} {dtype} m={m} in_place={in_place}: {wrong} wrong, "
                f"input touched {touched}")
    return None


def gather_case(c, algo: str, dtype: str, m: int, in_place: bool, salt: int) -> str | None:
    mine = rank_input(RANK, m, dtype, salt)
    want = cupy.concatenate([rank_input(r, m, cupy.float64, salt) for r in range(SIZE)])
    out = cupy.empty(SIZE * m, dtype=dtype)
    poison(out)
    if in_place:
        out[RANK * m:(RANK + 1) * m] = mine
        c.Allgather(MPI.IN_PLACE, out, algorithm=algo)
    else:
        c.Allgather(mine, out, algorithm=algo)
    wrong = mismatches(out, want)
    return f"{algo} AG {dtype} m={m} in_place={in_place}: {wrong} wrong" if wrong else None


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("algo", RS)
def test_reduce_scatter_block(comm, algo, dtype, op, in_place):
    errors = [scatter_case(comm, algo, op, dtype, m, in_place, salt=m) for m in BLOCKS]
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("algo", AG)
def test_allgather(comm, algo, dtype, in_place):
    errors = [gather_case(comm, algo, dtype, m, in_place, salt=m) for m in BLOCKS]
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("algo", ["ring", "nccl"])
def test_large_blocks(comm, algo):
    """64 M floats per block: hundreds of compact mini-batches through 1 MiB slots."""
    m = 1 << 26
    errors = [scatter_case(comm, algo, mpiring.Op.SUM, "float32", m, False, salt=5),
              gather_case(comm, algo, "float32", m // 4, False, salt=6)]
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
def test_back_to_back_on_changing_data(comm):
    """300 calls alternating the collectives, algorithms and placements on new data each time:
    the compact reduce-scatter's fold-after-send order and the phases' sequence numbers hold."""
    rng = np.random.default_rng(77)
    errors = []
    for i in range(300):
        algo = str(rng.choice(runnable(["ring", "ring", "ring-events", "nccl", "auto"])))
        m = int(rng.integers(1, 300_000))
        if rng.random() < 0.5:
            errors.append(scatter_case(comm, algo, mpiring.Op.SUM, "float32", m, bool(rng.random() < 0.3), i))
        else:
            errors.append(gather_case(comm, algo, "int32", m, bool(rng.random() < 0.3), i))
        comm.Allreduce(MPI.IN_PLACE, cupy.ones(1000, dtype=cupy.float32))  # interleaved allreduces
    agree(not any(errors), "; ".join(e for e in errors if e)[:2000])
