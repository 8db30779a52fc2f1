"""Environments mpiring refuses at set-up, run as their own ``mpiexec`` jobs under a hard time
limit: ranks on different nodes. MPICH can make one machine look like several nodes
(``MPIR_CVAR_NUM_CLIQUES``), which is how CI sees the error a real multi-node job gets."""

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
try:
    mpiring.Communicator(world, gpu=False, timeout=20)
    print(f"rank {world.rank}: NO ERROR", flush=True)
except mpiring.SetupError as err:
    print(f"rank {world.rank}: SetupError: {err}", flush=True)
with mpiring.Communicator(node, gpu=False, timeout=20) as per_node:  # the remedy works
    out = per_node.allreduce(np.full(1000, world.rank + 1.0))
    want = sum(r + 1.0 for r in range(world.size) if r in node.group.Translate_ranks(
        list(range(node.size)), world.group))
    print(f"rank {world.rank}: per-node {'OK' if np.all(out == want) else 'WRONG'}", flush=True)
"""


def test_ranks_on_different_nodes_are_named_with_the_remedy() -> None:
    """4 ranks on two (simulated) nodes: every rank raises SetupError naming the cause and the
    remedy, and a communicator per node, built as the message says, then works. Protection:
    the node check at set-up (without it, set-up would try to share memory across nodes)."""
    if "MPICH" not in MPI.Get_library_version():
        pytest.skip("simulating several nodes on one machine needs MPICH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(MPI_ENV_PREFIXES)}
    env["MPIR_CVAR_NUM_CLIQUES"] = "2"
    proc = subprocess.run([find_mpiexec(), "-n", "4", sys.executable, "-c", PROBE], env=env,
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout  # ranks print concurrently: lines may run into each other
    message = ("SetupError: mpiring needs every rank on one node, but this communicator of 4 ranks "
               "spans several nodes (this node has 2 of them): build one Communicator per node, e.g. "
               "from comm.Split_type(MPI.COMM_TYPE_SHARED)")
    for r in range(4):
        assert f"rank {r}: {message}" in out, f"{out}\n{proc.stderr}"
        assert f"rank {r}: per-node OK" in out, f"{out}\n{proc.stderr}"
    assert "NO ERROR" not in out and "WRONG" not in out, out
    assert proc.returncode == 0, proc.stderr
