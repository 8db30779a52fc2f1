"""mpiring.dispatch: which row a call runs, the memo of those answers, and the block rules."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from mpi4py import MPI

from mpiring import algorithms
from mpiring.algorithms import Collective
from mpiring.algorithms import auto as auto_table
from mpiring.buffers import Memory
from mpiring.dispatch import Dispatcher
from mpiring.errors import InvalidArgumentError
from mpiring.ops import Op
from mpiring.topology import from_node_keys


class FakeGpu:
    memory = Memory.CUDA
    oneshot_limit = 1 << 20

    def __init__(self) -> None:
        self.capture, self.asked = False, 0

    def capturing(self) -> bool:
        self.asked += 1
        return self.capture


def dispatcher(gpu: FakeGpu, nodes: int = 1) -> Dispatcher:
    topo = from_node_keys([n for n in range(nodes) for _ in range(2)])
    return Dispatcher("auto", None, None, auto_table.load(), topo, host=None, gpu=gpu)


@pytest.mark.parametrize("nodes", [1, 2])
def test_memoized_answers_are_the_fresh_ones(nodes: int) -> None:
    d = dispatcher(FakeGpu(), nodes)
    for size in (1 << 10, 1 << 20, 64 << 20, 1 << 30):
        for algo in ("auto", "nccl", None):
            for collective in Collective:
                first = d.row(size, Memory.CUDA, algo, collective)
                assert d.row(size, Memory.CUDA, algo, collective) is first
                assert d._resolve(size, Memory.CUDA, algo, collective) is first


def test_graph_capture_is_asked_afresh_for_rows_that_cannot_be_captured() -> None:
    gpu = FakeGpu()
    d = dispatcher(gpu)
    assert d.row(1 << 30, Memory.CUDA, "ring").name == "ring"
    gpu.capture = True
    with pytest.raises(InvalidArgumentError, match="captured"):
        d.row(1 << 30, Memory.CUDA, "ring")  # the memo does not hide a capture begun since
    asked = gpu.asked
    assert d.row(4096, Memory.CUDA, "oneshot").name == "oneshot"
    assert d.row(4096, Memory.CUDA, "oneshot").name == "oneshot"
    assert gpu.asked == asked  # a capturable row asks nothing


def test_errors_are_not_memoized_and_the_table_version_invalidates() -> None:
    d = dispatcher(FakeGpu())
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="at most"):
            d.row(2 << 20, Memory.CUDA, "oneshot")
    with pytest.raises(InvalidArgumentError, match="unknown algorithm"):
        d.row(4096, Memory.CUDA, "shiny")
    shiny = replace(algorithms.get("nccl"), name="shiny", code=4242, auto=False, baseline=False)
    algorithms.register(shiny)
    try:
        assert d.row(4096, Memory.CUDA, "shiny") is shiny
    finally:
        algorithms.unregister("shiny")
    with pytest.raises(InvalidArgumentError, match="unknown algorithm"):
        d.row(4096, Memory.CUDA, "shiny")


class FakeHost:
    """Records what the rows and the dispatcher ask of a host backend."""

    memory = Memory.HOST

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def check_buffer(self, buf, role) -> None:
        pass

    def capturing(self) -> bool:
        return False

    def run_ring(self, call, collective, events=False) -> None:
        self.log.append(("ring", call.op, collective))

    def average(self, buf, ranks) -> None:
        self.log.append(("average", buf.address, buf.count, ranks))


@pytest.mark.parametrize(("collective", "in_place"), [(Collective.ALLREDUCE, False),
                                                      (Collective.ALLREDUCE, True),
                                                      (Collective.REDUCE_SCATTER, False),
                                                      (Collective.REDUCE_SCATTER, True)])
def test_avg_runs_the_sum_then_divides_this_ranks_result(collective: Collective, in_place: bool) -> None:
    """On a row without its own average the call sums, then divides exactly the elements this
    rank receives (Reduce_scatter_block: its block; in place, the start of recvbuf) by the rank
    count; the agreement check still sees op avg, so a rank summing instead is a mismatch."""
    host = FakeHost()
    topo = from_node_keys([0, 0, 0])
    d = Dispatcher("auto", None, None, auto_table.load(), topo, host=host, gpu=None)
    m = 5
    whole = np.ones(3 * m, np.float32)
    if collective is Collective.ALLREDUCE:
        send, recv = (MPI.IN_PLACE, whole) if in_place else (whole, np.zeros_like(whole))
    else:
        send, recv = (MPI.IN_PLACE, whole) if in_place else (whole, np.zeros(m, np.float32))
    prepared = d.prepare(collective, send, recv, "avg", "ring", None)
    assert prepared.call.op is Op.SUM and prepared.values["op"] == int(Op.AVG)
    prepared.run(host, prepared.call)
    count = recv.size if collective is Collective.ALLREDUCE else m
    address = recv.__array_interface__["data"][0]
    assert host.log == [("ring", Op.SUM, collective), ("average", address, count, 3)]


def test_avg_refuses_integers_and_ignores_allgather() -> None:
    d = Dispatcher("auto", None, None, auto_table.load(), from_node_keys([0, 0]), host=FakeHost(), gpu=None)
    with pytest.raises(InvalidArgumentError, match="op 'avg' averages floating-point arrays, not int64"):
        d.prepare(Collective.ALLREDUCE, np.ones(4, np.int64), np.zeros(4, np.int64), "avg", "ring", None)
    ints = np.ones(2, np.int64), np.zeros(4, np.int64)
    prepared = d.prepare(Collective.ALLGATHER, *ints, "sum", "ring", None)
    assert prepared.run is prepared.row.allgather


@pytest.mark.parametrize("collective", list(Collective))
def test_a_choice_made_while_capturing_is_not_kept_for_eager_calls(collective: Collective) -> None:
    """auto while capturing picks a capturable row (one rank, the block collectives: nccl); the
    eager calls before and after get the eager choice (the ring), memo or not."""
    gpu = FakeGpu()
    topo = from_node_keys([0])
    d = Dispatcher("auto", None, None, auto_table.load(), topo, host=None, gpu=gpu)
    size = 64 << 20
    assert d.row(size, Memory.CUDA, None, collective).name == "ring"
    gpu.capture = True
    assert d.row(size, Memory.CUDA, None, collective).name == "nccl"
    assert d.row(size + 4, Memory.CUDA, None, collective).name == "nccl"  # a miss while capturing
    gpu.capture = False
    assert d.row(size, Memory.CUDA, None, collective).name == "ring"
    assert d.row(size + 4, Memory.CUDA, None, collective).name == "ring"
