"""The torch rivals' calls on the bench's stream, without a GPU or torch: a fake torch (and CuPy)
that keeps each library's current stream, counts every switch of torch's current stream
(``torch.cuda.stream(...)`` entered, ``torch.cuda.set_stream``) and records the stream each
collective and copy was enqueued on.

The rows are timed the way torch's users call torch (they set the stream once, then call), so
a timed call must not switch torch's stream: at most one switch where the bench changed
CuPy's stream (a new phase), none where the bench made both current, and every call still on
CuPy's current stream, the one the bench's timer records its events on. The graph capture
(``--graph``) puts every call on the capture stream and leaves torch's current stream where it
found it.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import sys
import types
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mpiring.bench.rivals import env
from mpiring.bench.rivals.base import RivalContext
from mpiring.bench.rivals.torch_nccl import TorchAllReduce
from mpiring.bench.rivals.torch_symm import TorchSymm

CALLS = 10  # calls per phase
SIDE, OTHER, GRAPH = 0xA100, 0xB200, 0xC300  # CuPy streams the bench may make current


class Stream:
    """torch's handle of a CUDA stream (``torch.cuda.Stream``, ``ExternalStream``)."""

    def __init__(self, ptr: int) -> None:
        self.cuda_stream = ptr


class FakeGpu:
    """Both libraries' current streams (pointers; 0 is the legacy default stream of both), torch's
    stream switches, and what was enqueued where."""

    def __init__(self) -> None:
        self.cupy_stream = 0
        self.torch_stream = 0
        self.switches = 0  # torch.cuda.stream(...) entered + torch.cuda.set_stream calls
        self.capturing: int | None = None  # the stream torch.cuda.graph captures, while it does
        self.enqueued: list[tuple[str, int, int]] = []  # (what, torch's stream, CuPy's stream)

    def enqueue(self, what: str) -> None:
        if self.capturing is not None:
            assert self.torch_stream == self.capturing, "work on another stream during a capture"
            what += " (captured)"
        self.enqueued.append((what, self.torch_stream, self.cupy_stream))

    @contextlib.contextmanager
    def cupy_on(self, ptr: int) -> Iterator[None]:
        """CuPy's current stream made ``ptr`` (``with cupy_stream:``), as the bench's phases do."""
        before, self.cupy_stream = self.cupy_stream, ptr
        try:
            yield
        finally:
            self.cupy_stream = before


def _module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return mod


def fake_torch(gpu: FakeGpu) -> dict[str, types.ModuleType]:
    """``torch``, ``torch.cuda``, ``torch.distributed`` (and its ``_symmetric_memory``) on ``gpu``."""
    torch, cuda, dist = _module("torch"), _module("torch.cuda"), _module("torch.distributed")
    symm = _module("torch.distributed._symmetric_memory")
    torch.__version__ = "0.0.0+fake"
    torch.cuda, torch.distributed = cuda, dist  # the symmetric memory module: in sys.modules
    torch.device = lambda kind, index: SimpleNamespace(type=kind, index=index)
    torch.float32, torch.bfloat16 = "float32", "bfloat16"

    class Tensor:
        def __init__(self, n: int) -> None:
            self.n = n

        def numel(self) -> int:
            return self.n

        def __getitem__(self, index: slice) -> Tensor:
            return Tensor(len(range(self.n)[index]))

        def copy_(self, _other: Tensor) -> None:
            gpu.enqueue("copy")

    torch.Tensor = Tensor
    torch.from_dlpack = lambda arr: arr

    def set_stream(stream: Stream) -> None:
        gpu.switches += 1
        gpu.torch_stream = stream.cuda_stream

    @contextlib.contextmanager
    def stream(s: Stream) -> Iterator[None]:
        gpu.switches += 1
        before, gpu.torch_stream = gpu.torch_stream, s.cuda_stream
        try:
            yield
        finally:
            gpu.torch_stream = before

    @contextlib.contextmanager
    def graph(_graph: Any, stream: Stream, capture_error_mode: str) -> Iterator[None]:
        assert capture_error_mode == "thread_local"
        before, gpu.torch_stream = gpu.torch_stream, stream.cuda_stream  # as torch's does
        gpu.capturing = stream.cuda_stream
        try:
            yield
        finally:
            gpu.capturing, gpu.torch_stream = None, before

    class CUDAGraph:
        def replay(self) -> None:
            gpu.enqueue("replay")

    cuda.set_stream, cuda.stream, cuda.graph, cuda.CUDAGraph = set_stream, stream, graph, CUDAGraph
    cuda.current_stream = lambda device=None: Stream(gpu.torch_stream)
    cuda.default_stream = lambda device=None: Stream(0)
    cuda.ExternalStream = lambda ptr, device=None: Stream(ptr)
    cuda.set_device = cuda.synchronize = lambda device=None: None
    cuda.is_available = lambda: True
    cuda.nccl = SimpleNamespace(version=lambda: (2, 0, 0))

    dist.TCPStore = lambda *args, **kwargs: SimpleNamespace(port=29500)
    dist.init_process_group = lambda backend, **kwargs: None
    dist.destroy_process_group = lambda: None
    dist.group = SimpleNamespace(WORLD=SimpleNamespace(group_name="0"))
    dist.ReduceOp = SimpleNamespace(SUM="sum", PRODUCT="prod", MAX="max", MIN="min")
    dist.all_reduce = lambda tensor, op, group: gpu.enqueue("all_reduce")

    # SymmetricMemory: the two ops an older torch has (plans "1shot" and "2shot-inplace").
    symm.empty = lambda count, dtype, device: Tensor(count)
    symm.rendezvous = lambda buffer, group_name: SimpleNamespace()
    torch.ops = SimpleNamespace(symm_mem=SimpleNamespace(
        one_shot_all_reduce_out=lambda symm, op, group, out: gpu.enqueue("one_shot"),
        two_shot_all_reduce_=lambda symm, op, group: gpu.enqueue("two_shot")))
    return {"torch": torch, "torch.cuda": cuda, "torch.distributed": dist,
            "torch.distributed._symmetric_memory": symm}


