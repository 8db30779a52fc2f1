"""The GPU toolkit below the transports and backends: device binding, the IPC staging and its
layout, stream memory operations, kernels (sources in ``csrc/``), the status block and the
watchdog. Nothing here imports ``transports``, ``backends``, ``pipeline`` or ``algorithms``.

Importing this package never imports CuPy; :func:`available` says whether the GPU path can run.
"""

from __future__ import annotations

import functools

from .resources import live_resources

__all__ = ["available", "live_resources"]


@functools.cache
def available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, CUDARuntimeError (no driver), ...
        return False
