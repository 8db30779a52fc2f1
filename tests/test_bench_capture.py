"""Graph captures run without the garbage collector (mpiring.bench.capture): a graph freed by a
collection in the middle of another capture broke that capture on one rank, and the --graph
bench hung at 4 ranks. The fakes below stand for CuPy's stream and graph: a Graph in a
reference cycle is freed only by the collector, and freeing one while a capture runs is what
CUDA refuses."""

from __future__ import annotations

import gc

import pytest

from mpiring.bench.capture import capture_guard
from mpiring.bench.measure import capture_cupy

CAPTURING = [False]
DESTROYED_WHILE_CAPTURING: list[str] = []


class FakeGraph:
    """A graph whose destructor, like CuPy's Graph.__dealloc__, must not run during a capture."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cycle = self  # only the cyclic collector frees it

    def __del__(self) -> None:
        if CAPTURING[0]:
            DESTROYED_WHILE_CAPTURING.append(self.name)

    def launch(self, stream: object = None) -> None:
        pass


class FakeStream:
    def begin_capture(self) -> None:
        CAPTURING[0] = True

    def end_capture(self) -> FakeGraph:
        CAPTURING[0] = False
        return FakeGraph("new")


@pytest.fixture
def eager_collector():
    """Collect at every allocation (threshold 1), as a busy process eventually does."""
    DESTROYED_WHILE_CAPTURING.clear()
    CAPTURING[0] = False
    old = gc.get_threshold()
    gc.enable()
    gc.set_threshold(1, 1, 1)
    yield
    gc.set_threshold(*old)
    gc.collect()


def leave_garbage(name: str) -> None:
    FakeGraph(name)  # unreachable at once, freed by the next collection


def allocating_call() -> None:
    """A call that allocates, so the collector (when on) would run during the capture."""
    for _ in range(50):
        leave_garbage("during")


def test_the_fakes_reproduce_the_hang_without_the_guard(eager_collector) -> None:
    """Control: a capture without the guard frees garbage graphs while capturing."""
    leave_garbage("earlier row")
    stream = FakeStream()
    stream.begin_capture()
    allocating_call()
    stream.end_capture()
    assert DESTROYED_WHILE_CAPTURING


def test_capture_cupy_frees_no_graph_while_capturing(eager_collector) -> None:
    leave_garbage("earlier row")
    graph = capture_cupy(FakeStream(), allocating_call, k=3)
    assert isinstance(graph, FakeGraph)
    assert DESTROYED_WHILE_CAPTURING == []
    assert gc.isenabled()
    gc.collect()  # what piled up during the capture is freed after it
    assert DESTROYED_WHILE_CAPTURING == []


def test_the_guard_collects_first_and_restores_the_collector_after_an_error(eager_collector) -> None:
    leave_garbage("earlier row")
    with pytest.raises(RuntimeError), capture_guard():
        assert not gc.isenabled()
        raise RuntimeError("a row that cannot be captured")
    assert gc.isenabled()


def test_the_guard_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    try:
        with capture_guard():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
