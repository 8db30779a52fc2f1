"""What a rival's runtime object is (:class:`Rival`), the run facts it is set up with
(:class:`RivalContext`), and small helpers on GPU buffers of either kind (CuPy arrays, or the
torch tensors of bfloat16 runs).

A rival's life in a run: ``available()`` on every rank (cheap: is the package there?), then
``setup(world, ctx)`` once (collective: process groups, communicators, symmetric buffers sized
for the largest point, so that nothing is allocated per point nor in a timed loop), then per
point ``prepare(bufs, in_place)``, which returns the call the bench checks and times (it runs on
CuPy's current stream, like mpiring's rows), and at the end ``close()`` (collective).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class RivalContext:
    """The run's facts a rival is set up with."""

    max_count: int  # elements of the largest point it will be asked for
    dtype: np.dtype  # the run's element type (numpy; bfloat16 from ml_dtypes)
    op: str  # sum, prod, max, min
    rank: int
    size: int
    nodes: int  # nodes the communicator spans
    timeout: float  # seconds to wait for a peer rank during set-up

    @property
    def max_bytes(self) -> int:
        return self.max_count * self.dtype.itemsize


class Rival:
    """The runtime of one rival row on one rank (see the module docstring for its life)."""

    name = ""

    def available(self) -> str | None:
        """Local and cheap: why this rank cannot run the rival (its package is missing, ...),
        with what to do about it; None when it can."""
        return None

    def setup(self, world: Any, ctx: RivalContext) -> None:
        """Collective over ``world``: everything the calls need. Must fail alike on every rank
        (``mpiring.bench.measure.agree`` around each stage that can fail)."""

    def describe(self) -> str:
        """After set-up: versions and choices, for the banner ("" for none)."""
        return ""

    def prepare(self, bufs: Any, in_place: bool) -> Callable[[], None]:
        """The call of one point on ``bufs`` (:class:`~mpiring.bench.collectives.SizeBuffers`):
        ``recv`` gets the allreduce of every rank's ``send`` (in place: of ``recv``). It runs on
        CuPy's current stream and allocates nothing. Raise ``InvalidArgumentError`` for a
        point the rival does not take (the row shows n/a)."""
        raise NotImplementedError

    def capture(self, stream: Any, call: Callable[[], None], k: int) -> Any:
        """A CUDA graph of ``k`` calls on ``stream`` (CuPy's capture stream; the caller has made
        it current), with a ``launch(stream)`` method; None: the bench's CuPy capture serves
        (the default)."""
        return None

    def close(self) -> None:
        """Collective: release what :meth:`setup` made."""


def device_pointer(arr: Any) -> int:
    """The device address of a CuPy array or a torch tensor."""
    data = getattr(arr, "data_ptr", None)
    if callable(data):  # torch
        return int(data())
    return int(arr.data.ptr)


def element_count(arr: Any) -> int:
    numel = getattr(arr, "numel", None)
    return int(numel()) if callable(numel) else int(arr.size)


def current_stream_reader() -> Callable[[], int]:
    """A reader of CuPy's current stream (the one the bench's timer records on, or its capture
    stream under ``--graph``) as a ``cudaStream_t``, read at every call, with the lookup bound
    once: what a rival's timed call asks per call."""
    import cupy

    current = cupy.cuda.get_current_stream
    return lambda: int(current().ptr)


def missing(module: str, hint: str, package: str = "") -> str | None:
    """Why ``module`` cannot be imported here (``package``, default its top name, is not
    installed, or is broken), with ``hint``; None when it imports."""
    import importlib
    import importlib.util

    top = module.split(".")[0]
    try:
        if importlib.util.find_spec(top) is None:
            return f"{package or top} is not installed ({hint})"
        importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - absent or broken: say which and why
        return f"cannot import {module}: {type(err).__name__}: {err} ({hint})"
    return None
