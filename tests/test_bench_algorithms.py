"""mpiring.bench.algorithms: the sweeps come from the algorithm table."""

from __future__ import annotations

from mpiring import algorithms
from mpiring.bench.algorithms import AUTO, all_names, default_sweep, is_batched, reference, runnable
from mpiring.bench.cli import parse_args
from mpiring.buffers import Memory


def test_gpu_sweep_baselines_first_then_mpiring_then_auto():
    assert default_sweep(True) == ("nccl", "nccl-ring", "ring", "ring-events", "oneshot", "twoshot", "hier",
                                   "auto")
    assert reference(True) == "nccl"


def test_host_sweep_is_mpi_then_ring_and_auto_only_on_request():
    assert default_sweep(False) == ("mpi", "ring", "hier")
    assert reference(False) == "mpi"
    assert runnable(False) == ("mpi", "ring", "hier", AUTO)
    assert runnable(True) == default_sweep(True)


def test_every_table_row_is_covered():
    assert set(all_names()) == {a.name for a in algorithms.rows()} | {AUTO}
    assert set(default_sweep(True)) == set(algorithms.names(Memory.CUDA))
    assert set(default_sweep(False)) == set(algorithms.names(Memory.HOST, with_auto=False))
    assert {n for n in all_names() if is_batched(n)} == {"ring", "ring-events", "nccl-ring", "hier"}


def test_cli_accepts_every_algorithm():
    assert parse_args(["--algo", ",".join(all_names())]).algos == all_names()
