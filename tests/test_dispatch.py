"""mpiring.dispatch: which row a call runs, the memo of those answers, and the block rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mpiring import algorithms
from mpiring.algorithms import Collective
from mpiring.algorithms import auto as auto_table
from mpiring.buffers import Memory
from mpiring.dispatch import Dispatcher
from mpiring.errors import InvalidArgumentError
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