def fake_cupy(gpu: FakeGpu) -> types.ModuleType:
    cupy, cuda = _module("cupy"), _module("cupy.cuda")
    cupy.cuda = cuda
    cuda.Device = lambda *a: SimpleNamespace(id=0)
    cuda.get_current_stream = lambda: SimpleNamespace(ptr=gpu.cupy_stream)
    return cupy


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    state = FakeGpu()
    for name, mod in fake_torch(state).items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(state))
    for name, value in env.OFF.items():  # what the set-up sets, put back after
        monkeypatch.setenv(name, value)
    return state


def rival_ready(kind: str, count: int = 256) -> tuple[Any, Any]:
    """A torch rival set up on the fake torch, with one point's buffers (torch tensors)."""
    world = SimpleNamespace(rank=0, size=2, allgather=lambda x: [x, x])
    ctx = RivalContext(max_count=count, dtype=np.dtype("float32"), op="sum", rank=0, size=2,
                       nodes=1, timeout=30.0)
    rival = TorchAllReduce() if kind == "torch" else TorchSymm(kind.removeprefix("torch-symm-"))
    rival.setup(world, ctx)
    torch = sys.modules["torch"]
    bufs = SimpleNamespace(send=torch.Tensor(count), recv=torch.Tensor(count), count=count,
                           gen=SimpleNamespace(dtype=np.dtype("float32")))
    return rival, bufs


RIVALS = ("torch", "torch-symm-1shot", "torch-symm-2shot")


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("kind", RIVALS)
def test_timed_calls_switch_no_stream_and_follow_the_benchs_stream(gpu, kind, in_place):
    """Phases on CuPy's default stream, then on side streams CuPy alone made current, then back:
    every call (its copies too) on CuPy's stream, and torch's stream switched at most once per
    change of CuPy's, never per call."""
    rival, bufs = rival_ready(kind)
    call = rival.prepare(bufs, in_place)
    try:
        for ptr in (0, SIDE, SIDE, OTHER, 0):
            gpu.enqueued.clear()
            before = gpu.switches
            with gpu.cupy_on(ptr):
                for _ in range(CALLS):
                    call()
            assert gpu.enqueued and all(t == c == ptr for _, t, c in gpu.enqueued), gpu.enqueued
            assert gpu.switches - before <= 1, f"{gpu.switches - before} switches in {CALLS} calls"
            assert gpu.torch_stream == ptr  # set once, as a torch user sets their stream
        assert gpu.switches <= 3  # the changes 0 -> SIDE -> OTHER -> 0
    finally:
        rival.close()


@pytest.mark.parametrize("kind", RIVALS)
def test_where_the_bench_makes_both_streams_current_no_call_switches(gpu, kind):
    """The overlap timeline makes its stream current for CuPy and torch around its loops
    (``GpuTimeline._on_ar``): the calls then switch nothing, before, between and after."""
    rival, bufs = rival_ready(kind)
    call = rival.prepare(bufs, False)
    torch = sys.modules["torch"]
    try:
        call()  # a phase on the default stream first
        for _ in range(2):  # the timeline's loops, one after the other
            before = gpu.switches
            with gpu.cupy_on(SIDE), torch.cuda.stream(Stream(SIDE)):
                gpu.enqueued.clear()
                for _ in range(CALLS):
                    call()
            assert gpu.switches - before == 1  # the timeline's own, none of the calls'
            assert gpu.enqueued and all(t == c == SIDE for _, t, c in gpu.enqueued)
        gpu.enqueued.clear()
        call()
        assert gpu.enqueued and all(t == c == 0 for _, t, c in gpu.enqueued)
    finally:
        rival.close()


@pytest.mark.parametrize("kind", RIVALS)
def test_graph_capture_on_the_capture_stream_leaves_torchs_stream_as_it_was(gpu, kind):
    """``--graph``: one call, then k captured, all on the bench's capture stream (CuPy's current
    one), one switch of torch's stream for the whole capture; torch's current stream is back on
    the default one after, where the eager calls and the bench's other torch work find it; the
    replay runs on the capture stream."""
    rival, bufs = rival_ready(kind)
    call = rival.prepare(bufs, True)
    try:
        call()
        gpu.enqueued.clear()
        before = gpu.switches
        with gpu.cupy_on(GRAPH):
            graph = rival.capture(SimpleNamespace(ptr=GRAPH), call, 3)
            assert gpu.switches - before == 1
            assert gpu.torch_stream == 0
            assert all(t == GRAPH for _, t, _ in gpu.enqueued)
            per_call = len(gpu.enqueued) // 4
            assert sum("captured" in what for what, _, _ in gpu.enqueued) == 3 * per_call
            gpu.enqueued.clear()
            graph.launch(SimpleNamespace(ptr=GRAPH))
            assert gpu.enqueued == [("replay", GRAPH, GRAPH)] and gpu.torch_stream == 0
        gpu.enqueued.clear()
        call()  # the next point's eager calls
        assert gpu.enqueued and all(t == c == 0 for _, t, c in gpu.enqueued)
    finally:
        rival.close()
