"""Reduce_scatter_block and Allgather on host arrays: every row that has them (and auto), every
dtype and op, in place and out of place, block sizes from 0 to 16 K elements, against numpy
and MPI's own rules (in place: Reduce_scatter_block's result is the start of recvbuf), with
poisoned outputs checked element by element; and the block rules' errors, on every rank."""

from __future__ import annotations

import numpy as np
import pytest
from matrix import BLOCK_COLLECTIVES, block_algorithms, block_sizes
from mpi4py import MPI
from mpi_support import (
    DTYPES,
    OPS,
    all_ok,
    attempt,
    check_result,
    expect_raised,
    gather_inputs,
    make_input,
    poison,
)

import mpiring
from mpiring.algorithms import Collective
from mpiring.core.buffers import Memory
from mpiring.core.ops import Op

pytestmark = pytest.mark.mpi(min_size=1)
world = MPI.COMM_WORLD
RS_ALGOS = block_algorithms(Memory.HOST, Collective.REDUCE_SCATTER)
AG_ALGOS = block_algorithms(Memory.HOST, Collective.ALLGATHER)


def usable(algo: str, dtype: np.dtype) -> bool:
    return not (algo == "mpi" and dtype.name == "bfloat16")  # MPI has no bfloat16


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("algo", RS_ALGOS)
def test_reduce_scatter_block(small_comm: mpiring.Communicator, algo: str, op: Op, dtype: np.dtype,
                              in_place: bool) -> None:
    if not usable(algo, dtype):
        pytest.skip("MPI has no bfloat16")
    n, r = world.size, world.rank
    problems: list[str] = []
    for m in block_sizes():
        x = make_input(dtype, op, n * m, seed=m + 3)
        stack = gather_inputs(x)
        keep = x.copy()
        label = f"{algo} RS {op.name} {dtype.name} m={m} {'in place' if in_place else 'out'}"
        if in_place:
            buf = x.copy()
            small_comm.Reduce_scatter_block(MPI.IN_PLACE, buf, op, algorithm=algo)
            got = buf[:m]
        else:
            got = np.full(m, poison(dtype), dtype=dtype)
            small_comm.Reduce_scatter_block(x, got, op, algorithm=algo)
            if x.tobytes() != keep.tobytes():
                problems.append(f"{label}: the input was modified")
        problems += check_result(got, stack[:, r * m:(r + 1) * m], op, label)
    all_ok(problems)


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("algo", AG_ALGOS)
def test_allgather(small_comm: mpiring.Communicator, algo: str, dtype: np.dtype, in_place: bool) -> None:
    if not usable(algo, dtype):
        pytest.skip("MPI has no bfloat16")
    n, r = world.size, world.rank
    problems: list[str] = []
    for m in block_sizes():
        mine = make_input(dtype, Op.MAX, m, seed=m + 5)
        want = gather_inputs(mine).reshape(-1)
        out = np.full(n * m, poison(dtype), dtype=dtype)
        if in_place:
            out[r * m:(r + 1) * m] = mine
            small_comm.Allgather(MPI.IN_PLACE, out, algorithm=algo)
        else:
            keep = mine.copy()
            small_comm.Allgather(mine, out, algorithm=algo)
            if mine.tobytes() != keep.tobytes():
                problems.append(f"{algo} m={m}: the input was modified")
        if out.tobytes() != want.tobytes():
            bad = np.flatnonzero(out.view(np.uint8) != want.view(np.uint8))
            problems.append(f"{algo} AG {dtype.name} m={m}: {bad.size} bytes wrong, first at {bad[:4]}")
    all_ok(problems)


@pytest.mark.parametrize("collective", BLOCK_COLLECTIVES, ids=lambda c: c.label)
def test_auto_and_ring_agree_with_mpi_bitwise(small_comm: mpiring.Communicator,
                                               collective: Collective) -> None:
    """Exact integer data: every row gives MPI's bits."""
    n, m = world.size, 4099
    x = make_input(np.dtype(np.int64), Op.SUM, n * m if collective is Collective.REDUCE_SCATTER else m, 9)
    outs = {}
    for algo in ("mpi", "ring", "auto"):
        out = np.zeros(m if collective is Collective.REDUCE_SCATTER else n * m, dtype=np.int64)
        if collective is Collective.REDUCE_SCATTER:
            small_comm.Reduce_scatter_block(x, out, algorithm=algo)
        else:
            small_comm.Allgather(x, out, algorithm=algo)
        outs[algo] = out
    problems = [f"{a} differs from mpi" for a in ("ring", "auto") if not np.array_equal(outs[a], outs["mpi"])]
    all_ok(problems)


def test_block_rules_raise_on_every_rank(small_comm: mpiring.Communicator) -> None:
    """A buffer that breaks the block rules on one rank: every rank raises, none hangs."""
    n, bad = world.size, world.size - 1
    problems: list[str] = []
    m, me = 6, world.rank == bad
    cls = mpiring.InvalidArgumentError if me else mpiring.PeerArgumentError
    if n > 1:  # one element more than n blocks (on one rank, every count is a multiple)
        x = np.ones(n * m + (1 if me else 0))
        err = attempt(lambda: small_comm.Reduce_scatter_block(x, np.zeros(m)))
        problems += expect_raised(err, cls, *(["not a multiple"] if me else []))
    recv = np.zeros(m + (1 if me else 0))  # n blocks, but of another size than recvbuf
    err = attempt(lambda: small_comm.Reduce_scatter_block(np.ones(n * m), recv))
    problems += expect_raised(err, cls, *(["must hold"] if me else []))
    y = np.ones(m)
    out = np.zeros(n * m + (2 if world.rank == bad else 0))
    err = attempt(lambda: small_comm.Allgather(y, out))
    problems += expect_raised(err, cls)
    if n > 1:  # an in-place buffer that does not divide into n blocks
        err = attempt(lambda: small_comm.Allgather(MPI.IN_PLACE, np.zeros(n * m + 1)))
        problems += expect_raised(err, mpiring.InvalidArgumentError, "not a multiple")
    # still usable after argument errors
    ok = np.zeros(n * m)
    small_comm.Allgather(np.full(m, float(world.rank)), ok)
    if ok.tolist() != [float(q) for q in range(n) for _ in range(m)]:
        problems.append(f"after the errors: {ok}")
    all_ok(problems)


def test_overlapping_buffers_and_algorithms_without_the_collective(small_comm: mpiring.Communicator) -> None:
    n, m = world.size, 8
    buf = np.zeros(n * m + m)
    send, recv = buf[1:1 + m], buf[:n * m]  # they share elements 1 .. m
    problems = expect_raised(attempt(lambda: small_comm.Allgather(send, recv)), mpiring.InvalidArgumentError,
                             "overlap")
    err = attempt(lambda: small_comm.Reduce_scatter_block(np.ones(n * m), np.zeros(m), algorithm="hier"))
    problems += expect_raised(err, mpiring.InvalidArgumentError, "has no Reduce_scatter_block")
    all_ok(problems)
