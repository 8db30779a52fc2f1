"""The per-call agreement check sees every difference that makes two ranks' calls differ
(issue 25, item 4), on 2 to 4 ranks, for every host row of the collective:

* Reduce_scatter_block and Allgather: the block each rank gets or gives, counted the same way
  in place or not, and whether the rank passed ``MPI.IN_PLACE`` (MPI's rule: on every rank or
  on none). Before, only recvbuf's count was compared: a rank in place with ``c`` elements
  (block ``c / n``) and ranks out of place with recvbuf ``c`` (block ``c``) passed the check and
  returned wrong values, or timed out;
* Allreduce: the count, in place or not; whether a rank reduces in place is its own business
  (its buffers hold ``count`` elements either way), so a mix runs and is exact.

A mismatch raises RankMismatchError on every rank before any data moves (the buffers are left
as they were) and leaves the communicator usable.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok, attempt, expect_raised

import mpiring
from mpiring.core.errors import RankMismatchError

pytestmark = pytest.mark.mpi(min_size=2)
world = MPI.COMM_WORLD
SIZES = [12, 1200, 120_000]  # elements of the recvbuf: multiples of 2, 3 and 4 ranks
ALGOS = ["ring", "mpi", "auto"]
POISON = -1.0  # inputs are positive: no block or sum of them is negative


def odd_rank(which: str) -> int:
    return 0 if which == "first" else world.size - 1


def inputs(count: int, salt: int = 0) -> np.ndarray:
    """This rank's input: small positive integers (exact sums in float64)."""
    return ((np.arange(count) * 7 + salt) % 13 + 1 + world.rank).astype(np.float64)


def mismatch(err: BaseException | None, *fields: str, absent: tuple[str, ...] = ()) -> list[str]:
    """Problems unless ``err`` is the agreement check's RankMismatchError naming ``fields``
    (and not ``absent``)."""
    problems = expect_raised(err, RankMismatchError, *(f"{f} (this rank" for f in fields))
    return problems + [f"{f} named: {err}" for f in absent if f"{f} (this rank" in str(err)]


def unchanged(label: str, buf: np.ndarray, before: np.ndarray) -> list[str]:
    return [] if np.array_equal(buf, before) else [f"{label} was written by a call that failed its check"]


def still_usable(comm: mpiring.Communicator, algo: str) -> list[str]:
    """After the mismatch, a Reduce_scatter_block and an Allgather of the same row are exact."""
    n, r, m = world.size, world.rank, 5
    x = inputs(n * m, salt=3)
    got = np.full(m, POISON)
    comm.Reduce_scatter_block(x, got, algorithm=algo)
    stack = np.stack(world.allgather(x))
    problems = [] if np.array_equal(got, stack.sum(axis=0)[r * m:(r + 1) * m]) else [f"after: RS {got}"]
    out = np.full(n * m, POISON)
    comm.Allgather(x[:m], out, algorithm=algo)
    if not np.array_equal(out, stack[:, :m].reshape(-1)):
        problems.append(f"after: AG {out}")
    return problems


