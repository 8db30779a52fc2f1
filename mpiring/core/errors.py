"""Exceptions raised by mpiring. Every one names the problem and, where there is one, the remedy."""

from __future__ import annotations


class MpiringError(RuntimeError):
    """Base class of every error mpiring raises on purpose."""


class InvalidArgumentError(MpiringError, ValueError):
    """A buffer, dtype, op or option that this rank cannot allreduce."""


class RankMismatchError(MpiringError):
    """Ranks called the same collective with arguments that do not agree (count, dtype, op, ...)."""


class PeerArgumentError(MpiringError):
    """Another rank rejected its own arguments, so this rank aborts the collective too."""


class MpiringTimeoutError(MpiringError, TimeoutError):
    """A wait for a peer ran past the communicator's timeout.

    The communicator is marked failed afterwards: later calls raise instead of running on
    state that may be half-updated (or, after a timed-out agreement check or set-up step, on
    an MPI communicator that still holds a pending collective).

    The message names this rank, what it waited for, and where; the same facts are attributes
    so that callers can act on them: ``rank``, ``timeout`` (s), ``waiting_for``, ``peer`` (the
    rank waited for, when one is known), ``where`` (e.g. "in the ring algorithm, step 3 of 6"),
    ``algorithm``, ``step`` and ``seq`` (the sequence number: a transfer's in the ring, the
    call's in the agreement check).
    """

    def __init__(self, rank: int, timeout: float, waiting_for: str, *, peer: int | None = None,
                 where: str = "", algorithm: str | None = None, step: str | None = None,
                 seq: int | None = None, hint: str = "") -> None:
        self.rank, self.timeout, self.waiting_for, self.peer = rank, timeout, waiting_for, peer
        self.where, self.algorithm, self.step, self.seq, self.hint = where, algorithm, step, seq, hint
        super().__init__(self._compose())

    def locate(self, where: str, *, algorithm: str | None = None, step: str | None = None,
               seq: int | None = None) -> MpiringTimeoutError:
        """Add where the wait happened (known to the caller of the wait, not to the waiter)."""
        self.where = where
        self.algorithm = algorithm if algorithm is not None else self.algorithm
        self.step = step if step is not None else self.step
        self.seq = seq if seq is not None else self.seq
        self.args = (self._compose(),)
        return self

    def __reduce__(self) -> tuple:  # keyword-only state survives pickling (e.g. multiprocessing)
        return (_rebuild_timeout, (self.rank, self.timeout, self.waiting_for, dict(
            peer=self.peer, where=self.where, algorithm=self.algorithm, step=self.step,
            seq=self.seq, hint=self.hint)))

    def _compose(self) -> str:
        where = f" {self.where}," if self.where else ""
        hint = f"; {self.hint}" if self.hint else ""
        return (f"rank {self.rank} timed out after {self.timeout:g} s{where} "
                f"waiting for {self.waiting_for}{hint}")


def _rebuild_timeout(rank: int, timeout: float, waiting_for: str, extra: dict) -> MpiringTimeoutError:
    return MpiringTimeoutError(rank, timeout, waiting_for, **extra)


class PeerFailedError(MpiringError):
    """Another rank gave up on the communicator (after an error or a timeout of its own), so
    this rank cannot complete what needs every rank (closing it cleanly)."""


class CommunicatorClosedError(MpiringError):
    """The communicator was closed, or failed earlier, and refuses further use."""


class ConcurrentCallError(MpiringError):
    """A call, ``close()`` or ``synchronize()`` entered while another was in progress on the same
    communicator (from another thread): MPI forbids concurrent calls on one communicator."""


class UnavailableError(MpiringError):
    """A requested algorithm or feature is not available here (no GPU, no NCCL, ...)."""


class SetupError(MpiringError):
    """Communicator set-up found an environment it cannot work in (hidden GPUs, broken P2P, ...)."""
