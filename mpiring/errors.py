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
    state that may be half-updated.
    """


class CommunicatorClosedError(MpiringError):
    """The communicator was closed, or failed earlier, and refuses further use."""


class UnavailableError(MpiringError):
    """A requested algorithm or feature is not available here (no GPU, no NCCL, ...)."""


class SetupError(MpiringError):
    """Communicator set-up found an environment it cannot work in (hidden GPUs, broken P2P, ...)."""
