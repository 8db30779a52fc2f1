"""The communicator's control board: what every rank of a node can see of every other, in
node shared memory, without a message — failure marks and agreement-check call counts.

It is one :class:`~mpiring.signals.SharedBoard` (a row of counters per rank plus payload),
owned by the communicator and closed last. The host ring's slots live in its payload and its
FULL/FREE counters in its rows (the host backend borrows it; see ``transports/host.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from mpi4py import MPI

from .errors import PeerFailedError
from .signals import CALLS, FAILED, SharedBoard
from .timeouts import TimeoutPolicy

MESSAGE_BYTES = 512  # the end of each rank's payload: the text of its failure, for its peers


class ControlBoard:
    """Failure marks and call counts of the ranks of one node (plus the host ring's memory)."""

    def __init__(self, node: MPI.Intracomm, payload_bytes: int, timeouts: TimeoutPolicy,
                 ranks: Sequence[int] | None = None) -> None:
        self.shared = SharedBoard(node, payload_bytes=payload_bytes + MESSAGE_BYTES,
                                  timeout=timeouts.seconds)
        self.rank, self.size = node.rank, node.size
        # The communicator rank of each row (the node's ranks; on one node, the same numbers).
        self.ranks = list(ranks) if ranks is not None else list(range(node.size))

    def mark_failed(self, why: str = "") -> None:
        """Tell the peers this rank gave up on the communicator, and why: their waits (polled)
        and their next call stop at once."""
        text = why.encode("utf-8", "replace")[:MESSAGE_BYTES - 1]
        tail = self.shared.payloads[self.rank][-MESSAGE_BYTES:]
        tail[:] = 0
        tail[:len(text)] = list(text)
        self.shared.post(self.rank, FAILED, 1)  # after the text (post fences first)

    def failures(self) -> list[tuple[int, str]]:
        """``(communicator rank, error text)`` of each other rank of this node that marked the
        communicator failed."""
        found = []
        for r, row in enumerate(self.shared.counters):
            if row[FAILED] and r != self.rank:
                self.shared.fence()
                raw = bytes(self.shared.payloads[r][-MESSAGE_BYTES:])
                found.append((self.ranks[r], raw.split(b"\0", 1)[0].decode("utf-8", "replace")))
        return found

    def failed_peers(self) -> list[int]:
        """The other ranks of this node that marked the communicator failed (communicator ranks)."""
        rows = self.shared.counters
        return [self.ranks[r] for r, row in enumerate(rows) if row[FAILED] and r != self.rank]

    def peer_error(self, rank: int) -> PeerFailedError | None:
        """The error for communicator rank ``rank`` when a peer marked the communicator failed."""
        failures = self.failures()
        if not failures:
            return None
        said = "; ".join(f"rank {r} failed with {text or 'an error'}" for r, text in failures)
        return PeerFailedError(
            f"rank {rank}: {said}. It gave up on this communicator, so this rank cannot complete "
            "the call (nor later ones); this communicator refuses further use")

    def check_peers(self, rank: int) -> None:
        """Raise :class:`PeerFailedError` if a peer marked the communicator failed (polled by waits)."""
        if any(row[FAILED] for row in self.shared.counters):
            err = self.peer_error(rank)
            if err is not None:
                raise err

    def calls(self, rank: int) -> int:
        """How many agreement checks ``rank`` has entered."""
        return self.shared.read(rank, CALLS)

    def close(self, abandon: bool = False) -> None:
        """Collective and bounded (see :meth:`SharedBoard.close`); ``abandon`` after a failure."""
        self.shared.close(abandon)
