"""The hierarchical allreduce on GPUs across virtual nodes (``MPIRING_VIRTUAL_NODES``): on 2
ranks, two nodes of one GPU each, so each node's ring is trivial and the rail between them is
a real inter-node engine (NCCL; a CUDA-aware MPI where the machine has one). The 2 x 2 layout
(4 ranks on 2 GPUs) runs as a job of its own: tests/gpu/test_gpu_hier_jobs.py.

Every dtype and op, sizes from 1 element to 1 GiB, in place and out of place, the pipelined
pieces, flat NCCL beside it, and the node algorithms' refusal.
"""

from __future__ import annotations

import os

import cupy
import numpy as np
import pytest
from gpu_helpers import WORLD, agree, mismatches, poison, rank_input, reference, span_for
from matrix import GPU_DTYPES as DTYPES  # noqa: E402
from matrix import OPS  # noqa: E402
from mpi4py import MPI

import mpiring
from mpiring.context.rails import cuda_aware_mpi
from mpiring.core.topology import VIRTUAL_NODES

RANK, SIZE = WORLD.rank, WORLD.size
pytestmark = [pytest.mark.mpi(min_size=2),
              pytest.mark.skipif(os.environ.get("MPIRING_SHARE_GPU") == "1",
                                 reason="the rails run NCCL, which refuses several ranks on one GPU")]


def spread(**kwargs) -> mpiring.Communicator:
    os.environ[VIRTUAL_NODES] = str(SIZE)  # one rank per node: every rank is on its own rail end
    try:
        return mpiring.Communicator(WORLD, gpu=True, **kwargs)
    finally:
        del os.environ[VIRTUAL_NODES]


@pytest.fixture(scope="module")
def comm():
    c = spread(inter="nccl")
    yield c
    c.close()


def run(c, op, dtype, count, placement, salt, **kwargs) -> str | None:
    x = rank_input(RANK, count, dtype, salt, span_for(op))
    want = reference(op, SIZE, count, salt)
    if placement == "out":
        out = cupy.empty_like(x)
        poison(out)
        c.Allreduce(x, out, op, **kwargs)
    else:
        out = x
        c.Allreduce(MPI.IN_PLACE, out, op, **kwargs)
    wrong = mismatches(out, want)
    return f"{op.name} {dtype} n={count} {placement} {kwargs}: {wrong} wrong" if wrong else None


def test_the_communicator_spans_nodes_and_auto_runs_hier(comm):
    agree(comm.topology.nodes == SIZE and comm.resolve(1 << 20, np.float32) == "hier",
          f"{comm.topology.describe()}, auto -> {comm.resolve(1 << 20, np.float32)}")


@pytest.mark.parametrize("placement", ["out", "in"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", DTYPES)
def test_hier_matrix(comm, dtype, op, placement):
    errors = [run(comm, op, dtype, n, placement, salt=n, algorithm="hier")
              for n in (1, SIZE - 1, 7919, (1 << 20) + 3)]
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.parametrize("placement", ["out", "in"])
def test_hier_sizes_up_to_one_gib(comm, placement):
    errors = [run(comm, mpiring.Op.SUM, "float32", n, placement, salt=3)
              for n in (1, 1023, 1 << 18, (1 << 24) + 5, 1 << 28)]
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.parametrize("pieces", [1, 2, 8])
def test_pipelined_pieces(comm, pieces):
    errors = [run(comm, mpiring.Op.SUM, "float32", n, "out", salt=pieces, algorithm="hier", batches=pieces)
              for n in (5, 3_000_017, 1 << 26)]
    agree(not any(errors), "; ".join(e for e in errors if e))


def test_flat_nccl_and_hier_agree_bitwise(comm):
    x = rank_input(RANK, 5_000_011, "int32", salt=4)
    a, b = comm.allreduce(x, algorithm="hier"), comm.allreduce(x, algorithm="nccl")
    agree(bool(cupy.array_equal(a, b)), "hier and nccl differ")


def test_back_to_back_with_stragglers(comm):
    """200 calls on changing data with a random rank's stream held back before some: the
    net and gather streams, the events between them and the ring's flags keep every call exact."""
    from gpu_helpers import gpu_nap

    rng = np.random.default_rng(5)
    stream = cupy.cuda.get_current_stream()
    errors = []
    for i in range(200):
        # every rank draws the same numbers (the seed is shared): only the nap is this rank's
        nap, who, seconds = rng.random() < 0.2, int(rng.integers(SIZE)), float(rng.uniform(0, 0.003))
        n, place = int(rng.integers(1, 2_000_000)), str(rng.choice(["out", "in"]))
        pieces = int(rng.integers(1, 5))
        if nap and who == RANK:
            gpu_nap(stream, seconds)
        errors.append(run(comm, mpiring.Op.SUM, "float32", n, place, salt=i, algorithm="hier",
                          batches=pieces))
    agree(not any(errors), "; ".join(e for e in errors if e)[:2000])


def test_node_algorithms_refuse(comm):
    with pytest.raises(mpiring.InvalidArgumentError, match="runs inside one node"):
        comm.Allreduce(MPI.IN_PLACE, cupy.ones(10, dtype=cupy.float32), algorithm="ring")
    agree(run(comm, mpiring.Op.SUM, "float32", 100, "out", salt=1) is None, "broken after refusal")


def test_reduce_scatter_and_allgather_across_nodes(comm):
    m = 100_003
    x = rank_input(RANK, SIZE * m, "float32", salt=2)
    got = cupy.empty(m, dtype=cupy.float32)
    comm.Reduce_scatter_block(x, got)  # auto: flat NCCL across nodes
    want = reference(mpiring.Op.SUM, SIZE, SIZE * m, 2)[RANK * m:(RANK + 1) * m]
    out = cupy.empty(SIZE * m, dtype=cupy.float32)
    comm.Allgather(got, out)
    agree(mismatches(got, want) == 0 and mismatches(out, reference(mpiring.Op.SUM, SIZE, SIZE * m, 2)) == 0,
          "Reduce_scatter_block / Allgather wrong across nodes")


def test_inter_mpi_runs_where_the_mpi_is_cuda_aware():
    """With a CUDA-aware MPI, hier over inter="mpi" passes the same checks; without one, set-up
    says so on every rank (which of the two this machine is, the test's output tells)."""
    if not cuda_aware_mpi():
        with pytest.raises(mpiring.SetupError, match="CUDA-aware"):
            spread(inter="mpi")
        print(f"\nrank {RANK}: this MPI is not CUDA-aware ({MPI.Get_library_version().splitlines()[0]})")
        return
    c = spread(inter="mpi")
    try:
        errors = [run(c, op, "float32", n, "out", salt=n, algorithm="hier")
                  for op in OPS for n in (1, 7919, (1 << 22) + 1)]
        agree(not any(errors), "; ".join(e for e in errors if e))
    finally:
        c.close()
