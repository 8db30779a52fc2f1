"""The messages of mpiring's own point-to-point exchanges (the set-up rounds of
:mod:`mpiring.node.rendezvous`, the failure notices of :mod:`mpiring.node.notice`): a fixed header and a
short text, received one sender at a time and in order, with the rounds (or sessions) they
belong to told apart. What a communicator keeps between rounds (:class:`Attempts`) and the
session of mpiring's duplicate live on the communicators themselves, as MPI attributes.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field

import numpy as np
from mpi4py import MPI

from .signals import ABANDONED_REQUESTS

TIMED_OUT, FAILED = 1, 2  # what ended a round (an ABORT's cause)
_HEAD = np.dtype([("kind", "<i8"), ("round", "<i8"), ("nonce", "<i8"), ("vote", "<i8"),
                  ("seconds", "<f8"), ("origin", "<i8"), ("missing", "<i8"), ("late", "<i8"),
                  ("cause", "<i8"), ("length", "<i8")])
TEXT_BYTES = 960
MESSAGE_BYTES = _HEAD.itemsize + TEXT_BYTES


@dataclass
class Message:
    """One message of a round (or a notice): its kind and round, and what the kind needs.

    ``nonce``: rank 0's number for this round (PREPARE, ACK, GO); ``vote``: a HELLO's (1 ready,
    0 failed); ``seconds``: the sender's bound (HELLO; ABORT: the wait that expired) or, in a
    PREPARE, how long rank 0 waits for the ACKs; ``origin``: the rank whose failure or
    withdrawal ended the round (-1: rank 0's own timeout); ``missing``: the one rank that never
    arrived (-1: none or several); ``late``: 1 in an ABORT to a rank that had not arrived;
    ``cause``: TIMED_OUT or FAILED (a rank's set-up raised); ``text``: why.
    """

    kind: int
    round: int
    nonce: int = 0
    vote: int = 1
    seconds: float = 0.0
    origin: int = -1
    missing: int = -1
    late: int = 0
    cause: int = TIMED_OUT
    text: str = ""

    def pack(self) -> np.ndarray:
        text = np.frombuffer(self.text.encode("utf-8", "replace")[:TEXT_BYTES], dtype=np.uint8)
        head = np.array([(self.kind, self.round, self.nonce, self.vote, self.seconds, self.origin,
                          self.missing, self.late, self.cause, text.size)], dtype=_HEAD)
        return np.concatenate([head.view(np.uint8), text])

    @classmethod
    def unpack(cls, buf: np.ndarray, nbytes: int) -> Message:
        if nbytes < _HEAD.itemsize:  # not one of ours: dropped like a message of another round
            return cls(0, -1)
        h = buf[:_HEAD.itemsize].view(_HEAD)[0]
        length = min(int(h["length"]), nbytes - _HEAD.itemsize)
        text = bytes(buf[_HEAD.itemsize:_HEAD.itemsize + length]).decode("utf-8", "replace")
        return cls(int(h["kind"]), int(h["round"]), int(h["nonce"]), int(h["vote"]), float(h["seconds"]),
                   int(h["origin"]), int(h["missing"]), int(h["late"]), int(h["cause"]), text)


def new_nonce() -> int:
    """A random positive int64: a round's nonce, which doubles as the session of what the round
    made."""
    return secrets.randbits(62) + 1


@dataclass
class Attempts:
    """What one communicator keeps between rounds on it: how many this rank started, and the
    messages it already received that belong to later rounds (per sender, in order)."""

    started: int = 0
    early: dict[int, list[Message]] = field(default_factory=dict)


_KEYS: dict[str, int] = {}  # MPI attribute keys: "attempts" (of a caller's communicator), "session"
_KEYS_LOCK = threading.Lock()  # (communicators may be set up from several threads)


def _key(name: str) -> int:
    with _KEYS_LOCK:
        if name not in _KEYS:
            _KEYS[name] = MPI.Comm.Create_keyval()
        return _KEYS[name]


def attempts_of(comm: MPI.Intracomm) -> Attempts:
    """The :class:`Attempts` kept on ``comm`` (an MPI attribute: it goes when ``comm`` is freed,
    and a duplicate of ``comm`` starts afresh)."""
    key = _key("attempts")
    found = comm.Get_attr(key)
    if isinstance(found, Attempts):
        return found
    fresh = Attempts()
    comm.Set_attr(key, fresh)
    return fresh


def set_session(comm: MPI.Intracomm, session: int) -> None:
    """Record on ``comm`` (mpiring's duplicate) the session its join agreed on."""
    comm.Set_attr(_key("session"), session)


def session_of(comm: MPI.Intracomm) -> int:
    """The session of ``comm`` (see :func:`set_session`); 0 for a communicator without one."""
    found = comm.Get_attr(_key("session"))
    return found if isinstance(found, int) else 0


class Inbox:
    """The messages of one round (or session), one receive posted per sender on ``(comm, tag)``.

    ``attempts`` given (numbered rounds): messages of earlier rounds are dropped; one of a later
    round is kept in ``attempts.early`` and its sender no longer read from in this round (all it
    sends next is later still). ``attempts`` None (one-shot): every message whose round is not
    ``round`` is dropped.
    """

    def __init__(self, comm: MPI.Intracomm, tag: int, round_: int, senders: list[int],
                 attempts: Attempts | None = None, source_any: bool = False) -> None:
        self.comm, self.tag, self.round, self.attempts = comm, tag, round_, attempts
        self.got: dict[int, list[Message]] = {p: [] for p in senders}
        self.ahead: set[int] = set()  # senders seen at a later round: round `round` is over for them
        self._posted: dict[int, tuple[MPI.Request, np.ndarray]] = {}
        self._any = source_any  # one receive from any of ``senders`` (rarely used: notices)
        if source_any:
            self._post(MPI.ANY_SOURCE)
            return
        for p in senders:
            early = attempts.early.get(p, []) if attempts is not None else []
            while early and early[0].round <= round_:  # what came early for this round, in order
                msg = early.pop(0)
                if msg.round == round_:
                    self.got[p].append(msg)
            if early:
                self.ahead.add(p)
            else:
                self._post(p)

    def _post(self, p: int) -> None:
        buf = np.empty(MESSAGE_BYTES, dtype=np.uint8)
        self._posted[p] = (self.comm.Irecv([buf, MPI.BYTE], source=p, tag=self.tag), buf)

    def _take(self, p: int, msg: Message) -> bool:
        """File ``msg`` from ``p``; whether to read on from ``p`` in this round."""
        if msg.round == self.round and p in self.got:
            self.got[p].append(msg)
            return True
        if self.attempts is None or msg.round < self.round or p not in self.got:
            return True  # another session's, or left by a round that failed: dropped
        self.attempts.early.setdefault(p, []).append(msg)
        self.ahead.add(p)
        return False

    def poll(self) -> None:
        """Take what has arrived (each sender's messages in order)."""
        status = MPI.Status()
        for key in list(self._posted):
            while key in self._posted:
                request, buf = self._posted[key]
                if not request.Test(status):
                    break
                del self._posted[key]
                source = status.Get_source() if self._any else key
                if self._take(source, Message.unpack(buf, status.Get_count(MPI.BYTE))):
                    self._post(key)

    def kinds(self, p: int) -> list[int]:
        return [m.kind for m in self.got[p]]

    def first(self, p: int, *kinds: int, nonce: int | None = None) -> Message | None:
        """``p``'s first message of one of ``kinds`` (with ``nonce``, if given), or None."""
        return next((m for m in self.got[p] if m.kind in kinds and (nonce is None or m.nonce == nonce)),
                    None)

    def close(self) -> None:
        """Withdraw the receives still posted (MPI can cancel a receive): nothing of this round
        stays pending. One that matched meanwhile is filed (a later round's message is kept)."""
        status = MPI.Status()
        for key, (request, buf) in list(self._posted.items()):
            request.Cancel()
            request.Wait(status)
            if not status.Is_cancelled():
                source = status.Get_source() if self._any else key
                self._take(source, Message.unpack(buf, status.Get_count(MPI.BYTE)))
        self._posted.clear()


class Outbox:
    """Sends on ``(comm, tag)``; their buffers live until the sends complete (kept for good if
    a send never does: a message of a few bytes is sent eagerly, so that is not expected)."""

    def __init__(self, comm: MPI.Intracomm, tag: int) -> None:
        self.comm, self.tag = comm, tag
        self._sent: list[tuple[MPI.Request, np.ndarray]] = []

    def send(self, p: int, msg: Message) -> None:
        buf = msg.pack()
        self._sent.append((self.comm.Isend([buf, MPI.BYTE], dest=p, tag=self.tag), buf))

    def close(self) -> None:
        for request, buf in self._sent:
            if not request.Test():
                ABANDONED_REQUESTS.append((request, (buf,)))
        self._sent.clear()