def run_and_judge(comm: mpiring.Communicator, algo: str, call: Callable[[], None],
                  buffers: list[tuple[str, np.ndarray]], *fields: str,
                  absent: tuple[str, ...] = ()) -> None:
    """Run ``call`` on this rank; every rank must raise the mismatch naming ``fields``, leave
    ``buffers`` as they were, and still reduce exactly afterwards."""
    before = [(label, buf.copy()) for label, buf in buffers]
    problems = mismatch(attempt(call), *fields, absent=absent)
    for (label, buf), (_, kept) in zip(buffers, before, strict=True):
        problems += unchanged(label, buf, kept)
    all_ok(problems + still_usable(comm, algo))


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("c", SIZES)
@pytest.mark.parametrize("algo", ALGOS)
def test_reduce_scatter_in_place_with_another_block(small_comm: mpiring.Communicator, algo: str, c: int,
                                                    which: str) -> None:
    """The issue's call: one rank in place with recvbuf ``c`` (block ``c / n``), the others out
    of place with sendbuf ``c * n`` and recvbuf ``c`` (block ``c``): recvbuf's count agrees, the
    blocks and the placement differ."""
    n = world.size
    if world.rank == odd_rank(which):
        buf = inputs(c)
        run_and_judge(small_comm, algo,
                      lambda: small_comm.Reduce_scatter_block(MPI.IN_PLACE, buf, algorithm=algo),
                      [("recvbuf", buf)], "block", "in_place")
    else:
        x, out = inputs(c * n), np.full(c, POISON)
        run_and_judge(small_comm, algo, lambda: small_comm.Reduce_scatter_block(x, out, algorithm=algo),
                      [("sendbuf", x), ("recvbuf", out)], "block", "in_place")


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("c", SIZES)
@pytest.mark.parametrize("algo", ALGOS)
def test_reduce_scatter_in_place_on_some_ranks(small_comm: mpiring.Communicator, algo: str, c: int,
                                               which: str) -> None:
    """Equal blocks (``c / n``), but MPI.IN_PLACE on one rank only: MPI requires it on every
    rank or on none, so the check names the placement, not the block."""
    n = world.size
    x = inputs(c)
    if world.rank == odd_rank(which):
        run_and_judge(small_comm, algo,
                      lambda: small_comm.Reduce_scatter_block(MPI.IN_PLACE, x, algorithm=algo),
                      [("recvbuf", x)], "in_place", absent=("block",))
    else:
        out = np.full(c // n, POISON)
        run_and_judge(small_comm, algo, lambda: small_comm.Reduce_scatter_block(x, out, algorithm=algo),
                      [("sendbuf", x), ("recvbuf", out)], "in_place", absent=("block",))


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("c", SIZES)
@pytest.mark.parametrize("algo", ALGOS)
def test_allgather_in_place_on_some_ranks(small_comm: mpiring.Communicator, algo: str, c: int,
                                          which: str) -> None:
    """Allgather, equal blocks, MPI.IN_PLACE on one rank only: the placement is named."""
    n = world.size
    out = np.full(c, POISON)
    if world.rank == odd_rank(which):
        run_and_judge(small_comm, algo, lambda: small_comm.Allgather(MPI.IN_PLACE, out, algorithm=algo),
                      [("recvbuf", out)], "in_place", absent=("block", "count"))
    else:
        mine = inputs(c // n)
        run_and_judge(small_comm, algo, lambda: small_comm.Allgather(mine, out, algorithm=algo),
                      [("sendbuf", mine), ("recvbuf", out)], "in_place", absent=("block", "count"))


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("c", SIZES)
@pytest.mark.parametrize("algo", ALGOS)
def test_allgather_with_another_block(small_comm: mpiring.Communicator, algo: str, c: int,
                                      which: str) -> None:
    """Allgather in place on every rank, one rank with twice the others' blocks."""
    n = world.size
    out = np.full(2 * c if world.rank == odd_rank(which) else c, POISON)
    out[world.rank * (out.size // n):(world.rank + 1) * (out.size // n)] = 1.0
    run_and_judge(small_comm, algo, lambda: small_comm.Allgather(MPI.IN_PLACE, out, algorithm=algo),
                  [("recvbuf", out)], "count", "block", absent=("in_place",))


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("c", SIZES)
@pytest.mark.parametrize("algo", ALGOS)
def test_allreduce_in_place_with_another_count(small_comm: mpiring.Communicator, algo: str, c: int,
                                               which: str) -> None:
    """Allreduce, one rank in place with ``c`` elements, the others out of place with ``c * n``
    (the counts the issue's Reduce_scatter_block mixes): the count is named."""
    n = world.size
    if world.rank == odd_rank(which):
        buf = inputs(c)
        run_and_judge(small_comm, algo, lambda: small_comm.Allreduce(MPI.IN_PLACE, buf, algorithm=algo),
                      [("recvbuf", buf)], "count", absent=("in_place", "block"))
    else:
        x, out = inputs(c * n), np.full(c * n, POISON)
        run_and_judge(small_comm, algo, lambda: small_comm.Allreduce(x, out, algorithm=algo),
                      [("sendbuf", x), ("recvbuf", out)], "count", absent=("in_place", "block"))


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("c", SIZES)
@pytest.mark.parametrize("algo", ALGOS)
def test_allreduce_in_place_on_some_ranks_is_exact(small_comm: mpiring.Communicator, algo: str, c: int,
                                                   which: str) -> None:
    """Allreduce with equal counts, in place on one rank only: allowed (in place is each rank's
    own business), and every rank gets the exact sum."""
    x = inputs(c)
    want = np.stack(world.allgather(x)).sum(axis=0)
    if world.rank == odd_rank(which):
        got = x.copy()
        err = attempt(lambda: small_comm.Allreduce(MPI.IN_PLACE, got, algorithm=algo))
    else:
        got = np.full(c, POISON)
        err = attempt(lambda: small_comm.Allreduce(x, got, algorithm=algo))
    problems = [f"raised {type(err).__name__}: {err}"] if err is not None else []
    if err is None and not np.array_equal(got, want):
        problems.append(f"{np.count_nonzero(got != want)} of {c} elements wrong")
    all_ok(problems)
