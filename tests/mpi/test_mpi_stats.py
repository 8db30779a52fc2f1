"""What a host communicator says about itself through its public introspection: ``stats()``
counts the calls of the full path and the agreement check's calls (replays: in
test_mpi_replay.py), ``tuning_table`` is ``tuning.table``, ``replays`` is the table whose length
is ``replays_kept``; the GPU-only hooks (``last_stream``, ``ring_pipeline(events=True)``,
``disable_gpu_timeouts()``) say there is no GPU. Each still answers once the communicator is closed."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpiring
from mpiring.core.errors import InvalidArgumentError, UnavailableError

world = MPI.COMM_WORLD


@pytest.mark.mpi
def test_stats_count_planned_and_checked_calls() -> None:
    size = world.size
    checked_calls = size > 1  # one rank has no one to disagree with
    with mpiring.Communicator(world, gpu=False, timeout=60.0) as comm:
        assert comm.stats() == mpiring.CallStats(0, 0, 0, comm.topology.nodes == 1)
        x, out = np.ones(64), np.empty(64)
        for _ in range(3):
            comm.Allreduce(x, out)
        assert comm.allreduce(x)[0] == size
        with pytest.raises(InvalidArgumentError):  # rejected while planned: still a call of the full path
            comm.Allreduce(x, np.empty(65))
        stats = comm.stats()
        assert (stats.planned, stats.replayed, stats.calls) == (5, 0, 5)
        assert stats.checked == (5 if checked_calls else 0)
    assert comm.stats() == stats  # closed: the counts stay readable


@pytest.mark.mpi
def test_without_the_check_nothing_is_checked() -> None:
    with mpiring.Communicator(world, gpu=False, timeout=60.0, check=False) as comm:
        comm.Allreduce(MPI.IN_PLACE, np.ones(8))
        assert comm.stats()[:3] == (1, 0, 0)


@pytest.mark.mpi
def test_tables_and_gpu_hooks_of_a_host_communicator() -> None:
    with mpiring.Communicator(world, gpu=False, timeout=60.0) as comm:
        assert comm.tuning_table is comm.tuning.table
        assert comm.replays_kept == 0 and comm.call_keys.array_type is None
        assert comm.last_stream is None
        with pytest.raises(InvalidArgumentError, match="GPU arrays only"):
            comm.ring_pipeline(events=True)
        with pytest.raises(UnavailableError):
            comm.ring_pipeline(gpu=True, events=True)
        with pytest.raises(UnavailableError, match="no GPUs"):
            comm.disable_gpu_timeouts()
        assert comm.ring_pipeline().transport is comm.ring_pipeline(gpu=False).transport
