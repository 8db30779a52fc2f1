"""The communicator's control board: what every rank of a node can see of every other, in
node shared memory, without a message — failure marks and agreement-check call counts.

It is one :class:`~mpiring.signals.SharedBoard` (a row of counters per rank plus payload),
owned by the communicator and closed last. The host ring's slots live in its payload and its
FULL/FREE counters in its rows (the host backend borrows it; see ``transports/host.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from mpi4py import MPI

from .signals import CALLS, FAILED, SharedBoard
from .timeouts import TimeoutPolicy


class ControlBoard:
    """Failure marks and call counts of the ranks of one node (plus the host ring's memory)."""

    def __init__(self, node: MPI.Intracomm, payload_bytes: int, timeouts: TimeoutPolicy,
                 ranks: Sequence[int] | None = None) -> None:
        self.shared = SharedBoard(node, payload_bytes=payload_bytes, timeout=timeouts.seconds)
        self.rank, self.size = node.rank, node.size
        # The communicator rank of each row (the node's ranks; on one node, the same numbers).
        self.ranks = list(ranks) if ranks is not None else list(range(node.size))

    def mark_failed(self) -> None:
        """Tell the peers this rank gave up on the communicator: their next call stops at once."""
        self.shared.post(self.rank, FAILED, 1)

    def failed_peers(self) -> list[int]:
        """The other ranks of this node that marked the communicator failed (communicator ranks)."""
        rows = self.shared.counters
        return [self.ranks[r] for r, row in enumerate(rows) if row[FAILED] and r != self.rank]

    def calls(self, rank: int) -> int:
        """How many agreement checks ``rank`` has entered."""
        return self.shared.read(rank, CALLS)

    def close(self, abandon: bool = False) -> None:
        """Collective and bounded (see :meth:`SharedBoard.close`); ``abandon`` after a failure."""
        self.shared.close(abandon)
