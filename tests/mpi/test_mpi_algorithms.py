"""Algorithm choice on the host path: auto, resolve, MPIRING_ALGO, and GPU-only algorithms
refused on host arrays on every rank."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import mpiring
from mpiring import algorithms
from mpiring.core.buffers import Memory


@pytest.mark.mpi
def test_auto_is_the_default_and_runs_the_ring_on_host_arrays(default_comm) -> None:
    assert default_comm.algorithm == "auto"
    for count in (0, 1, 1000, 1 << 20):
        assert default_comm.resolve(count, np.float32) == "ring"
    x = np.arange(1000, dtype=np.float64)
    out = default_comm.allreduce(x)
    np.testing.assert_array_equal(out, x * default_comm.size)


@pytest.mark.mpi
@pytest.mark.parametrize("algo", sorted(set(algorithms.names(Memory.CUDA, with_auto=False))
                                         - set(algorithms.names(Memory.HOST))))
def test_gpu_algorithms_are_refused_for_host_arrays(default_comm, algo: str) -> None:
    x = np.ones(100, dtype=np.float32)
    with pytest.raises(mpiring.InvalidArgumentError, match="host arrays"):
        default_comm.Allreduce(MPI.IN_PLACE, x, algorithm=algo)
    np.testing.assert_array_equal(x, 1)  # untouched
    out = default_comm.allreduce(x)  # and the communicator still works
    np.testing.assert_array_equal(out, default_comm.size)


@pytest.mark.mpi
def test_mpiring_algo_overrides_auto(monkeypatch) -> None:
    monkeypatch.setenv("MPIRING_ALGO", "mpi")
    with mpiring.Communicator(MPI.COMM_WORLD, gpu=False) as comm:
        assert comm.resolve(1000, np.float32) == "mpi"  # replaces auto's choice (README)
        assert comm.resolve(1000, np.float32, "ring") == "ring"  # a named algorithm stays
        x = np.arange(10, dtype=np.float32)
        np.testing.assert_array_equal(comm.allreduce(x), x * comm.size)


@pytest.mark.mpi
def test_mpiring_algo_for_the_other_memory_leaves_auto_alone(monkeypatch) -> None:
    monkeypatch.setenv("MPIRING_ALGO", "oneshot")  # GPU only: host arrays keep auto's choice
    with mpiring.Communicator(MPI.COMM_WORLD, gpu=False) as comm:
        assert comm.resolve(1000, np.float32) == "ring"
        np.testing.assert_array_equal(comm.allreduce(np.ones(4)), comm.size)


@pytest.mark.mpi
def test_bad_mpiring_algo_is_refused_at_creation(monkeypatch) -> None:
    monkeypatch.setenv("MPIRING_ALGO", "fastest")
    with pytest.raises(mpiring.InvalidArgumentError, match="MPIRING_ALGO='fastest': not one of ring, "):
        mpiring.Communicator(MPI.COMM_WORLD, gpu=False)


@pytest.mark.mpi
def test_bad_tuning_file_is_refused_at_creation(monkeypatch, tmp_path) -> None:
    path = MPI.COMM_WORLD.bcast(str(tmp_path / "bad.json"))
    if MPI.COMM_WORLD.rank == 0:
        with open(path, "w") as f:
            f.write('{"format": 1, "tables": {"4": [[10, "warp-speed"]]}}')
    MPI.COMM_WORLD.Barrier()
    monkeypatch.setenv("MPIRING_TUNING_FILE", path)
    with pytest.raises(mpiring.InvalidArgumentError, match="warp-speed"):
        mpiring.Communicator(MPI.COMM_WORLD, gpu=False)


@pytest.mark.mpi
def test_max_bytes_names_each_rows_limit_and_none_for_auto(default_comm) -> None:
    """``max_bytes``: None for auto (it picks a row that takes the message) and for the ring;
    a name that is no row is refused naming the choices."""
    assert default_comm.max_bytes("auto") is None
    assert default_comm.max_bytes("AUTO") is None
    assert default_comm.max_bytes("ring") is None
    with pytest.raises(mpiring.InvalidArgumentError, match="unknown algorithm 'fastest'"):
        default_comm.max_bytes("fastest")
