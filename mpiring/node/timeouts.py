"""The communicator's timeout policy: one object, validated once, handed to everything that
waits for a peer (host waits, MPI set-up steps, the GPU watchdog, the kernels' clocks).

What the timeout bounds, on every path: the time a wait goes without progress from the peer
(or peers) it waits on. A wait's clock starts when the wait does and restarts whenever it sees
its peer move, so a call that keeps moving never times out, however long it takes, and a peer
that stops (crashed, hung, gone elsewhere) is noticed about one timeout after its last move:

* host: each wait on a peer's counter in shared memory (the ring's slots; the agreement check,
  where any rank's arrival is progress) restarts at every move it sees (``Waiter.until``);
* GPU: each barrier and line wait of the one-shot, two-shot and oneshot-ll kernels times itself
  from its start, and a oneshot-ll line that arrives restarts the next wait's clock
  (``csrc/sync.cuh``, ``csrc/agree.cuh``); the ring's watchdog reads the call's flags every
  quarter timeout, and a change restarts the call's clock (:mod:`mpiring.cuda.watchdog`);
  ``ring-events`` has no flags: its host waits see each step, and once a call is all enqueued
  the watchdog sees only those waits' counters move (a peer still enqueueing), else the call's
  GPU work has one timeout to finish;
* what shows no progress until it completes is bounded as a whole: a nonblocking MPI operation
  mpiring polls (set-up steps, the agreement check across nodes, ``hier``'s steps between
  nodes).

Not bounded: the ``mpi`` row (one blocking ``MPI_Allreduce``, which nothing outside it can
time or interrupt) and NCCL's own calls; with the agreement check on, the bounded check before
them catches a rank that does not come.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

from ..core import settings
from ..core.errors import InvalidArgumentError
from .signals import Waiter

DEFAULT_SECONDS = 300.0
ENV = "MPIRING_TIMEOUT"


@dataclass(frozen=True)
class TimeoutPolicy:
    """How long any wait for a peer may go without progress from it, in seconds (finite and
    positive): see the module docstring."""

    seconds: float = DEFAULT_SECONDS

    def __post_init__(self) -> None:
        s = self.seconds
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise InvalidArgumentError(f"timeout must be a finite, positive number of seconds, got {s!r}")

    @classmethod
    def resolve(cls, value: float | None) -> TimeoutPolicy:
        """The policy for ``timeout=value``; None reads ``MPIRING_TIMEOUT`` (default 300 s)."""
        if value is None:  # parsed and bounded by the settings table (one error shape)
            return cls(settings.number(ENV) or DEFAULT_SECONDS)
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"timeout must be a number of seconds, got {value!r}") from None
        return cls(seconds)

    def waiter(self, rank: int) -> Waiter:
        """Bounded waits on behalf of ``rank`` (named in their errors)."""
        return Waiter(self.seconds, rank)

    @property
    def drain_seconds(self) -> float:
        """How long draining this rank's GPU work may take: the GPU's own waits end within the
        timeout (the watchdog, the kernels' clocks), plus as much for work queued ahead, plus 5 s."""
        return 2 * self.seconds + 5.0


class ProgressClock:
    """The clock of a wait that the timeout bounds by its time without progress, for a watcher
    that sees what the awaited peers did only when it looks (the GPU watchdog reads a ring
    call's flags, which its peers write as they move).

    The clock starts at ``now``. :meth:`due`: time to look, every ``timeout / samples`` and once
    the timeout is up (a last look before giving up). :meth:`saw` records a look: a change from
    the last look restarts the clock; the first look counts as one (the call may have moved
    before it), and ``None`` (nothing could be seen) never does. :meth:`expired`: the timeout
    has passed since the last change seen. So a watcher that gives up only when a look finds
    nothing new and :meth:`expired` holds never gives up on a wait that moved within the
    timeout, and gives up at most ``timeout * (1 + 1 / samples)`` (plus its own polling
    interval) after the last move.
    """

    def __init__(self, timeout: float, now: float, samples: int = 4) -> None:
        self.timeout, self.period = timeout, timeout / samples
        self.moved = self.looked = now
        self.seen: Hashable | None = None
        self._looked_before = False

    def due(self, now: float) -> bool:
        """Whether to look now."""
        return now - self.looked >= self.period or self.expired(now)

    def saw(self, state: Hashable | None, now: float) -> bool:
        """Record a look at ``now`` that saw ``state``; True if that is progress."""
        self.looked = now
        if state is None or (self._looked_before and state == self.seen):
            return False
        self.seen, self.moved, self._looked_before = state, now, True
        return True

    def expired(self, now: float) -> bool:
        """Whether the timeout has passed since the last progress seen (or the start)."""
        return now - self.moved > self.timeout
