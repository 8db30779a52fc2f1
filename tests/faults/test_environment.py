"""Real nodes, as MPI reports them, in jobs of their own under a hard time limit. MPICH can make
one machine look like several nodes (``MPIR_CVAR_NUM_CLIQUES``): ``MPI_COMM_TYPE_SHARED`` then
splits the ranks as a real multi-node job does, so CI sees what such a job gets (the virtual
nodes of ``MPIRING_VIRTUAL_NODES`` are mpiring's own split; this is MPI's)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fault_launch import MPI_ENV_PREFIXES, find_mpiexec
from mpi4py import MPI

if MPI.COMM_WORLD.size > 1:
    pytest.skip("these tests launch their own mpiexec jobs", allow_module_level=True)

PROBE = r"""
import numpy as np
from mpi4py import MPI
import mpiring
world = MPI.COMM_WORLD
node = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.rank)
with mpiring.Communicator(world, gpu=False, timeout=20) as comm:
    x = np.arange(100_003, dtype=np.int64) * (world.rank + 1)
    out = comm.allreduce(x)  # auto: hier across the nodes
    want = np.arange(100_003, dtype=np.int64) * sum(r + 1 for r in range(world.size))
    topo = comm.topology
    print(f"rank {world.rank}: {topo.describe()}, node {topo.node_of[world.rank]} of size "
          f"{node.size}, auto={comm.resolve(x.size, x.dtype)} "
          f"{'OK' if np.array_equal(out, want) else 'WRONG'}", flush=True)
"""


@pytest.mark.parametrize(("cliques", "want"), [(2, "2 nodes of 2 ranks"), (4, "4 nodes of 1 rank")])
def test_a_communicator_over_mpis_nodes_finds_them_and_computes_exactly(cliques: int, want: str) -> None:
    """4 ranks on 2 (or 4) nodes as MPI sees them: one communicator spans them, finds the same
    nodes as MPI_COMM_TYPE_SHARED, and its hier allreduce is exact on every rank."""
    if "MPICH" not in MPI.Get_library_version():
        pytest.skip("simulating several nodes on one machine needs MPICH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(MPI_ENV_PREFIXES)}
    env["MPIR_CVAR_NUM_CLIQUES"] = str(cliques)
    proc = subprocess.run([find_mpiexec(), "-n", "4", sys.executable, "-c", PROBE], env=env,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout  # ranks print concurrently: lines may run into each other
    for r in range(4):
        assert f"rank {r}: {want}" in out and f"of size {4 // cliques}, auto=hier OK" in out, \
            f"{out}\n{proc.stderr}"
    assert "WRONG" not in out, out
    assert proc.returncode == 0, proc.stderr
