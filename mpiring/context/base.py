"""The face every backend shows the communicator and the algorithms, and the one rule that maps
each collective onto a ring plan (:func:`ring_shape`, pure)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from mpi4py import MPI

from ..core.buffers import Buffer, Memory
from ..core.errors import MpiringError
from ..ring.schedule import Phase

if TYPE_CHECKING:
    from ..core.collective import Call, Collective
    from ..cuda.grids import GridLimits
    from ..node.groups import Groups

State = TypeVar("State")


@dataclass(frozen=True)
class RingShape:
    """How one call of a collective runs as a ring plan over the ``size`` ranks of a node.

    ``count`` elements are the full vector the plan covers; ``in_place``: the ring reads its
    input from ``recv``; ``gather_first``: copy ``send`` into ``recv``'s block ``rank`` before
    the ring (all-gather out of place); ``front``: copy block ``rank`` of ``recv`` to its start
    after the ring (reduce-scatter in place, where MPI puts the result)."""

    phase: Phase
    count: int
    compact: bool
    in_place: bool
    gather_first: bool
    front: bool
    block: int  # elements per rank's block (reduce-scatter, all-gather); the count for allreduce


def ring_shape(collective: Collective, call: Call, rank: int, size: int) -> RingShape:
    """The ring plan's shape for ``call`` (already checked: ``send``/``recv`` sizes fit)."""
    from ..core.collective import Collective

    recv, send = call.recv, call.send
    if collective is Collective.ALLREDUCE:
        return RingShape(Phase.ALLREDUCE, recv.count, False, send is None, False, False, recv.count)
    if collective is Collective.REDUCE_SCATTER:
        if send is None:  # recv holds size blocks; the result goes to its start
            m = recv.count // size
            return RingShape(Phase.REDUCE_SCATTER, recv.count, False, True, False, rank > 0 and m > 0, m)
        return RingShape(Phase.REDUCE_SCATTER, send.count, True, False, False, False, recv.count)
    m = recv.count // size  # all-gather: always in place on recv, after putting send there
    return RingShape(Phase.ALLGATHER, recv.count, False, True, send is not None, False, m)


class Backend(ABC):
    """One kind of memory's machinery for one communicator.

    ``groups`` holds the communicator's MPI groups: ``comm`` (every rank), ``node`` (this
    node's ranks, which the ring and the one-launch kernels run over) and ``rail`` (this
    rank's place on every node, which the inter-node engine joins). An algorithm's body lives in
    its module (``mpiring/algorithms``) and uses what a context offers; the one engine several
    rows share, the node's ring (``ring``, ``ring-events``, ``hier``), is run here per memory.
    """

    memory: Memory
    grids: GridLimits | None = None  # what bounds its kernels' grids; None: it launches none
    groups: Groups
    comm: MPI.Intracomm
    rank: int
    size: int

    @property
    def node_rank(self) -> int:
        return self.groups.node.rank

    @property
    def node_size(self) -> int:
        return self.groups.node.size

    # -- every backend -------------------------------------------------------------------

    def check_buffer(self, buf: Buffer, role: str) -> None:  # noqa: B027 - host memory: nothing to check
        """Raise unless this backend can reduce ``buf`` (e.g. device memory of its GPU)."""

    def capturing(self) -> bool:
        """Whether the caller's work is being captured into a CUDA graph now."""
        return False

    def state(self, owner: str, make: Callable[[], State]) -> State:
        """The per-communicator state of algorithm ``owner`` (its staging, say): made by
        ``make`` at the first call that asks, then kept until the communicator closes (its
        ``close(abandon)``, if it has one, is called then: :meth:`close_states`). An
        algorithm's module owns what it keeps here; the backend only holds it."""
        states: dict[str, Any] = self.__dict__.setdefault("_states", {})
        if owner not in states:
            states[owner] = make()
        return states[owner]

    def close_states(self, abandon: bool = False) -> None:
        """Close every algorithm's state that has a ``close(abandon)`` (in reverse order of
        making), then forget them all: at the context's close, once its work drained.
        ``abandon``: the communicator failed, peers may be gone (nothing may wait for them)."""
        states: dict[str, Any] = self.__dict__.pop("_states", {})
        for state in reversed(list(states.values())):
            close = getattr(state, "close", None)
            if close is not None:
                close(abandon)

    def failure(self) -> MpiringError | None:
        """A failure met by asynchronous work since the last look (GPU), or None."""
        return None

    def nccl_unavailable(self) -> str | None:
        """Why NCCL cannot run on this backend's communicator (its rows ask), or None."""
        return None

    def synchronize(self) -> None:  # noqa: B027 - host calls complete before they return
        """Wait until this rank's calls have finished; raise what they met."""

    @abstractmethod
    def average(self, buf: Buffer, ranks: int) -> None:
        """``buf /= ranks`` elementwise, after this rank's call (op ``avg`` on rows that sum)."""

    @abstractmethod
    def close(self, abandon: bool = False) -> MpiringError | None:
        """Release what set-up made; return a failure that drained work met, if any."""

    # -- the node's ring, which several rows run (ring, ring-events, hier) ------------------

    @abstractmethod
    def run_ring(self, call: Call, collective: Collective, events: bool = False) -> None:
        """The double-buffered ring over this node's ranks, running ``collective`` (``events``:
        the interprocess-event signalled variant)."""

    @abstractmethod
    def ring_batches(self, count: int, dtype: np.dtype, asked: int | None) -> int:
        """Mini-batches of a ring call: as asked (or the default), raised to fit the slots."""
