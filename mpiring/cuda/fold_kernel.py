"""The ring's reduction ("fold") kernel, ``out = in (op) slot`` elementwise, a copy kernel, and
the division of a sum by the rank count (op ``avg`` on rows that sum first).

The CUDA source is ``csrc/fold.cu`` (element types and ops: ``csrc/types.cuh``). Results agree
bit for bit with numpy's (and ml_dtypes' for bfloat16): half precision is widened to float and
rounded once to nearest-even. Loads and stores are 16 bytes wide when all three pointers allow
it, which :meth:`FoldKernel.launch` decides per call.

Both kernels write user output, so both first read the communicator's abort word: once a rank
aborted the communicator, released waits let queued work run on, and it must not write stale
data into the caller's output (block 0 reports the abort into the status block instead).
"""

from __future__ import annotations

import functools

import numpy as np

from ..core.ops import Op
from . import sources
from .grids import copy_blocks, copy_unit, fold_block_cap, fold_blocks
from .launcher import PackedLaunch, function_handle

THREADS = 256
_SOURCE = "fold.cu"


@functools.cache
def _module():
    import cupy

    return cupy.RawModule(code=sources.source(_SOURCE), options=sources.OPTIONS,
                          name_expressions=sources.name_expressions(_SOURCE))

def _handle(name: str) -> int:
    """The ``CUfunction`` of kernel ``name`` of the fold module."""
    return function_handle(_module().get_function(name))


class FoldKernel:
    """A launcher of the fold and copy kernels for one device, sized once for that device.

    ``abort`` and ``status`` are device addresses of the communicator's abort word and of its
    host status block (see :mod:`mpiring.cuda.status`); ``max_blocks``: the most blocks of one
    launch, taken as given (the context passes :attr:`GridLimits.fold_cap
    <mpiring.cuda.grids.GridLimits>`); None: :func:`~mpiring.cuda.grids.fold_block_cap`
    without a budget. The grid rules are :mod:`mpiring.cuda.grids`'.
    """

    def __init__(self, device_id: int, abort: int, status: int, max_blocks: int | None = None) -> None:
        import cupy

        sms = cupy.cuda.Device(device_id).attributes["MultiProcessorCount"]
        # As given: capping a cap again would turn the 4-per-SM default into one per SM.
        self.max_blocks = max_blocks if max_blocks else fold_block_cap(sms, None)
        self._guard = (abort, status)  # the kernels' last two parameters: abort word, status block
        self._functions: dict[tuple[np.dtype, Op], int] = {}
        self._copies: dict[int, int] = {}
        self._averages: dict[np.dtype, int] = {}
        # The parameters as csrc/fold.cu declares them (mpiring.cuda.launcher).
        self._fold = PackedLaunch(("ptr", "ptr", "ptr", "i64", "i32", "ptr", "ptr"), THREADS)
        self._copy = PackedLaunch(("ptr", "ptr", "i64", "ptr", "ptr"), THREADS)
        self._average = PackedLaunch(("ptr", "i64", "i32", "ptr", "ptr"), THREADS)

    def function(self, dtype: np.dtype, op: Op) -> int:
        """The compiled kernel for ``dtype`` and ``op`` (compiled on first use, then cached)."""
        key = (dtype, op)  # the dtype itself: its .name is built afresh at every access
        fn = self._functions.get(key)
        if fn is None:
            fn = _handle(sources.kernel_name("fold", np.dtype(dtype).name, op))
            self._functions[key] = fn
        return fn

    def launch(self, fn: int, out: int, inp: int, slot: int, count: int, itemsize: int, stream) -> None:
        """Enqueue ``out[:count] = inp[:count] (op) slot[:count]`` on ``stream`` (raw pointers)."""
        if count == 0:
            return
        vectorized = (out | inp | slot) % 16 == 0
        blocks = fold_blocks(count, itemsize, vectorized, self.max_blocks, THREADS)
        self._fold(fn, blocks, stream.ptr, out, inp, slot, count, int(vectorized), *self._guard)

    def average(self, out: int, count: int, dtype: np.dtype, ranks: int, stream) -> None:
        """Enqueue ``out[:count] /= ranks`` (op avg; floating types), skipped once aborted."""
        if count == 0:
            return
        fn = self._averages.get(dtype)  # keyed by the dtype itself, as function()
        if fn is None:
            fn = self._averages[dtype] = _handle(sources.average_name(np.dtype(dtype).name))
        blocks = min(self.max_blocks, -(-count // THREADS))
        self._average(fn, blocks, stream.ptr, out, count, ranks, *self._guard)

    def copy(self, out: int, src: int, nbytes: int, stream) -> None:
        """Enqueue ``out[:nbytes] = src[:nbytes]`` on ``stream``, skipped once aborted."""
        if nbytes == 0:
            return
        unit = copy_unit(out, src, nbytes)
        fn = self._copies.get(unit)
        if fn is None:
            fn = self._copies[unit] = _handle(sources.copy_name(unit))
        blocks = copy_blocks(nbytes, unit, self.max_blocks, THREADS)
        self._copy(fn, blocks, stream.ptr, out, src, nbytes // unit, *self._guard)
