"""Set-up rendezvous: every rank of a communicator agrees, bounded in time, whether a set-up goes
ahead, or every rank learns that it failed. Point-to-point messages only, on a tag of mpiring's
own, so that a failed attempt leaves no collective pending (MPI cannot cancel one) and nothing
that a later attempt could mistake for its own.

Why a protocol, not a barrier: bounded waits that expire independently split the ranks. With a
polled ``MPI_Ibarrier`` (or "everyone sends everyone an empty message", as before), one rank can
see the last arrival just before its timeout while another's timeout fires just before; the
first goes ahead into blocking collectives, the second raises. And a rank that arrives after
the others gave up would pair its first set-up with their retry.

**Rounds on the caller's communicator** (:func:`mpiring.node.setup_steps.join`). Each rank numbers the
rounds it starts on one communicator (1, 2, ...; kept on the communicator as an MPI attribute,
see :class:`mpiring.node.mailbox.Attempts`). The k-th round of every rank pairs with the k-th
round of every other,
as MPI pairs the k-th collective calls: a round that failed still counts. Every message
carries its round's number; a rank takes one sender's messages in order (MPI keeps the order
of one sender's messages on one tag), drops those of earlier rounds (what failed rounds left
behind: drained, never matched by a later round), and keeps those of later rounds for then.

**One-shot rounds on mpiring's own duplicate** (:func:`mpiring.node.setup_steps.finish`, and the
failure notices of :mod:`mpiring.node.notice`) are identified by the *session*: a random number rank
0 draws for each round of the join and every rank learns from its ``PREPARE``. A message of
another session is dropped. (MPICH reuses a freed communicator's context for the next one, and
a message left unmatched on the old one then matches there: a number per communicator could
not tell them apart.)

**One round** (rank 0 of the communicator coordinates; ``k`` the round):

1. Every rank sends ``HELLO(k)`` (its vote: ready or failed, with why) to rank 0 and, in a
   presence round (the join), to every rank, so that each rank can name the missing ones.
2. Rank 0 waits, bounded, for every ``HELLO(k)``. All ready: it draws a nonce and sends
   ``PREPARE(k, nonce)`` to every rank. A failed vote, a ``WITHDRAW(k)`` or its own timeout:
   it sends ``ABORT(k, why)``.
3. A rank waits, bounded, for ``PREPARE(k)`` or ``ABORT(k)``. On ``PREPARE`` it answers
   ``ACK(k, nonce)`` and is committed: it waits for the verdict as long as rank 0 may take. On
   its own timeout (or a peer seen at a later round: round ``k`` is over) it sends
   ``WITHDRAW(k)`` to rank 0 and fails; it never sends ``ACK(k)`` after that.
4. Rank 0 waits for every ``ACK(k, nonce)``: all there, it sends ``GO(k, nonce)`` and the round
   succeeded; a ``WITHDRAW(k)`` (or its timeout) instead: ``ABORT(k)``.

A rank goes ahead only on ``GO(k, nonce)``, which needs every rank's ``ACK(k, nonce)``; a rank
fails only after sending ``WITHDRAW(k)`` (so rank 0 never sees its ``ACK(k)``), on
``ABORT(k)``, or, being rank 0, having sent ``ABORT(k)``. So every rank that finishes round
``k`` finishes it alike. (The nonce keeps an ``ACK`` left over on a freed communicator whose
context MPI reused from ever completing a round of the new one.) The one wait that cannot keep
this promise is a committed rank's wait for a rank 0 that died after ``PREPARE(k)``: nobody
goes ahead then (rank 0 sent no ``GO``), and the committed ranks raise once that wait expires.

Waits for ranks that are known to be here (the verdict, the ``ACK`` s, a round on a
communicator whose every rank already joined) are bounded by :func:`settled` of the timeout,
never less than ``SETTLED_FLOOR``: there, the timeout could only mistake a slow rank for a
dead one and split the ranks, never find a missing one.

What a failed round leaves: its receives are cancelled (MPI can cancel a receive); its
messages to a rank that had left stay queued there, to be dropped by that rank's next round on
the communicator (or, on mpiring's duplicate, by any other session).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from mpi4py import MPI

from ..core.errors import MpiringTimeoutError, PeerFailedError
from .mailbox import FAILED, Attempts, Inbox, Message, Outbox, new_nonce

HELLO, PREPARE, ACK, GO, ABORT, WITHDRAW = range(1, 7)  # the message kinds of a round
SETTLED_FLOOR = 30.0  # s: the least a wait for a rank known to be here may take (module docstring)
ROOT = 0


def settled(timeout: float) -> float:
    """The bound of a wait for ranks that are known to be present: ``max(timeout, SETTLED_FLOOR)``."""
    return max(timeout, SETTLED_FLOOR)


class RoundFailed(Exception):  # noqa: N818 - not an error of its own: it carries the one to raise
    """How a round ended on this rank when it did not go ahead: ``error`` is what to raise."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _wait(ready: Callable[[], bool], seconds: float) -> bool:
    """Poll ``ready`` until it holds (True) or ``seconds`` pass (False), giving the CPU away
    (CI runs 4 ranks on 2 cores). Checks once more after the deadline."""
    deadline = time.monotonic() + seconds
    spins = 0
    while not ready():
        spins += 1
        if spins < 2000:
            os.sched_yield()
        else:
            time.sleep(50e-6)
        if spins % 64 == 0 and time.monotonic() > deadline:
            return ready()
    return True


