"""The communicator's options: arguments and ``MPIRING_*`` variables, checked once at set-up.

Pure apart from reading the environment (through :mod:`mpiring.core.settings`, the one table of the
variables); errors name the argument or the variable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import algorithms
from ..core import settings
from ..core.errors import InvalidArgumentError
from ..cuda.layout import DIRECT_BLOCKS
from ..node.timeouts import TimeoutPolicy

DEFAULT_HOST_SLOT_BYTES = 1 << 20  # two slots of 1 MiB of node shared memory per rank

GPU_CHECK, HOST_CHECK = "gpu", "host"
_CHECKS = {**dict.fromkeys(("gpu", "1", "true", "yes", "on", ""), GPU_CHECK), "host": HOST_CHECK,
           **dict.fromkeys(("0", "false", "no", "off"), "off")}


def check_mode(check: Any, source: str = "check=") -> str:
    """The agreement check asked for: ``"gpu"`` (the default: calls of rows whose kernels check
    on the GPU are checked there, the others on the host), ``"host"`` (every call on the host,
    before anything is enqueued: a debugging aid) or ``"off"``. Takes True/False too."""
    if isinstance(check, bool):
        return GPU_CHECK if check else "off"
    if isinstance(check, str) and check.strip().lower() in _CHECKS:
        return _CHECKS[check.strip().lower()]
    raise InvalidArgumentError(f"{source} {check!r}: use 'gpu' (the default), 'host', True or False "
                               "('1'/'0' in the environment)")


# The largest slot_bytes: two slots per rank are allocated at set-up (node shared memory for host
# arrays, GPU memory for the ring), so 8 GiB per rank at this bound. Larger slots gain nothing
# (the ring's default is 128 MiB: a transfer's fixed cost is already small against its time from
# 64 MiB up), and shared memory is mapped lazily: a window far beyond the machine's memory is
# "allocated" and then kills the process when touched (MPICH refuses only from about 2**46 B).
MAX_SLOT_BYTES = 4 << 30


def check_slot_bytes(slot_bytes: Any) -> int | None:
    """None (the default), or a positive integer number of bytes, at most ``MAX_SLOT_BYTES``."""
    if slot_bytes is None:
        return None
    if isinstance(slot_bytes, bool) or not isinstance(slot_bytes, (int, np.integer)) or slot_bytes < 1:
        raise InvalidArgumentError(
            f"slot_bytes must be a positive integer number of bytes or None, got {slot_bytes!r}")
    if slot_bytes > MAX_SLOT_BYTES:
        raise InvalidArgumentError(
            f"slot_bytes={int(slot_bytes)} is above the bound of {MAX_SLOT_BYTES} (4 GiB): each rank "
            "allocates two slots (host shared memory, GPU memory), and larger slots gain nothing; "
            "None takes the default (128 MiB on GPUs, 1 MiB on the host)")
    return int(slot_bytes)


def check_comm(comm: Any) -> None:
    """Refuse what is not an MPI intracommunicator, on every rank, before any collective."""
    from mpi4py import MPI

    if not isinstance(comm, MPI.Comm):
        raise InvalidArgumentError(f"comm must be an mpi4py intracommunicator, got {type(comm).__name__}")
    if comm == MPI.COMM_NULL:
        raise InvalidArgumentError("comm is MPI.COMM_NULL: pass the communicator of the ranks that take "
                                   "part (e.g. MPI.COMM_WORLD); ranks outside it must not create one")
    if comm.Is_inter():
        raise InvalidArgumentError("comm is an intercommunicator: mpiring reduces over the ranks of one "
                                   "group; pass an intracommunicator (e.g. intercomm.Merge())")


def check_sm_budget(sm_budget: Any, source: str = "sm_budget=") -> int | None:
    """None (no budget: each kernel launches the grid it wants), or a positive number of SMs.
    Environment values are strings: ``""`` is None, anything else must be a positive integer."""
    if isinstance(sm_budget, str):
        text = sm_budget.strip()
        if not text:
            return None
        try:
            sm_budget = int(text)
        except ValueError:
            raise InvalidArgumentError(f"{source} {sm_budget!r}: use a positive number of SMs "
                                       "(e.g. 16), or leave it unset for no budget") from None
    if sm_budget is None:
        return None
    if isinstance(sm_budget, bool) or not isinstance(sm_budget, (int, np.integer)) or sm_budget < 1:
        raise InvalidArgumentError(f"{source} {sm_budget!r}: use a positive number of SMs (e.g. 16), "
                                   "or None for no budget")
    return int(sm_budget)


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
    slot_bytes: int | None = None  # as asked (None: each backend's default)
    check_mode: str = GPU_CHECK  # where calls of rows that check on the GPU are checked
    sm_budget: int | None = None  # SMs mpiring's own kernels may hold at once (None: no budget)
    overlap: bool = False  # auto picks by makespan beside compute (the table's overlap entries)
    reproducible: bool = False  # reductions in rank order only (mpiring.core.reproducible)
    replay: bool = True  # a call of a known shape replays its bound launch (mpiring.call.replay)

    @classmethod
    def resolve(cls, algorithm: Any, batches: Any, check: bool | str | None, timeout: float | None,
                slot_bytes: Any = None, sm_budget: Any = None, overlap: Any = False,
                reproducible: Any = None, replay: Any = True) -> Options:
        settings.warn_unknown(stacklevel=4)  # a misspelt name would be ignored in silence (names
        # the caller of Communicator(): warn_unknown, resolve, __init__, the caller)
        settings.check_all()  # every variable, now: a bad one reaches every rank as this rank's error
        name = algorithms.check_name(algorithm, source="algorithm=")
        forced = settings.text("MPIRING_ALGO")
        if forced is not None:
            try:
                forced = algorithms.check_name(forced)
            except InvalidArgumentError:
                raise settings.invalid("MPIRING_ALGO", forced,
                                       f"not one of {', '.join(algorithms.names())}") from None
            forced = None if forced == algorithms.AUTO else forced
        mode = (settings.text("MPIRING_CHECK") or GPU_CHECK) if check is None else check_mode(check)
        budget = (settings.integer("MPIRING_SM_BUDGET") if sm_budget is None
                  else check_sm_budget(sm_budget))
        if not isinstance(overlap, (bool, np.bool_)):
            raise InvalidArgumentError(f"overlap={overlap!r}: use True (auto picks what hides best "
                                       "beside compute) or False (what is fastest alone)")
        if reproducible is None:
            reproducible = bool(settings.flag("MPIRING_REPRODUCIBLE"))
        elif not isinstance(reproducible, (bool, np.bool_)):
            raise InvalidArgumentError(f"reproducible={reproducible!r}: use True (every result reduced in "
                                       "rank order: the same bits at every size, from every row that "
                                       "runs) or False (the fastest row)")
        if not isinstance(replay, (bool, np.bool_)):
            raise InvalidArgumentError(f"replay={replay!r}: use True (the default: a call of a shape "
                                       "seen before replays its launch) or False (every call takes "
                                       "the full path: a measurement aid)")
        return cls(name, check_batches(batches), mode != "off", TimeoutPolicy.resolve(timeout), forced,
                   check_slot_bytes(slot_bytes), GPU_CHECK if mode == "off" else mode, budget,
                   bool(overlap), bool(reproducible), bool(replay))

    @classmethod
    def fallback(cls) -> Options:
        """Defaults for a rank that rejected its own arguments: enough to take part in set-up
        (bounded) and tell its peers, which then raise at once instead of waiting for it."""
        try:
            timeouts = TimeoutPolicy.resolve(None)
        except InvalidArgumentError:
            timeouts = TimeoutPolicy()
        return cls(algorithms.AUTO, None, True, timeouts, None)

    def setup_values(self, inter: str) -> dict[str, object]:
        """The set-up parameters every rank must share (see :mod:`mpiring.core.consensus`): what shapes
        the shared memory and the schedule, and what decides whether every rank calls the same
        collectives."""
        return {
            "slot_bytes": self.slot_bytes,
            "batches": self.batches,
            "check": f"{self.check} ({self.check_mode})",
            "algorithm table": ",".join(row.name for row in algorithms.rows()),
            "MPIRING_ALGO": self.forced,
            "MPIRING_TUNING_FILE": settings.text("MPIRING_TUNING_FILE"),
            "MPIRING_DIRECT_BLOCKS": DIRECT_BLOCKS,  # as read at import
            "MPIRING_CE_AREA_MIB": settings.get("MPIRING_CE_AREA_MIB"),  # ce-twoshot's staging layout
            "sm_budget": self.sm_budget,  # the direct kernels' grid (their flags line up across ranks)
            "overlap": self.overlap,  # auto's choice: every rank must run the same row
            "reproducible": self.reproducible,  # ... and which rows may run at all
            "inter": inter,
            "timeout": "finite, positive",  # (a rank with another one rejected its arguments)
        }


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
