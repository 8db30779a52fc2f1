"""``op="avg"`` on host arrays: the sum divided by the rank count, for every host row (and auto),
Allreduce and Reduce_scatter_block, every floating dtype and placement, on one node and on
virtual nodes (hier), with poisoned outputs checked element by element against
``sum(x) / n`` (the sum's error bound over n, plus one rounding); and integers refused.

Mismatches (one rank ``avg``, the others ``sum``) are in test_mpi_errors.py."""

from __future__ import annotations

import os

import numpy as np
import pytest
from matrix import HOST_ALGORITHMS, block_algorithms
from mpi4py import MPI
from mpi_support import (
    DTYPES,
    MODES,
    all_ok,
    check_result,
    gather_inputs,
    make_input,
    poison,
    reduce_and_check,
)

import mpiring
from mpiring.algorithms import Collective
from mpiring.core.buffers import Memory
from mpiring.core.ops import Op, is_integer
from mpiring.core.topology import VIRTUAL_NODES

pytestmark = pytest.mark.mpi(min_size=1)
world = MPI.COMM_WORLD
FLOATS = [d for d in DTYPES if not is_integer(d)]
COUNTS = [0, 1, 7919, (1 << 15) + 3]


def usable(algo: str, dtype: np.dtype) -> bool:
    return not (algo in ("mpi", "hier") and dtype.name == "bfloat16")  # MPI has no bfloat16


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("algo", [*HOST_ALGORITHMS, "auto"])
def test_allreduce_avg(small_comm: mpiring.Communicator, algo: str, dtype: np.dtype, mode: str) -> None:
    if not usable(algo, dtype):
        pytest.skip("MPI has no bfloat16 (hier refuses it: test_mpi_hier.py)")
    problems: list[str] = []
    for count in COUNTS:
        problems += reduce_and_check(small_comm, dtype, Op.AVG, count, mode, seed=count + 11,
                                     label=f"{algo} avg {dtype.name} n={count} {mode}", algorithm=algo)
    all_ok(problems)


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("algo", block_algorithms(Memory.HOST, Collective.REDUCE_SCATTER))
def test_reduce_scatter_avg(small_comm: mpiring.Communicator, algo: str, dtype: np.dtype,
                            in_place: bool) -> None:
    """Only this rank's block is divided; in place, the rest of recvbuf is left as the sum left it."""
    if not usable(algo, dtype):
        pytest.skip("MPI has no bfloat16")
    n, r = world.size, world.rank
    problems: list[str] = []
    for m in (0, 1, 1031):
        x = make_input(dtype, Op.SUM, n * m, seed=m + 17)
        stack = gather_inputs(x)
        label = f"{algo} RS avg {dtype.name} m={m} {'in place' if in_place else 'out'}"
        if in_place:
            buf = x.copy()
            small_comm.Reduce_scatter_block(MPI.IN_PLACE, buf, "avg", algorithm=algo)
            got = buf[:m]
        else:
            got = np.full(m, poison(dtype), dtype=dtype)
            small_comm.Reduce_scatter_block(x, got, "avg", algorithm=algo)
        problems += check_result(got, stack[:, r * m:(r + 1) * m], Op.AVG, label)
    all_ok(problems)


@pytest.mark.mpi(min_size=2)
def test_avg_over_virtual_nodes() -> None:
    """hier (ring inside each virtual node, MPI between them) divides once, by the world size."""
    os.environ[VIRTUAL_NODES] = "2"
    try:
        comm = mpiring.Communicator(world, gpu=False, timeout=60.0, slot_bytes=4096)
    finally:
        del os.environ[VIRTUAL_NODES]
    with comm:
        assert comm.resolve(1, np.float32) == "hier"
        problems: list[str] = []
        for dtype in [d for d in FLOATS if usable("hier", d)]:
            for count in COUNTS:
                problems += reduce_and_check(comm, dtype, Op.AVG, count, "out", seed=count + 5,
                                             label=f"hier avg {dtype.name} n={count}")
        all_ok(problems)


def test_avg_of_ones_is_one_bitwise(small_comm: mpiring.Communicator) -> None:
    """Every rank contributes 1.0: the average is exactly 1.0 whatever the rank count."""
    for algo in HOST_ALGORITHMS:
        out = np.full(1000, np.nan, np.float32)
        small_comm.Allreduce(np.ones(1000, np.float32), out, "avg", algorithm=algo)
        all_ok([] if (out == 1.0).all() else [f"{algo}: {np.unique(out)[:4]}"])
