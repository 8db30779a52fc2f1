"""Which stream a GPU call is ordered on: CuPy's current stream, or torch's for torch tensors.

mpiring enqueues on CuPy's current stream. A torch program orders its work on
``torch.cuda.current_stream()`` instead (a side stream under ``torch.cuda.stream(s)``, the
capture stream inside ``torch.cuda.graph``), which CuPy knows nothing of. So for a call on a
CUDA torch tensor the communicator makes torch's current stream CuPy's current one for the
length of the call (``with torch_stream(t): ...``): every launch, copy, event and NCCL call of
the call then lands on the stream the caller's neighbouring torch work uses, so the call reads
its input after the work queued before it and later work sees its result, as with CuPy.

The CuPy views of torch's streams are cached by (device, stream pointer): torch's streams come
from pools that live as long as the process, so a pointer always names the same stream.
"""

from __future__ import annotations

import sys
from typing import Any

_VIEWS: dict[tuple[int, int], Any] = {}
MAX_VIEWS = 256  # streams a program uses are few; bounded all the same


def torch_stream(obj: Any) -> Any | None:
    """CuPy's view of torch's current stream on ``obj``'s device when ``obj`` is a CUDA torch
    tensor, else None (the call then runs on CuPy's current stream)."""
    if not type(obj).__module__.startswith("torch") or not getattr(obj, "is_cuda", False):
        return None
    torch = sys.modules["torch"]
    device = obj.get_device()  # an int: cheaper than obj.device.index (a torch.device made per call)
    # The raw cudaStream_t of torch's current stream: what Triton reads per launch, without the
    # Stream object current_stream() builds (a few microseconds on the eager hot path).
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    ptr = raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream
    view = _VIEWS.get((device, ptr))
    if view is None:
        import cupy

        if len(_VIEWS) >= MAX_VIEWS:
            _VIEWS.clear()
        view = _VIEWS[(device, ptr)] = cupy.cuda.ExternalStream(ptr, device)
    return view
