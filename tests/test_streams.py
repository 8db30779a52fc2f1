"""Which stream a call is ordered on (``mpiring.cuda.streams``): only CUDA torch tensors bring
torch's current stream; the GPU test (tests/gpu/test_gpu_torch.py) checks the ordering itself."""

from __future__ import annotations

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
