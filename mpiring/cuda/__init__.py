"""The GPU side: device binding, fold kernels, and the per-communicator GPU context.

Importing this package never imports CuPy; :func:`available` says whether the GPU path can run.
"""

from __future__ import annotations

import functools

from .resources import live_resources

__all__ = ["GpuContext", "available", "live_resources"]


@functools.cache
def available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError (no driver), ...
        return False


def GpuContext(*args, **kwargs):  # noqa: N802 - a factory that defers the CuPy import
    """Create the GPU context of a communicator (see :class:`mpiring.cuda.context.GpuContext`)."""
    from .context import GpuContext as _GpuContext

    return _GpuContext(*args, **kwargs)