@dataclass
class Round:
    """One round of the rendezvous on ``comm`` (see the module docstring).

    Args:
        comm: the communicator whose ranks take part.
        tag: the tag of its messages (used on ``comm`` by nothing else).
        timeout: how long this rank waits for the others to arrive (steps 2 and 3).
        presence: every rank tells every rank it is here (to name the missing ranks);
            otherwise votes go to rank 0 only.
        what: what the ranks do in the round, for errors ("join", "finish set-up").
        hint: the remedy, for errors.
        attempts: what ``comm`` keeps between numbered rounds
            (:func:`mpiring.node.mailbox.attempts_of`), or None
            for a one-shot round of ``session``.
        session: the one-shot round's number (a nonce every rank learnt from the join).
    """

    comm: MPI.Intracomm
    tag: int
    timeout: float
    presence: bool
    what: str
    hint: str
    attempts: Attempts | None = None
    session: int = 0

    def run(self, failure: BaseException | None = None) -> int:
        """Vote ready (``failure`` None) or failed, and return once every rank goes ahead, with
        the round's nonce (the same on every rank: the session of what the round makes).

        Raises :class:`RoundFailed` (its ``error`` says why) when the round failed; with a
        ``failure`` it always does, carrying ``failure`` itself, once rank 0 knows.
        """
        comm = self.comm
        if self.attempts is not None:
            self.attempts.started += 1
            self.k = self.attempts.started
        else:
            self.k = self.session
        self.me, self.size = comm.rank, comm.size
        self.peers = [r for r in range(self.size) if r != self.me]
        if not self.peers:
            if failure is not None:
                raise RoundFailed(failure)
            return new_nonce()
        senders = self.peers if (self.presence or self.me == ROOT) else [ROOT]
        self.inbox = Inbox(comm, self.tag, self.k, senders, self.attempts)
        self.outbox = Outbox(comm, self.tag)
        try:
            if self.me == ROOT:
                return self._coordinate(failure)
            return self._follow(failure)
        finally:
            self.inbox.close()
            self.outbox.close()

    # -- rank 0 -------------------------------------------------------------------------

    def _coordinate(self, failure: BaseException | None) -> int:
        inbox, out = self.inbox, self.outbox
        if self.presence:
            for p in self.peers:
                out.send(p, Message(HELLO, self.k, seconds=self.timeout))
        if failure is not None:  # nobody goes ahead: tell them at once
            self._abort(Message(ABORT, self.k, origin=self.me, cause=FAILED, text=_describe(failure)))
            raise RoundFailed(failure)
        nonce = new_nonce()
        try:
            arrived = _wait(lambda: self._ended() is not None
                            or all(HELLO in inbox.kinds(p) for p in self.peers), self.timeout)
            ended = self._ended()
            if not arrived or ended is not None:
                raise RoundFailed(self._end(ended, self.timeout))
            bound = settled(self.timeout)  # every rank is here: only a crash leaves an ACK out
            for p in self.peers:
                out.send(p, Message(PREPARE, self.k, nonce=nonce, seconds=bound))
            acked = _wait(lambda: self._ended() is not None
                          or all(inbox.first(p, ACK, nonce=nonce) for p in self.peers), bound)
            ended = self._ended()
            if not acked or ended is not None:
                raise RoundFailed(self._end(ended, bound, nonce=nonce))
        except RoundFailed:
            raise
        except BaseException as stop:  # e.g. KeyboardInterrupt: nobody may go ahead without rank 0
            self._abort(Message(ABORT, self.k, origin=self.me, cause=FAILED, text=_describe(stop)))
            raise
        for p in self.peers:  # every rank is committed: the round succeeded
            out.send(p, Message(GO, self.k, nonce=nonce))
        return nonce

    def _ended(self) -> int | None:
        """The first rank that voted failed or withdrew (rank 0's view): the round is over."""
        self.inbox.poll()
        for p in self.peers:
            if self._failure_of(p) is not None:
                return p
        ahead = sorted(self.inbox.ahead)  # at a later round: it withdrew (that came first)
        return ahead[0] if ahead else None

    def _failure_of(self, p: int) -> Message | None:
        """``p``'s failed vote or withdrawal, if it sent one."""
        return next((m for m in self.inbox.got[p]
                     if m.kind == WITHDRAW or (m.kind == HELLO and not m.vote)), None)

    def _end(self, ended: int | None, bound: float, nonce: int | None = None) -> BaseException:
        """Send every rank still in the round ``ABORT(k)`` saying why; return this rank's error.
        ``nonce``: the ACKs of that PREPARE were awaited."""
        if ended is not None:
            msg = self._failure_of(ended)
            if msg is not None and msg.kind == HELLO:  # that rank's set-up raised: relay its error
                self._abort(Message(ABORT, self.k, origin=ended, cause=FAILED, text=msg.text))
                return self._relay(ended, msg.text)
            why = msg.text if msg is not None else "it had moved on to a later set-up"
            text = f"rank {ended} gave up on this set-up ({why})"
            missing = self._missing_one()
            self._abort(Message(ABORT, self.k, origin=ended, seconds=self.timeout, missing=missing,
                                text=text))
            return self._timeout(f"{self._view()}; {text}", peer=missing)
        if nonce is not None:  # every rank had arrived; some never confirmed
            silent = [p for p in self.peers if self.inbox.first(p, ACK, nonce=nonce) is None]
            text = (f"every rank to confirm the set-up once all had arrived (no answer from "
                    f"{_ranks(silent)}: crashed or hung?)")
            missing = silent[0] if len(silent) == 1 else -1
        else:
            text, missing = self._view(), self._missing_one()
        self._abort(Message(ABORT, self.k, seconds=bound, missing=missing,
                            text=f"rank {self.me} timed out after {bound:g} s waiting for {text}"))
        return self._timeout(text, seconds=bound, peer=missing)

    def _abort(self, msg: Message) -> None:
        """``ABORT(k)`` to every rank that has not left the round on its own."""
        absent = set(self._absent())
        for p in self.peers:
            if self._failure_of(p) is None and p not in self.inbox.ahead:
                msg.late = int(p in absent)
                self.outbox.send(p, msg)

    # -- every other rank ---------------------------------------------------------------

    def _follow(self, failure: BaseException | None) -> int:
        inbox, out = self.inbox, self.outbox
        vote = Message(HELLO, self.k, vote=int(failure is None), seconds=self.timeout,
                       cause=FAILED, text="" if failure is None else _describe(failure))
        for p in (self.peers if self.presence else [ROOT]):
            out.send(p, vote)
        if failure is not None:  # rank 0 ends the round for everyone
            raise RoundFailed(failure)

        def answered() -> bool:  # rank 0's answer, or a rank already at a later round
            inbox.poll()
            return inbox.first(ROOT, PREPARE, ABORT) is not None or bool(inbox.ahead)

        try:
            arrived = _wait(answered, self.timeout)
        except BaseException as stop:  # e.g. KeyboardInterrupt: withdraw, so that nobody goes ahead
            out.send(ROOT, Message(WITHDRAW, self.k, text=_describe(stop)))
            raise
        answer = inbox.first(ROOT, PREPARE, ABORT)
        if answer is None:  # this rank gives up on round k: WITHDRAW, so that it can never ACK
            if arrived:  # (a rank at a later round: round k failed for it)
                q = min(inbox.ahead)
                why = f"rank {q} had already given up on it and started another set-up"
                err = self._timeout(f"{self._view()}; {why}")
            else:
                view = self._view()
                why = f"rank {self.me} timed out after {self.timeout:g} s waiting for {view}"
                err = self._timeout(view, peer=self._missing_one())
            out.send(ROOT, Message(WITHDRAW, self.k, text=why))
            raise RoundFailed(err)
        if answer.kind == ABORT:
            raise RoundFailed(self._aborted(answer))
        nonce = answer.nonce
        out.send(ROOT, Message(ACK, self.k, nonce=nonce))  # committed: rank 0 decides from here on
        bound = answer.seconds + settled(self.timeout)  # rank 0 decides within answer.seconds

        def decided() -> bool:
            inbox.poll()
            return inbox.first(ROOT, GO, nonce=nonce) is not None or inbox.first(ROOT, ABORT) is not None

        if not _wait(decided, bound):
            raise RoundFailed(self._timeout(
                f"rank {ROOT}, which coordinates set-up, to confirm it once every rank had arrived "
                "(it may have crashed)", seconds=bound, peer=ROOT))
        aborted = inbox.first(ROOT, ABORT)
        if aborted is not None:
            raise RoundFailed(self._aborted(aborted))
        if self.presence:  # every HELLO(k) was sent before its sender's ACK: drain them all
            def heard_all() -> bool:
                inbox.poll()
                return all(HELLO in inbox.kinds(p) for p in self.peers)

            _wait(heard_all, settled(self.timeout))
        return nonce

    def _aborted(self, msg: Message) -> BaseException:
        """This rank's error for rank 0's ``ABORT(k)``."""
        if msg.cause == FAILED:
            return self._relay(msg.origin, msg.text)
        if msg.late:
            text = f"the other ranks, which gave up on this set-up before this rank arrived ({msg.text})"
        else:
            text = f"{self._view()} (rank {ROOT}, which coordinates set-up, ended it: {msg.text})"
        return self._timeout(text, seconds=msg.seconds or self.timeout, peer=msg.missing)

    # -- both ---------------------------------------------------------------------------

    def _absent(self) -> list[int]:
        """The peers this rank has not heard from in this round (on rank 0: whose vote is missing)."""
        return [p for p in self.inbox.got if HELLO not in self.inbox.kinds(p)]

    def _missing_one(self) -> int:
        absent = self._absent()
        return absent[0] if len(absent) == 1 else -1

    def _view(self) -> str:
        """'the other ranks to join: k of n ranks joined (missing: ...)', from this rank's view."""
        self.inbox.poll()
        if not self.presence and self.me != ROOT:
            return f"rank {ROOT}, which coordinates set-up, to say whether every rank could {self.what}"
        absent = self._absent()
        did = "joined" if self.presence else "did"
        if not absent and self.me == ROOT:
            return f"the other ranks to {self.what}: all {self.size} ranks {did}"
        if not absent:
            return (f"the other ranks to {self.what}: all {self.size} ranks {did}, but rank {ROOT}, "
                    "which coordinates set-up, did not confirm it in time")
        return (f"the other ranks to {self.what}: {self.size - len(absent)} of {self.size} ranks {did} "
                f"(missing: {_ranks(absent)})")

    def _relay(self, origin: int, text: str) -> PeerFailedError:
        return PeerFailedError(f"rank {self.me}: rank {origin} failed to {self.what} ({text}), so no "
                               "rank goes ahead with this set-up")

    def _timeout(self, waiting_for: str, seconds: float | None = None, peer: int | None = None
                 ) -> MpiringTimeoutError:
        err = MpiringTimeoutError(self.me, self.timeout if seconds is None else seconds, waiting_for,
                                  peer=peer if peer is not None and peer >= 0 else None, hint=self.hint)
        return err.locate("in Communicator set-up", step=self.what)


def _ranks(ranks: list[int]) -> str:
    names = ", ".join(str(r) for r in ranks[:16]) + (", ..." if len(ranks) > 16 else "")
    return f"rank{'s' if len(ranks) > 1 else ''} {names}"


def _describe(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"
