"""A host array dressed as a CuPy one, for the eager replay's tests on machines without GPUs."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np


class Keyed:
    """A host array with what mpiring.call.replay's key reads off a CuPy array (``data.ptr``,
    ``shape``, ``strides``, ``dtype``), described to mpiring through DLPack."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a
        self.data = SimpleNamespace(ptr=a.ctypes.data)
        self.shape, self.strides, self.dtype = a.shape, a.strides, a.dtype

    def __dlpack__(self, *args, **kwargs):
        return self.a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()
