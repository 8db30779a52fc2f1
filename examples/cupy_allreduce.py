"""Allreduce of CuPy arrays in GPU memory: one process per GPU.

    mpiexec -n 2 python examples/cupy_allreduce.py      # on a node with 2 GPUs

The communicator binds the rank to a GPU of its node (rank i of the node to GPU i) and makes the
CUDA IPC staging once. Every rank holds a vector whose values depend on its rank; the program
sums the vectors into a new array, takes their maximum into an array it passes, and averages them
in place, and checks each result against the value it must have. GPU calls return once enqueued
on CuPy's current stream; later work on that stream (here the checks) sees their results, and
``comm.synchronize()`` raises what a call met on the GPU. Rank 0 prints one line; a wrong result
ends the program with an error naming the rank and the element.
"""

from __future__ import annotations

import cupy
from mpi4py import MPI

import mpiring

COUNT = 1 << 24  # elements per rank: 64 MiB of float32


def check(what: str, got: cupy.ndarray, want: cupy.ndarray) -> None:
    """Stop with an error naming the first wrong element (the values are exact: small integers)."""
    if not bool(cupy.array_equal(got, want)):
        bad = int(cupy.flatnonzero(got != want)[0])
        raise SystemExit(f"rank {MPI.COMM_WORLD.rank}: {what} is wrong at element {bad}: "
                         f"{float(got[bad])} instead of {float(want[bad])}")


def main() -> None:
    world = MPI.COMM_WORLD
    n, rank = world.size, world.rank
    # gpu=True: stop with the reason if this rank cannot use a GPU (instead of the host path).
    with mpiring.Communicator(world, gpu=True) as comm:
        base = (cupy.arange(COUNT) % 1000).astype(cupy.float32)  # exact in float32 up to ~30,000 ranks
        ranks = n * (n + 1) / 2  # 1 + 2 + ... + n
        x = base * (rank + 1)  # rank r holds (r + 1) * base

        total = comm.allreduce(x)  # a new CuPy array; auto picks the algorithm by size
        check("the sum", total, base * ranks)

        largest = cupy.empty_like(x)
        comm.Allreduce(x, largest, op=MPI.MAX)
        check("the maximum", largest, base * n)

        comm.Allreduce(MPI.IN_PLACE, x, op="avg")
        check("the average", x, base * ranks / n)
        comm.synchronize()  # raises if a call failed on the GPU (a peer timed out, ...)

        if rank == 0:
            print(f"cupy_allreduce: sum, max and avg of {COUNT} float32 on {n} GPU(s) "
                  f"(auto ran {comm.resolve(COUNT, 'float32')} at this size): exact")


if __name__ == "__main__":
    main()
