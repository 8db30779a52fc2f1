"""Which stream a call is ordered on (``mpiring.cuda.streams``): only CUDA torch tensors bring
torch's current stream; the GPU test (tests/gpu/test_gpu_torch.py) checks the ordering itself."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np

from mpiring.cuda.streams import torch_stream


class CpuTensor:
    """Looks like a torch CPU tensor to the check (its type's module is torch's)."""

    is_cuda = False


CpuTensor.__module__ = "torch"


def test_only_cuda_torch_tensors_bring_a_stream() -> None:
    assert torch_stream(np.ones(3)) is None
    assert torch_stream(CpuTensor()) is None
    assert torch_stream(None) is None
    assert torch_stream([1.0]) is None


class CudaTensor:
    is_cuda = True

    def get_device(self) -> int:
        return 1


CudaTensor.__module__ = "torch"


class FakeExternalStream:
    def __init__(self, ptr: int, device: int) -> None:
        self.ptr, self.device = ptr, device


def test_a_cuda_tensor_brings_torchs_current_stream_as_cupys(monkeypatch) -> None:
    """The raw stream pointer where torch has ``_cuda_getCurrentRawStream`` (no Stream object
    per call), else ``current_stream().cuda_stream``; one CuPy view per (device, pointer)."""
    from mpiring.cuda import streams

    asked: list[int] = []
    raw = SimpleNamespace(_cuda_getCurrentRawStream=lambda d: asked.append(d) or 0xBEEF)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(_C=raw))
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=SimpleNamespace(
        ExternalStream=FakeExternalStream)))
    monkeypatch.setattr(streams, "_VIEWS", {})
    view = torch_stream(CudaTensor())
    assert (view.ptr, view.device) == (0xBEEF, 1) and asked == [1]
    assert torch_stream(CudaTensor()) is view  # cached
    older = SimpleNamespace(_C=SimpleNamespace(), cuda=SimpleNamespace(
        current_stream=lambda d: SimpleNamespace(cuda_stream=0xF00D + d)))
    monkeypatch.setitem(sys.modules, "torch", older)
    assert torch_stream(CudaTensor()).ptr == 0xF00E
