"""The communicator's control board: what every rank of a node can see of every other, in
node shared memory, without a message — failure marks and agreement-check call counts. Across
nodes, a failure mark also goes out as a notice (:mod:`mpiring.node.notice`), which the board's
checks read alongside the marks.

It is one :class:`~mpiring.node.signals.SharedBoard` (a row of counters per rank plus payload),
owned by the communicator and closed last. The host ring's slots live in its payload and its
FULL/FREE counters in its rows (the host context borrows it; see ``mpiring/ring/transports/host.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from mpi4py import MPI

from ..core.errors import PeerFailedError
from .notice import FailureNotice
from .signals import CALLS, FAILED, SharedBoard
from .timeouts import TimeoutPolicy

MESSAGE_BYTES = 512  # the end of each rank's payload: the text of its failure, for its peers


class ControlBoard:
    """Failure marks and call counts of the ranks of one node (plus the host ring's memory)."""

    def __init__(self, node: MPI.Intracomm, payload_bytes: int, timeouts: TimeoutPolicy,
                 ranks: Sequence[int] | None = None, setup_timeout: float | None = None) -> None:
        self.shared = SharedBoard(node, payload_bytes=payload_bytes + MESSAGE_BYTES,
                                  timeout=timeouts.seconds, setup_timeout=setup_timeout)
        self.rank, self.size = node.rank, node.size
        # The communicator rank of each row (the node's ranks; on one node, the same numbers).
        self.ranks = list(ranks) if ranks is not None else list(range(node.size))
        self.notice: FailureNotice | None = None  # the other nodes' ranks, when there are any

    def attach(self, notice: FailureNotice) -> None:
        """Carry this board's failure marks to the other nodes (and theirs here) through
        ``notice``, which the board closes with itself."""
        self.notice = notice

    def mark_failed(self, why: str = "", cause: BaseException | None = None) -> None:
        """Tell the peers this rank gave up on the communicator, and why (``why``, the text of
        ``cause``): their waits (polled) and their next call stop at once. The ranks of the
        other nodes get a notice too, unless ``cause`` is a PeerFailedError: a failure that
        the rank which had it first told every node of already."""
        text = why.encode("utf-8", "replace")[:MESSAGE_BYTES - 1]
        tail = self.shared.payloads[self.rank][-MESSAGE_BYTES:]
        tail[:] = 0
        tail[:len(text)] = list(text)
        self.shared.post(self.rank, FAILED, 1)  # after the text (post fences first)
        if self.notice is not None and not isinstance(cause, PeerFailedError):  # after this node's mark
            self.notice.tell(why)

    def failures(self) -> list[tuple[int, str]]:
        """``(communicator rank, error text)`` of each other rank that marked the communicator
        failed: of this node's, then those whose notice came from another node."""
        found = []
        for r, row in enumerate(self.shared.counters):
            if row[FAILED] and r != self.rank:
                self.shared.fence()
                raw = bytes(self.shared.payloads[r][-MESSAGE_BYTES:])
                found.append((self.ranks[r], raw.split(b"\0", 1)[0].decode("utf-8", "replace")))
        if self.notice is not None:
            found += self.notice.poll()
        return found

    def failure_words(self) -> list[int] | None:
        """The addresses of the other ranks' failure marks on this board (int64 words, nonzero
        once marked; valid until :meth:`close`): what :meth:`failures` reads, for the compiled
        replay (mpiring.call.hot_replay). None when failures also arrive as notices from other
        nodes, which only :meth:`failures` polls."""
        if self.notice is not None:
            return None
        return [self.shared.counter_address(r, FAILED) for r in range(self.size) if r != self.rank]

    def failed_peers(self) -> list[int]:
        """The other ranks of this node that marked the communicator failed (communicator ranks)."""
        rows = self.shared.counters
        return [self.ranks[r] for r, row in enumerate(rows) if row[FAILED] and r != self.rank]

    def peer_error(self, rank: int) -> PeerFailedError | None:
        """The error for communicator rank ``rank`` when a peer marked the communicator failed.
        It names first the ranks that failed of their own (then those that relay a failure)."""
        failures = self.failures()
        if not failures:
            return None
        relayed = PeerFailedError.__name__ + ":"
        failures.sort(key=lambda failure: (failure[1].startswith(relayed), failure[0]))
        said = "; ".join(f"rank {r} failed with {text or 'an error'}" for r, text in failures)
        return PeerFailedError(
            f"rank {rank}: {said}. It gave up on this communicator, so this rank cannot complete "
            "the call (nor later ones); this communicator refuses further use")

    def check_peers(self, rank: int) -> None:
        """Raise :class:`PeerFailedError` if a peer marked the communicator failed, on this node
        or (a notice, tested at most every few milliseconds) another (polled by waits)."""
        if any(row[FAILED] for row in self.shared.counters) or (
                self.notice is not None and self.notice.poll()):
            err = self.peer_error(rank)
            if err is not None:
                raise err

    def calls(self, rank: int) -> int:
        """How many agreement checks ``rank`` has entered."""
        return self.shared.read(rank, CALLS)

    def close(self, abandon: bool = False) -> None:
        """Collective and bounded (see :meth:`SharedBoard.close`); ``abandon`` after a failure.
        The notice's receive is withdrawn first, whatever happens to the board."""
        if self.notice is not None:
            notice, self.notice = self.notice, None
            notice.close()
        self.shared.close(abandon)
