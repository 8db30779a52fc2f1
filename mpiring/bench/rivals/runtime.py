"""The rivals of one run: which of the asked-for rivals can run (every rank agreeing), their
set-up, their calls per point, and their close. Collective where it says so; the decisions
are the same on every rank.

A rival that cannot run is no error: :meth:`RivalSet.start` returns its one-line reason, and
the run shows it in the banner and writes its rows as "unavailable" (skipped, not timed).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

from ..measure import StageFailed, agree
from . import get, refusal
from .base import Rival, RivalContext


def _first_reason(errors: list[str]) -> str:
    """A failed stage's first cause without its "rank N: ErrorType: " prefix."""
    first = errors[0]
    parts = first.split(": ", 2)
    return parts[-1] if len(parts) == 3 and parts[0].startswith("rank ") else first


class RivalSet:
    """The run's live rivals, by name."""

    def __init__(self) -> None:
        self.rivals: dict[str, Rival] = {}
        self.notes: dict[str, str] = {}  # name -> what the row runs (versions, variant)

    def start(self, world: Any, wanted: Sequence[str], ctx: RivalContext,
              make: Callable[[str], Rival] | None = None) -> dict[str, str]:
        """Collective: set up the rivals among ``wanted`` that can run here, in order; returns
        ``{name: reason}`` for the others. ``make(name)`` makes a rival's runtime object
        (default: its spec's factory)."""
        skipped: dict[str, str] = {}
        for name in wanted:
            why = refusal(name, ctx.op, ctx.dtype.name, ctx.nodes)
            if why:
                skipped[name] = why
                continue
            factory: Callable[[str], Rival] = make or _make
            try:
                rival: Rival = agree(world, functools.partial(factory, name))
                reasons = agree(world, rival.available, share=True)
            except StageFailed as err:
                skipped[name] = _first_reason(err.errors)
                continue
            bad = [(r, why) for r, why in enumerate(reasons) if why]
            if bad:
                rank, why = bad[0]
                skipped[name] = why if len(bad) == len(reasons) else f"rank {rank}: {why}"
                continue
            try:
                rival.setup(world, ctx)
            except StageFailed as err:
                skipped[name] = f"set-up failed: {_first_reason(err.errors)}"
                self._close(rival)
                continue
            self.rivals[name] = rival
            self.notes[name] = _describe(rival)
        return skipped

    def __contains__(self, name: str) -> bool:
        return name in self.rivals

    def call(self, name: str, bufs: Any, in_place: bool) -> Callable[[], None]:
        """Local: the call of rival ``name`` at one point (raises as ``Rival.prepare`` does)."""
        return self.rivals[name].prepare(bufs, in_place)

    def capture(self, name: str) -> Callable[[Any, Callable[[], None], int], Any] | None:
        """Rival ``name``'s own graph capture, or None for the bench's (CuPy's)."""
        rival = self.rivals[name]
        if type(rival).capture is Rival.capture:
            return None
        return rival.capture

    def abandon(self, name: str) -> None:
        """Stop using rival ``name``, without closing it: after an error mid-call its library's
        state is unknown, and a collective close could wait forever."""
        self.rivals.pop(name, None)

    def close(self) -> None:
        """Collective: close every rival, in reverse order of set-up."""
        for name in reversed(list(self.rivals)):
            self._close(self.rivals.pop(name))

    @staticmethod
    def _close(rival: Rival) -> None:
        with contextlib.suppress(Exception):  # best effort at the end of a run
            rival.close()


def _describe(rival: Rival) -> str:
    """The rival's versions for the banner; never a reason to stop the run."""
    try:
        return rival.describe()
    except Exception as err:  # noqa: BLE001 - a version query that fails is only a note
        return f"(versions unknown: {type(err).__name__}: {err})"


def _make(name: str) -> Rival:
    rival = get(name).make()
    if not isinstance(rival, Rival):
        raise TypeError(f"rival {name!r}: its factory made a {type(rival).__name__}, not a Rival")
    return rival
