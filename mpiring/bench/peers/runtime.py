"""The peers of one run: which of the asked-for peers can run (every rank agreeing), their
set-up, their calls per point, and their close. Collective where it says so; the decisions
are the same on every rank.

A peer that cannot run is no error: :meth:`PeerSet.start` returns its one-line reason, and
the run shows it in the banner and writes its rows as "unavailable" (skipped, not timed).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..measure import StageFailed, agree
from . import get, refusal
from .base import Peer, PeerContext


def _first_reason(errors: list[str]) -> str:
    """A failed stage's first cause without its "rank N: ErrorType: " prefix."""
    first = errors[0]
    parts = first.split(": ", 2)
    return parts[-1] if len(parts) == 3 and parts[0].startswith("rank ") else first


class PeerSet:
    """The run's live peers, by name."""

    def __init__(self) -> None:
        self.peers: dict[str, Peer] = {}
        self.notes: dict[str, str] = {}  # name -> what the row runs (versions, variant)

    def start(self, world: Any, wanted: Sequence[str], ctx: PeerContext,
              make: Callable[[str], Peer] | None = None) -> dict[str, str]:
        """Collective: set up the peers among ``wanted`` that can run here, in order; returns
        ``{name: reason}`` for the others. ``make(name)`` makes a peer's runtime object
        (default: its spec's factory)."""
        skipped: dict[str, str] = {}
        for name in wanted:
            why = refusal(name, ctx.op, ctx.dtype.name, ctx.nodes)
            if why:
                skipped[name] = why
                continue
            factory: Callable[[str], Peer] = make or _make
            try:
                peer: Peer = agree(world, functools.partial(factory, name))
                reasons = agree(world, peer.available, share=True)
            except StageFailed as err:
                skipped[name] = _first_reason(err.errors)
                continue
            bad = [(r, why) for r, why in enumerate(reasons) if why]
            if bad:
                rank, why = bad[0]
                skipped[name] = why if len(bad) == len(reasons) else f"rank {rank}: {why}"
                continue
            try:
                peer.setup(world, ctx)
            except StageFailed as err:
                skipped[name] = f"set-up failed: {_first_reason(err.errors)}"
                self._close(peer)
                continue
            self.peers[name] = peer
            self.notes[name] = _describe(peer)
        return skipped

    def __contains__(self, name: str) -> bool:
        return name in self.peers

    def call(self, name: str, bufs: Any, in_place: bool) -> Callable[[], None]:
        """Local: the call of peer ``name`` at one point (raises as ``Peer.prepare`` does)."""
        return self.peers[name].prepare(bufs, in_place)

    def capture(self, name: str) -> Callable[[Any, Callable[[], None], int], Any] | None:
        """Peer ``name``'s own graph capture, or None for the bench's (CuPy's)."""
        peer = self.peers[name]
        if type(peer).capture is Peer.capture:
            return None
        return peer.capture

    def abandon(self, name: str) -> None:
        """Stop using peer ``name``, without closing it: after an error mid-call its library's
        state is unknown, and a collective close could wait forever."""
        self.peers.pop(name, None)

    def close(self) -> None:
        """Collective: close every peer, in reverse order of set-up."""
        for name in reversed(list(self.peers)):
            self._close(self.peers.pop(name))

    @staticmethod
    def _close(peer: Peer) -> None:
        with contextlib.suppress(Exception):  # best effort at the end of a run
            peer.close()


def _describe(peer: Peer) -> str:
    """The peer's versions for the banner; never a reason to stop the run."""
    try:
        return peer.describe()
    except Exception as err:  # noqa: BLE001 - a version query that fails is only a note
        return f"(versions unknown: {type(err).__name__}: {err})"


def _make(name: str) -> Peer:
    peer = get(name).make()
    if not isinstance(peer, Peer):
        raise TypeError(f"peer {name!r}: its factory made a {type(peer).__name__}, not a Peer")
    return peer
