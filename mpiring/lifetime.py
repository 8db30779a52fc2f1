"""Freeing what a communicator's set-up made, in reverse order (the body of ``close()``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import MpiringError, PeerFailedError

if TYPE_CHECKING:
    from .communicator import Communicator


def release(self: Communicator, peers_failed_too: bool = False) -> None:
    """Free what set-up made (all of it, or what a failed set-up got to), in reverse order.

    After a failure (here or on a peer) nothing waits for peers: they may be gone; unless
    ``peers_failed_too`` (every rank met the same set-up error), when the control board is
    closed with the usual bounded handshake."""
    peers = self.board.failed_peers() if self.board is not None else []
    failed = (self._failed is not None and not peers_failed_too) or bool(peers)
    error: MpiringError | None = None
    if peers and self._failed is None:  # this rank has not heard yet: close tells it
        error = PeerFailedError(
            f"rank {self.rank} cannot free the communicator's memory: rank(s) {peers} abandoned "
            "it after an error or a timeout of their own (their errors say why); it is left to "
            "the end of the process"
        )
    if self._gpu is not None:
        try:
            seen = self._gpu.close(abandon=failed)
            if seen is not None and self._failed is None:  # met after the last call: say so
                error, failed = seen, True
        except MpiringError as err:  # a bounded wait expired: the GPU backend abandoned
            error, failed = err, True
        self._gpu = None
    try:
        if self._host is not None:
            host, self._host = self._host, None
            host.close(abandon=failed)
        if self.board is not None:
            board, self.board = self.board, None
            board.close(abandon=failed)
    finally:
        if self.groups is not None:
            self.groups.free()
        self.comm.Free()
    if error is not None:
        raise error
