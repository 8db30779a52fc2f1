"""mpiring.bench.algorithms: the sweeps come from the communicator's own lists."""

from __future__ import annotations

from mpiring.bench.algorithms import ALL, AUTO, BATCHED, default_sweep, reference, runnable
from mpiring.bench.cli import parse_args
from mpiring.communicator import ALGORITHMS, CUDA_ALGORITHMS, HOST_ALGORITHMS


def test_gpu_sweep_baselines_first_then_mpiring_then_auto():
    assert default_sweep(True) == ("nccl", "nccl-ring", "ring", "oneshot", "twoshot", "auto")
    assert reference(True) == "nccl"


def test_host_sweep_is_mpi_then_ring_and_auto_only_on_request():
    assert default_sweep(False) == ("mpi", "ring")
    assert reference(False) == "mpi"
    assert runnable(False) == ("mpi", "ring", AUTO)
    assert runnable(True) == default_sweep(True)


def test_every_communicator_algorithm_is_covered():
    assert set(ALL) == set(ALGORITHMS)
    assert set(default_sweep(True)) == set(CUDA_ALGORITHMS) | {AUTO}
    assert set(default_sweep(False)) == set(HOST_ALGORITHMS)
    assert set(BATCHED) <= set(ALGORITHMS)


def test_cli_accepts_every_algorithm():
    assert parse_args(["--algo", ",".join(ALL)]).algos == ALL
