"""A failure on one (virtual) node stops the ranks of the other nodes at once (issue 25, item 7).

The failure mark of the control board reaches only the failed rank's node; before the notice
across nodes (mpiring.notice), the other nodes' ranks waited in their rail's allreduce for the
whole timeout (300 s by default). Here rank 0 fails in the middle of a hierarchical allreduce
(at its inter-node step) with a 60 s timeout: every other rank, on its node or another, raises
PeerFailedError naming rank 0 and its error within QUICK seconds.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok, attempt, expect_raised

import mpiring
from mpiring.errors import PeerFailedError
from mpiring.topology import VIRTUAL_NODES

pytestmark = pytest.mark.mpi(min_size=2)
world = MPI.COMM_WORLD
QUICK = 2.0  # seconds; the communicators' timeout is 60
VICTIM = 0


def make(spec: str) -> mpiring.Communicator:
    os.environ[VIRTUAL_NODES] = spec
    try:
        return mpiring.Communicator(world, gpu=False, slot_bytes=4096, timeout=60.0)
    finally:
        del os.environ[VIRTUAL_NODES]


@pytest.mark.parametrize("spec", ["2", "1,1" if world.size == 2 else f"1,{world.size - 1}"],
                         ids=["halves", "rank 0 alone"])
def test_a_rank_failing_mid_call_stops_every_node_at_once(spec: str) -> None:
    """Rank 0 raises where it would join its rail's allreduce (the ranks of its node are then
    in the ring or on their rails, the other nodes' ranks on their rails): every other rank
    raises PeerFailedError naming rank 0 and its error within QUICK seconds (the first failure
    it hears of: rank 0's, or a node mate's relay of it), nobody reports success, and a new
    communicator works afterwards."""
    comm = make(spec)
    problems: list[str] = []
    if comm.topology.nodes < 2:
        problems.append(f"{spec!r} made {comm.topology.describe()}")
    if world.rank == VICTIM:
        host = comm._host
        assert host is not None

        def failing(*args: Any) -> None:
            raise RuntimeError(f"injected failure on rank {world.rank}")

        host._inter = failing  # type: ignore[method-assign]
    x = np.arange(20_000, dtype=np.float64) + world.rank
    out = np.full_like(x, -1.0)
    start = time.monotonic()
    err = attempt(lambda: comm.Allreduce(x, out, algorithm="hier"))
    took = time.monotonic() - start
    if world.rank == VICTIM:
        problems += expect_raised(err, RuntimeError, "injected failure on rank 0")
    else:
        # Rank 0's own mark or notice, or a node mate's relay of it (each names rank 0's error).
        problems += expect_raised(err, PeerFailedError, f"rank {world.rank}: rank ",
                                  f"rank {VICTIM} failed with RuntimeError: injected failure on "
                                  f"rank {VICTIM}")
        if took > QUICK:
            node = comm.topology.node_of
            where = "its node" if node[world.rank] == node[VICTIM] else "another node"
            problems.append(f"rank {world.rank} (on {where}) raised after {took:.2f} s")
    start = time.monotonic()
    closed = attempt(comm.close)
    if closed is not None or time.monotonic() - start > QUICK:
        problems.append(f"close after the failure: {closed!r} after {time.monotonic() - start:.2f} s")
    world.Barrier()
    with make(spec) as fresh:
        if not np.array_equal(fresh.allreduce(np.ones(5)), np.full(5, float(world.size))):
            problems.append("a new communicator afterwards is wrong")
    all_ok(problems)
