"""A rank's failure, told to the ranks of the other nodes.

The control board's failure mark (:mod:`mpiring.node.control`) lives in node shared memory: the ranks
of the failed rank's node see it within a millisecond, but a rank on another node would wait in
its rail's allreduce, or its next agreement check, until its own timeout. So a rank that marks
the board also sends a *notice* (its error's text, a few hundred bytes, non-blocking) to every
rank of every other node, on a tag of its own on the communicator's duplicate. Every rank keeps
one receive posted for notices; the waits that poll the board's marks test it too, at most once
every ``POLL_SECONDS`` (a clock read otherwise), so the hot path does not pay for it.

Ordering: the failing rank marks its board first, then sends (each notice carries the text it
needs; nothing is read from the sender's memory). A notice carries the duplicate's session
(:func:`mpiring.node.mailbox.session_of`): one left unmatched when a communicator was freed, which
MPI may deliver to a later communicator reusing its context, is dropped there.

A rank that fails only because a peer failed (``PeerFailedError``: it learnt of it from its
board or from a notice) sends nothing: the peer that failed first told every node already.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from mpi4py import MPI

from .mailbox import Inbox, Message, Outbox, session_of

NOTICE_TAG = 0x6D74  # on mpiring's duplicate only (the set-up rounds use 0x6D72 and 0x6D73)
NOTICE = 7  # the message kind (after those of mpiring.node.rendezvous: never on the same tag)
POLL_SECONDS = 0.002  # the most often a rank tests for a notice


class FailureNotice:
    """This rank's notices to, and from, the ranks of the other nodes of ``comm`` (``others``,
    communicator ranks). Closed with the control board that holds it."""

    def __init__(self, comm: MPI.Intracomm, others: Sequence[int]) -> None:
        self.others = list(others)
        self.session = session_of(comm)
        self.heard: list[tuple[int, str]] = []  # (communicator rank, error text), in rank order
        # One receive from any rank of another node, posted now and reposted after each notice.
        self._inbox = (Inbox(comm, NOTICE_TAG, self.session, self.others, source_any=True)
                       if self.others else None)
        self._outbox = Outbox(comm, NOTICE_TAG)
        self._told = False
        self._next_poll = 0.0

    def tell(self, why: str) -> None:
        """Send ``why`` (this rank's error) to every rank of the other nodes, once."""
        if self._told or self._inbox is None:
            return
        self._told = True
        msg = Message(NOTICE, self.session, text=why)
        for r in self.others:
            self._outbox.send(r, msg)

    def poll(self, now: float | None = None) -> list[tuple[int, str]]:
        """The notices received so far; tests for new ones at most every ``POLL_SECONDS``."""
        if self._inbox is None:
            return self.heard
        now = time.monotonic() if now is None else now
        if now >= self._next_poll:
            self._next_poll = now + POLL_SECONDS
            self._inbox.poll()
            self.heard = [(p, m.text) for p, got in self._inbox.got.items() for m in got[:1]
                          if m.kind == NOTICE]
        return self.heard

    def close(self) -> None:
        """Withdraw the posted receive (before the communicator is freed); sends that have not
        completed keep their buffers until the process ends."""
        if self._inbox is not None:
            self._inbox.close()
            self._inbox = None
        self._outbox.close()
