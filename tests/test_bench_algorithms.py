"""mpiring.bench.algorithms: the sweeps come from the algorithm table."""

from __future__ import annotations

from mpiring import algorithms
from mpiring.bench.algorithms import (
    AUTO,
    all_names,
    default_sweep,
    implements,
    is_batched,
    node_only,
    reference,
    runnable,
)
from mpiring.bench.cli import parse_args
from mpiring.buffers import Memory

RIVALS = ("torch", "torch-symm-1shot", "torch-symm-2shot", "nccl-symm")


def test_gpu_sweep_baselines_first_then_rivals_then_mpiring_then_auto():
    assert default_sweep(True) == ("nccl", "nccl-ring", *RIVALS, "ring", "ring-events", "oneshot",
                                   "twoshot", "oneshot-ll", "hier", "auto")
    assert reference(True) == "nccl"


def test_host_sweep_is_mpi_then_ring_and_auto_only_on_request():
    assert default_sweep(False) == ("mpi", "ring", "hier", "mpi-twoshot")
    assert reference(False) == "mpi"
    assert runnable(False) == ("mpi", "ring", "hier", "mpi-twoshot", AUTO)
    assert runnable(True) == default_sweep(True)


def test_every_table_row_is_covered():
    assert set(all_names()) == {a.name for a in algorithms.rows()} | {AUTO} | set(RIVALS)
    assert set(default_sweep(True)) == set(algorithms.names(Memory.CUDA)) | set(RIVALS)
    assert set(default_sweep(False)) == set(algorithms.names(Memory.HOST, with_auto=False))
    assert {n for n in all_names() if is_batched(n)} == {"ring", "ring-events", "nccl-ring", "hier"}


def test_cli_accepts_every_algorithm():
    assert parse_args(["--algo", ",".join(all_names())]).algos == all_names()


def test_a_collectives_sweep_holds_the_rows_that_implement_it():
    for collective in ("reduce_scatter", "allgather"):
        assert default_sweep(True, collective) == ("nccl", "ring", "ring-events", "auto")
        assert default_sweep(False, collective) == ("mpi", "ring", "mpi-twoshot")
        assert runnable(False, collective) == ("mpi", "ring", "mpi-twoshot", AUTO)
        assert reference(True, collective) == "nccl" and reference(False, collective) == "mpi"
    assert default_sweep(False, "allreduce") == default_sweep(False)
    assert implements("hier", "allreduce") and not implements("hier", "allgather")
    assert implements(AUTO, "reduce_scatter") and not implements("nccl-ring", "reduce_scatter")


def test_rows_of_one_node_are_left_out_across_nodes():
    assert node_only(True) == ("ring", "ring-events", "oneshot", "twoshot", "oneshot-ll",
                               "torch-symm-1shot", "torch-symm-2shot", "nccl-symm")
    assert node_only(False) == ("ring",)
    assert node_only(True, "allgather") == ("ring", "ring-events")
    assert default_sweep(True, nodes=2) == ("nccl", "nccl-ring", "torch", "hier", "auto")
    assert default_sweep(False, nodes=3) == ("mpi", "hier", "mpi-twoshot")
    assert default_sweep(False, "reduce_scatter", nodes=2) == ("mpi", "mpi-twoshot")
    assert runnable(True, "allgather", nodes=2) == ("nccl", "auto")
