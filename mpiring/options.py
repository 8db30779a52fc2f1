"""The communicator's options: arguments and ``MPIRING_*`` variables, checked once at set-up.

Pure apart from reading the environment; errors name the argument or the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import algorithms
from .errors import InvalidArgumentError
from .timeouts import TimeoutPolicy

DEFAULT_HOST_SLOT_BYTES = 1 << 20  # two slots of 1 MiB of node shared memory per rank


def env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def check_batches(batches: Any) -> int | None:
    if batches is None:
        return None
    if isinstance(batches, bool) or not isinstance(batches, (int, np.integer)) or batches < 1:
        raise InvalidArgumentError(f"batches must be a positive integer or None, got {batches!r}")
    return int(batches)


@dataclass(frozen=True)
class Options:
    algorithm: str  # a row's name or "auto"
    batches: int | None
    check: bool
    timeouts: TimeoutPolicy
    forced: str | None  # MPIRING_ALGO: what "auto" runs instead of the table's choice

    @classmethod
    def resolve(cls, algorithm: Any, batches: Any, check: bool | None, timeout: float | None) -> Options:
        name = algorithms.check_name(algorithm, source="algorithm=")
        forced = os.environ.get("MPIRING_ALGO", "").strip() or None
        if forced is not None:
            forced = algorithms.check_name(forced, source="the environment variable MPIRING_ALGO")
            forced = None if forced == algorithms.AUTO else forced
        checked = env_flag("MPIRING_CHECK", True) if check is None else bool(check)
        return cls(name, check_batches(batches), checked, TimeoutPolicy.resolve(timeout), forced)


def empty_like(x: Any) -> Any:
    """A fresh output array of the same shape, dtype and kind of memory as ``x``."""
    if isinstance(x, np.ndarray):
        return np.empty_like(x)
    if hasattr(x, "new_empty"):  # torch
        return x.new_empty(x.shape)
    if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__"):
        import cupy

        view = cupy.asarray(x) if hasattr(x, "__cuda_array_interface__") else cupy.from_dlpack(x)
        return cupy.empty_like(view)
    raise InvalidArgumentError(f"cannot allreduce an object of type {type(x).__name__}")
