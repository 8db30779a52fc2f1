"""Allreduce of torch tensors: on GPUs where mpiring and torch both see them, else on the host.

    mpiexec -n 2 python examples/torch_allreduce.py

torch tensors go straight in, CUDA or CPU, bfloat16 included. A call on a CUDA tensor runs on
``torch.cuda.current_stream()``: after the work queued there, and later work there sees its result.
Every rank holds a vector whose values depend on its rank; the program sums the vectors into a new
tensor, takes their maximum into a tensor it passes, and averages a bfloat16 gradient-like tensor
in place (``op="avg"``, as data-parallel training does), checking each result against the value
it must have. Rank 0 prints one line; a wrong result ends the program with an error naming the
rank and the element.
"""

from __future__ import annotations

import torch
from mpi4py import MPI

import mpiring

COUNT = 1 << 20  # elements per rank


def check(what: str, got: torch.Tensor, want: torch.Tensor) -> None:
    """Stop with an error naming the first wrong element (the values are exact: small integers)."""
    if not torch.equal(got, want):
        bad = int(torch.nonzero(got != want)[0, 0])
        raise SystemExit(f"rank {MPI.COMM_WORLD.rank}: {what} is wrong at element {bad}: "
                         f"{got[bad].item()} instead of {want[bad].item()}")


def main() -> None:
    world = MPI.COMM_WORLD
    n, rank = world.size, world.rank
    with mpiring.Communicator(world) as comm:  # GPUs when CuPy finds them, else the host
        on_gpu = comm.gpu and torch.cuda.is_available()
        device = torch.device("cuda", comm.device) if on_gpu else torch.device("cpu")
        if on_gpu:
            torch.cuda.set_device(device)  # the GPU mpiring bound this rank to
        base = (torch.arange(COUNT, device=device) % 100).float()  # small integers: exact sums
        ranks = n * (n + 1) // 2  # 1 + 2 + ... + n
        x = base * (rank + 1)  # rank r holds (r + 1) * base

        total = comm.allreduce(x)  # a new tensor on x's device
        check("the sum", total, base * ranks)

        largest = torch.empty_like(x)
        comm.Allreduce(x, largest, op=MPI.MAX)
        check("the maximum", largest, base * n)

        # bfloat16 holds integers exactly up to 256: with values below 8, every partial sum is
        # exact on up to 8 ranks, and the average is rounded once, as it is here.
        small = base % 8
        grad = (small * (rank + 1)).to(torch.bfloat16)
        comm.Allreduce(MPI.IN_PLACE, grad, op="avg")  # the mean over ranks
        check("the average", grad, (small * ranks / n).to(torch.bfloat16))
        comm.synchronize()  # raises if a GPU call failed (host calls completed already)

        if rank == 0:
            print(f"torch_allreduce: sum, max and avg of {COUNT} elements on {n} rank(s), "
                  f"{device.type} tensors: exact")


if __name__ == "__main__":
    main()
