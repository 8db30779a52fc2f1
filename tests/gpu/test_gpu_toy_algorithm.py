"""Adding a GPU algorithm is a ``.cu`` file, one module and one row (``tests/gpu/toy/``): the toy
row, registered at run time, runs through the API, the dispatch and the agreement check,
exact on every element, beside the built-in rows, with no file of the package touched."""

from __future__ import annotations

import random

import cupy
import numpy as np
import pytest
from gpu_helpers import WORLD, agree, mismatches, poison, rank_input, reference
from mpi4py import MPI
from toy import toy_gpu_algorithm as toy

import mpiring
from mpiring import algorithms

RANK = WORLD.rank


@pytest.fixture(scope="module", autouse=True)
def toy_row():
    mpiring.register(toy.ROW)
    yield toy.ROW
    algorithms.unregister(toy.NAME)


@pytest.fixture(scope="module")
def comm():
    c = mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20)
    yield c
    c.close()


def _counts() -> list[int]:
    """Counts that are no power of two, up to the toy's limit (one 1 MiB slot of float32), the
    same on every rank."""
    rng = random.Random(2026)
    return [0, 1, 3, 1000, (1 << 18) - 1, 1 << 18] + [rng.randrange(2, 1 << 18) for _ in range(12)]


@pytest.mark.mpi
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
def test_the_toy_row_sums_exactly_between_builtin_rows(comm, in_place) -> None:
    """Each toy call sits between a ring call and a oneshot call on the same staging: the rows
    share the communicator's memory, in call order, and every element of every result is exact."""
    problems = []
    for salt, count in enumerate(_counts()):
        expect = reference(mpiring.Op.SUM, WORLD.size, count, salt)
        for algo in ("ring", toy.NAME, "oneshot" if count * 4 <= 1 << 16 else "twoshot"):
            x = rank_input(RANK, count, cupy.float32, salt)
            if in_place:
                out = x
                comm.Allreduce(MPI.IN_PLACE, out, algorithm=algo)
            else:
                out = cupy.empty_like(x)
                poison(out)
                comm.Allreduce(x, out, algorithm=algo)
            comm.synchronize()
            wrong = mismatches(out, expect)
            if wrong:
                problems.append(f"{algo}, count {count}: {wrong} wrong")
    agree(not problems, "; ".join(problems))


@pytest.mark.mpi
def test_the_toy_rows_own_checks_and_limit_refuse_on_every_rank(comm) -> None:
    """Its ``check`` (float32 sums only) and ``limit`` (one slot) are errors naming the row,
    raised alike on every rank, and the communicator goes on."""
    for x, op, what in [(cupy.ones(8, cupy.float64), mpiring.Op.SUM, "float32 sums only"),
                        (cupy.ones(8, cupy.float32), mpiring.Op.MAX, "float32 sums only"),
                        (cupy.ones((1 << 18) + 1, cupy.float32), mpiring.Op.SUM, "")]:
        with pytest.raises(mpiring.InvalidArgumentError) as err:
            comm.Allreduce(x, cupy.empty_like(x), op, algorithm=toy.NAME)
        agree(toy.NAME in str(err.value) and what in str(err.value), str(err.value))
    x = rank_input(RANK, 4096, cupy.float32, 5)
    out = cupy.empty_like(x)
    comm.Allreduce(x, out, algorithm=toy.NAME)
    comm.synchronize()
    agree(mismatches(out, reference(mpiring.Op.SUM, WORLD.size, 4096, 5)) == 0, "after the refusals")
    assert np.dtype(out.dtype) == np.float32
