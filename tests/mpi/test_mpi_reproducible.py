"""``reproducible=True`` on host arrays (1-4 ranks): every element of every result bit-equal to
mpiring.core.reproducible.reference, over random normal data of every dtype and op, fuzzed counts
that cross the staging's chunk boundaries, in and out of place, Allreduce and
Reduce_scatter_block; the same bits from staging of any size; rows that do not keep rank order
refused by name on every rank; the setting shared at set-up."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import BF16, all_ok, attempt, expect_raised, gather_inputs

import mpiring
from mpiring.core.errors import InvalidArgumentError, SetupError
from mpiring.core.ops import Op, is_integer
from mpiring.core.reproducible import reference

pytestmark = pytest.mark.mpi(min_size=1)
world = MPI.COMM_WORLD
DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BF16, np.dtype(np.float64), np.dtype(np.int32),
          np.dtype(np.int64)]
STAGING = 4096  # bytes: a few hundred elements per chunk, so that counts below cross many chunks


@pytest.fixture(scope="module")
def chunked() -> mpiring.Communicator:
    with mpiring.Communicator(world, gpu=False, reproducible=True, slot_bytes=STAGING) as comm:
        yield comm


@pytest.fixture(scope="module")
def whole() -> mpiring.Communicator:
    with mpiring.Communicator(world, gpu=False, reproducible=True) as comm:
        yield comm


def random_input(dtype: np.dtype, op: Op, count: int, seed: int) -> np.ndarray:
    """Random normal data (integers: random values), so that the order of the sum shows."""
    rng = np.random.default_rng([seed, world.rank])
    if is_integer(dtype):
        return rng.integers(-1000 if op is not Op.PROD else -3, 1000 if op is not Op.PROD else 4,
                            count).astype(dtype)
    scale = 1.0 if op is Op.PROD else 100.0
    return (rng.standard_normal(count) * scale).astype(dtype)


def counts(seed: int) -> list[int]:
    """0, 1, the rank count and around it, and random counts from a few to several chunks."""
    rng = np.random.default_rng(seed)
    n = world.size
    return sorted({0, 1, n, n + 1, 2 * n - 1, *rng.integers(2, 5000, 6).tolist()})


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def ops_for(dtype: np.dtype) -> list[Op]:
    return [op for op in Op if not (op is Op.AVG and is_integer(dtype))]


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_allreduce_is_bit_equal_to_the_reference(chunked: mpiring.Communicator,
                                                 whole: mpiring.Communicator, dtype: np.dtype,
                                                 in_place: bool) -> None:
    problems: list[str] = []
    for op in ops_for(dtype):
        for count in counts(int(op) * 31 + dtype.itemsize):
            x = random_input(dtype, op, count, seed=count + 7 * int(op))
            want = reference(list(gather_inputs(x)), op)
            for label, comm in (("chunked", chunked), ("whole", whole)):
                if in_place:
                    out = x.copy()
                    comm.Allreduce(MPI.IN_PLACE, out, op=op)
                else:
                    out = np.full(count, 77, dtype=dtype)  # poisoned: every element must be written
                    comm.Allreduce(x, out, op=op)
                if bits(out) != bits(want):
                    wrong = int(np.count_nonzero(out.view(np.uint8) != want.view(np.uint8)))
                    problems.append(f"{label} {op.name} {dtype.name} n={count}: {wrong} bytes differ")
    all_ok(problems)


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), BF16], ids=lambda d: d.name)
def test_reduce_scatter_gives_this_ranks_block_of_the_reference(chunked: mpiring.Communicator,
                                                                dtype: np.dtype, in_place: bool) -> None:
    problems: list[str] = []
    n, r = world.size, world.rank
    for op in (Op.SUM, Op.AVG, Op.MAX):
        for block in (0, 1, 5, 333, 1501):
            x = random_input(dtype, op, n * block, seed=block + int(op))
            want = reference(list(gather_inputs(x)), op)[r * block:(r + 1) * block]
            if in_place:
                out = x.copy()
                chunked.Reduce_scatter_block(MPI.IN_PLACE, out, op=op)
                out = out[:block]
            else:
                out = np.full(block, 77, dtype=dtype)
                chunked.Reduce_scatter_block(x, out, op=op)
            if bits(out) != bits(want):
                problems.append(f"{op.name} {dtype.name} block={block}: result differs from the reference")
    all_ok(problems)


def test_a_prefix_reduces_to_the_same_bits_as_the_whole(chunked: mpiring.Communicator) -> None:
    """The same data in calls of every size give the same bits, element by element."""
    x = random_input(np.dtype(np.float32), Op.SUM, 9000, seed=3)
    whole = np.empty_like(x)
    chunked.Allreduce(x, whole)
    problems = []
    for count in (1, 17, 1000, 4097, 8999):
        part = np.empty(count, dtype=x.dtype)
        chunked.Allreduce(x[:count], part)
        if bits(part) != bits(whole[:count]):
            problems.append(f"the first {count} elements differ from the whole call's")
    all_ok(problems)


def test_allgather_moves_the_bits(chunked: mpiring.Communicator) -> None:
    x = random_input(np.dtype(np.float16), Op.SUM, 777, seed=5)
    out = np.empty(777 * world.size, dtype=x.dtype)
    chunked.Allgather(x, out)
    all_ok([] if bits(out) == bits(gather_inputs(x)) else ["Allgather's bits differ"])


@pytest.mark.parametrize("name", ["ring", "mpi", "hier"])
def test_rows_that_do_not_keep_rank_order_refuse_by_name_on_every_rank(chunked: mpiring.Communicator,
                                                                       name: str) -> None:
    x = np.ones(10, dtype=np.float32)
    err = attempt(lambda: chunked.Allreduce(x, np.empty_like(x), algorithm=name))
    all_ok(expect_raised(err, InvalidArgumentError, f"'{name}'", "rank order", "mpi-twoshot"))
    y = np.ones(10, dtype=np.float32)  # the communicator still works
    chunked.Allreduce(MPI.IN_PLACE, y)
    all_ok([] if (y == world.size).all() else ["the next call is wrong"])


def test_every_rank_must_share_the_setting() -> None:
    if world.size == 1:
        pytest.skip("needs 2 ranks")
    err = attempt(lambda: mpiring.Communicator(world, gpu=False, reproducible=world.rank == 0).close())
    all_ok(expect_raised(err, SetupError, "reproducible"))


def test_the_variable_turns_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MPIRING_REPRODUCIBLE", "1")
    with mpiring.Communicator(world, gpu=False) as comm:
        x = random_input(np.dtype(np.float32), Op.SUM, 1234, seed=9)
        out = np.empty_like(x)
        comm.Allreduce(x, out)
        ok = comm.reproducible and bits(out) == bits(reference(list(gather_inputs(x))))
    all_ok([] if ok else ["MPIRING_REPRODUCIBLE=1 did not give the reference's bits"])


def test_a_bad_value_is_refused_on_every_rank() -> None:
    err = attempt(lambda: mpiring.Communicator(world, gpu=False, reproducible="yes"))
    all_ok(expect_raised(err, InvalidArgumentError, "reproducible='yes'"))
