"""The face every backend shows the communicator and the algorithms."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import numpy as np
from mpi4py import MPI

from ..buffers import Buffer, Memory
from ..errors import InvalidArgumentError, MpiringError

if TYPE_CHECKING:
    from ..algorithms.base import Call


class Backend(ABC):
    """One kind of memory's machinery for one communicator.

    ``comm`` is the communicator's own MPI duplicate (every rank), ``node`` its ranks on this
    node. Methods an algorithm needs but this backend lacks raise :class:`InvalidArgumentError`
    (the algorithm table's ``memory`` column keeps that from happening).
    """

    memory: Memory
    comm: MPI.Intracomm
    rank: int
    size: int

    # -- every backend -------------------------------------------------------------------

    def check_buffer(self, buf: Buffer, role: str) -> None:  # noqa: B027 - host memory: nothing to check
        """Raise unless this backend can reduce ``buf`` (e.g. device memory of its GPU)."""

    def capturing(self) -> bool:
        """Whether the caller's work is being captured into a CUDA graph now."""
        return False

    def failure(self) -> MpiringError | None:
        """A failure met by asynchronous work since the last look (GPU), or None."""
        return None

    def synchronize(self) -> None:  # noqa: B027 - host calls complete before they return
        """Wait until this rank's calls have finished; raise what they met."""

    @abstractmethod
    def close(self, abandon: bool = False) -> MpiringError | None:
        """Release what set-up made; return a failure that drained work met, if any."""

    # -- what algorithms call (see mpiring/algorithms) -----------------------------------

    @abstractmethod
    def run_ring(self, call: Call, events: bool = False) -> None:
        """The double-buffered ring (``events``: the interprocess-event signalled variant)."""

    @abstractmethod
    def ring_batches(self, count: int, dtype: np.dtype, asked: int | None) -> int:
        """Mini-batches of a ring call: as asked (or the default), raised to fit the slots."""

    def _missing(self, what: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{what} is not available for {self.memory.name.lower()} memory")

    @property
    def oneshot_limit(self) -> int | None:
        raise self._missing("the one-shot kernel")

    def run_direct(self, kind: str, call: Call) -> None:
        raise self._missing(f"the {kind} kernel")

    def run_nccl(self, call: Call) -> None:
        raise self._missing("NCCL")

    def run_nccl_ring(self, call: Call) -> None:
        raise self._missing("NCCL")

    def nccl_ring_batches(self, count: int, dtype: np.dtype, asked: int | None) -> int:
        raise self._missing("NCCL")
