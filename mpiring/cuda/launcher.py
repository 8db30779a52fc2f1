"""Kernel launches with pre-packed arguments: one driver call per launch, no argument boxing.

CuPy's ``RawKernel.__call__`` boxes every argument afresh: on the H200 host, 11.1 µs per
launch of a 5-argument kernel against 4.9 µs for ``cuLaunchKernel`` itself (back-to-back
launches, host time per launch). A :class:`PackedLaunch` keeps one host
buffer of argument values (one 8-byte slot per argument) and the array of pointers to those
slots that ``cuLaunchKernel`` takes as ``kernelParams``; a launch writes the values with one
``struct.pack_into`` and calls the driver through CuPy's thin binding.

Reusing the buffer is safe: the driver copies the parameter values when ``cuLaunchKernel``
returns (also while a CUDA graph is being captured), so the next launch may overwrite them.
One :class:`PackedLaunch` serves one caller at a time (a communicator's calls are serialized).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

# How each kind of kernel parameter is written into its 8-byte slot (little-endian, as every
# CUDA host is): a pointer or a 64-bit integer fills it, a 32-bit integer its first half.
_CODES = {"ptr": "Q", "i64": "q", "i32": "i4x"}


class _Params:
    """One host buffer of kernel argument values (one 8-byte slot per parameter) and the array of
    pointers to those slots that ``cuLaunchKernel`` takes as ``kernelParams``."""

    def __init__(self, params: tuple[str, ...]) -> None:
        self.format = struct.Struct("<" + "".join(_CODES[p] for p in params))
        self._values = np.zeros(len(params), dtype=np.uint64)
        self.view = memoryview(self._values.data).cast("B")
        base = self._values.ctypes.data
        self._pointers = np.array([base + 8 * i for i in range(len(params))], dtype=np.uint64)
        self.address = int(self._pointers.ctypes.data)  # kernelParams: void*[len(params)]


def _default_driver_launch() -> Callable[..., None]:
    from cupy.cuda import driver

    return driver.launchKernel


def driver_error(status: int) -> BaseException:
    """What CuPy's ``launchKernel`` raises for a failed ``cuLaunchKernel`` (its ``CUresult``):
    what a compiled launch raises too (:mod:`mpiring.call.hot_replay`, :mod:`.streamprog`)."""
    from cupy.cuda import driver

    return driver.CUDADriverError(status)


class PackedLaunch:
    """Launches of kernels whose parameters have the kinds ``params`` (``"ptr"``, ``"i64"``,
    ``"i32"``), with ``threads`` threads per block."""

    def __init__(self, params: tuple[str, ...], threads: int,
                 driver_launch: Callable[..., None] | None = None) -> None:
        """``driver_launch``: CuPy's ``cuLaunchKernel`` binding unless given (tests pass their own)."""
        self._driver_launch = driver_launch if driver_launch is not None else _default_driver_launch()
        self._kinds = params
        self._buffer = _Params(params)
        self._format, self._view, self._params = self._buffer.format, self._buffer.view, self._buffer.address
        self.threads = threads

    def __call__(self, function: int, blocks: int, stream: int, *args: int,
                 threads: int | None = None) -> None:
        """Enqueue ``function`` (a ``CUfunction`` handle) with ``args`` on ``stream`` (a handle),
        in blocks of ``threads`` threads (default :attr:`threads`: never more, the kernels'
        ``__launch_bounds__``)."""
        self._format.pack_into(self._view, 0, *args)
        self._driver_launch(function, blocks, 1, 1, self._threads(threads), 1, 1, 0, stream, self._params, 0)

    def bind(self, function: int, blocks: int, *args: int, threads: int | None = None) -> BoundLaunch:
        """The launch of ``function`` with ``args`` fixed once: a :class:`BoundLaunch` (its own
        argument buffer, so any number of them coexist with this one)."""
        return BoundLaunch(self._kinds, self._threads(threads), function, blocks, args, self._driver_launch)

    def _threads(self, threads: int | None) -> int:
        if threads is None:
            return self.threads
        if not 1 <= threads <= self.threads:
            raise ValueError(f"a block of {threads} threads: these kernels take 1 to {self.threads}")
        return threads


class BoundLaunch:
    """One kernel launch with every argument fixed: calling it with a stream enqueues the
    kernel there with one driver call, nothing packed (the eager fast path, ``mpiring.call.replay``).

    Memory: one buffer of 8 bytes per parameter and its pointer array (112 bytes for the
    direct kernels' seven)."""

    def __init__(self, params: tuple[str, ...], threads: int, function: int, blocks: int,
                 args: tuple[int, ...], driver_launch: Callable[..., None] | None = None) -> None:
        self._driver_launch = driver_launch if driver_launch is not None else _default_driver_launch()
        self._buffer = _Params(params)
        self._buffer.format.pack_into(self._buffer.view, 0, *args)
        # kernelParams: the address of the array of pointers to the packed values (valid as long
        # as this object lives; the compiled replay, mpiring.call.hot_replay, passes it on).
        self.params = self._buffer.address
        self.function, self.blocks, self.threads, self.args = function, blocks, threads, args

    def __call__(self, stream: int) -> None:
        """Enqueue the kernel on ``stream`` (a handle)."""
        self._driver_launch(self.function, self.blocks, 1, 1, self.threads, 1, 1, 0, stream, self.params, 0)


class StreamLaunch:
    """A :class:`BoundLaunch` enqueued on the caller's stream as ``ordered_stream()`` hands it
    out (a GPU backend's: made to wait for the previous call if that ran on another stream):
    what a one-launch row's ``bind`` returns. The compiled replay (mpiring.call.hot_replay)
    recognizes it and launches :attr:`launch` itself; calling it is the Python path."""

    __slots__ = ("launch", "ordered_stream")

    def __init__(self, launch: BoundLaunch, ordered_stream: Callable[[], Any]) -> None:
        self.launch, self.ordered_stream = launch, ordered_stream

    def __call__(self) -> None:
        self.launch(self.ordered_stream().ptr)


_FUNCTIONS: dict[int, object] = {}  # handle -> CuPy Function: keeps its module loaded


def function_handle(raw_kernel) -> int:
    """The ``CUfunction`` handle of a CuPy ``RawKernel`` (compiling it if it was not yet).

    The handle is valid while its module is loaded; CuPy memoizes compiled modules for the
    process, and the Function kept here (one per distinct kernel: bounded) holds it too."""
    function = raw_kernel.kernel
    handle = int(function.ptr)
    _FUNCTIONS.setdefault(handle, function)
    return handle
