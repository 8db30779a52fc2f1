"""mpiring.bench.algorithms: the sweeps come from the algorithm table."""

from __future__ import annotations

from mpiring import algorithms
from mpiring.bench.algorithms import (
    AUTO,
    AUTO_REPRODUCIBLE,
    VARIANTS,
    algorithm_of,
    all_names,
    default_sweep,
    graph_capturable,
    implements,
    is_batched,
    node_only,
    reference,
    runnable,
)
from mpiring.bench.cli import parse_args
from mpiring.core.buffers import Memory

RIVALS = ("torch", "torch-symm-1shot", "torch-symm-2shot", "nccl-symm", "nccl-lib")
DIRECT = ("nccl-direct", "mpi-direct")  # the table's nccl and mpi calls without mpiring


def test_gpu_sweep_direct_row_then_baselines_then_rivals_then_mpiring_then_auto():
    assert default_sweep(True) == ("nccl-direct", "nccl", "nccl-ring", *RIVALS, "ring", "ring-events",
                                   "oneshot", "twoshot", "oneshot-ll", "ce-twoshot", "hier", "auto")
    assert reference(True) == "nccl-direct"


def test_host_sweep_is_mpi_direct_then_mpi_then_ring_and_auto_only_on_request():
    assert default_sweep(False) == ("mpi-direct", "mpi", "ring", "hier", "mpi-twoshot")
    assert reference(False) == "mpi-direct"
    assert runnable(False) == ("mpi-direct", "mpi", "ring", "hier", "mpi-twoshot", AUTO,
                               AUTO_REPRODUCIBLE)
    assert runnable(True) == default_sweep(True) + (AUTO_REPRODUCIBLE,)


def test_every_table_row_is_covered():
    assert set(all_names()) == ({a.name for a in algorithms.rows()} | {AUTO, AUTO_REPRODUCIBLE}
                                | set(RIVALS) | set(DIRECT))
    assert set(default_sweep(True)) == set(algorithms.names(Memory.CUDA)) | set(RIVALS) | {"nccl-direct"}
    assert set(default_sweep(False)) == set(algorithms.names(Memory.HOST, with_auto=False)) | {"mpi-direct"}
    assert {n for n in all_names() if is_batched(n)} == {"ring", "ring-events", "nccl-ring", "hier"}


def test_cli_accepts_every_algorithm():
    assert parse_args(["--algo", ",".join(all_names())]).algos == all_names()


def test_a_collectives_sweep_holds_the_rows_that_implement_it():
    for collective in ("reduce_scatter", "allgather"):
        assert default_sweep(True, collective) == ("nccl", "ring", "ring-events", "ce-twoshot", "auto")
        assert default_sweep(False, collective) == ("mpi", "ring", "mpi-twoshot")
        assert runnable(False, collective) == ("mpi", "ring", "mpi-twoshot", AUTO, AUTO_REPRODUCIBLE)
        assert reference(True, collective) == "nccl" and reference(False, collective) == "mpi"
    assert default_sweep(False, "allreduce") == default_sweep(False)
    assert implements("hier", "allreduce") and not implements("hier", "allgather")
    assert implements(AUTO, "reduce_scatter") and not implements("nccl-ring", "reduce_scatter")


def test_rows_of_one_node_are_left_out_across_nodes():
    assert node_only(True) == ("ring", "ring-events", "oneshot", "twoshot", "oneshot-ll", "ce-twoshot",
                               "torch-symm-1shot", "torch-symm-2shot", "nccl-symm")
    assert node_only(False) == ("ring",)
    assert node_only(True, "allgather") == ("ring", "ring-events", "ce-twoshot")
    assert default_sweep(True, nodes=2) == ("nccl-direct", "nccl", "nccl-ring", "torch", "nccl-lib", "hier",
                                            "auto")
    assert default_sweep(False, nodes=3) == ("mpi-direct", "mpi", "hier", "mpi-twoshot")
    assert default_sweep(False, "reduce_scatter", nodes=2) == ("mpi", "mpi-twoshot")
    assert runnable(True, "allgather", nodes=2) == ("nccl", "auto", AUTO_REPRODUCIBLE)


def test_auto_reproducible_is_auto_through_a_reproducible_communicator_never_by_default():
    """The one variant: its calls name auto, on a communicator made with reproducible=True; it
    is in no default sweep (--reproducible or --algo add it), runs every collective (its
    communicator may refuse one: the rows say so), has no batches and can be captured."""
    assert set(VARIANTS) == {AUTO_REPRODUCIBLE}
    assert VARIANTS[AUTO_REPRODUCIBLE].algorithm == AUTO == algorithm_of(AUTO_REPRODUCIBLE)
    assert dict(VARIANTS[AUTO_REPRODUCIBLE].settings) == {"reproducible": True}
    assert algorithm_of("ring") == "ring"
    assert all_names()[-2:] == (AUTO, AUTO_REPRODUCIBLE)  # right after auto
    for gpu in (True, False):
        for collective in ("allreduce", "reduce_scatter", "allgather"):
            assert AUTO_REPRODUCIBLE not in default_sweep(gpu, collective)
            assert runnable(gpu, collective)[-2:] == (AUTO, AUTO_REPRODUCIBLE)
            assert implements(AUTO_REPRODUCIBLE, collective)
        assert AUTO_REPRODUCIBLE not in node_only(gpu)
    assert not is_batched(AUTO_REPRODUCIBLE) and graph_capturable(AUTO_REPRODUCIBLE)
    assert reference(True) == "nccl-direct" and reference(False) == "mpi-direct"
