"""Allreduce of numpy arrays on the host: runs wherever MPI does, no GPU needed.

    mpiexec -n 2 python examples/numpy_allreduce.py

Every rank holds a vector whose values depend on its rank. The program sums the vectors into a
new array, takes their maximum into an array it passes, and averages them in place; each result
is checked against the value it must have, which every rank can work out alone. Rank 0 prints
one line; a wrong result ends the program with an error naming the rank and the element.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

import mpiring

COUNT = 1 << 20  # elements per rank: 8 MiB of float64


def check(what: str, got: np.ndarray, want: np.ndarray) -> None:
    """Stop with an error naming the first wrong element (the values are exact: small integers)."""
    if not np.array_equal(got, want):
        bad = int(np.flatnonzero(got != want)[0])
        raise SystemExit(f"rank {MPI.COMM_WORLD.rank}: {what} is wrong at element {bad}: "
                         f"{got[bad]} instead of {want[bad]}")


def main() -> None:
    world = MPI.COMM_WORLD
    n, rank = world.size, world.rank
    base = (np.arange(COUNT) % 1000).astype(np.float64)  # small integers: every sum is exact
    ranks = n * (n + 1) / 2  # 1 + 2 + ... + n

    # gpu=False: host arrays only, also on a machine with GPUs. The communicator duplicates
    # MPI.COMM_WORLD and sets up its shared memory once; `with` closes it (collective).
    with mpiring.Communicator(world, gpu=False) as comm:
        x = base * (rank + 1)  # rank r holds (r + 1) * base

        total = comm.allreduce(x)  # a new array, like mpi4py's comm.allreduce
        check("the sum", total, base * ranks)

        largest = np.empty_like(x)
        comm.Allreduce(x, largest, op=MPI.MAX)  # into recvbuf, like mpi4py's comm.Allreduce
        check("the maximum", largest, base * n)

        comm.Allreduce(MPI.IN_PLACE, x, op="avg")  # in place: the sum divided by the ranks
        check("the average", x, base * ranks / n)

    if rank == 0:
        print(f"numpy_allreduce: sum, max and avg of {COUNT} float64 on {n} rank(s): exact")


if __name__ == "__main__":
    main()
