"""What a communicator holds: made by :func:`set_up` (in ``__init__``), freed by :func:`release`
(the body of ``close()``), in reverse order."""

from __future__ import annotations

import contextlib
import sys
import warnings
from typing import TYPE_CHECKING

from . import algorithms, cuda
from .agreement import AgreementCheck
from .algorithms import Collective
from .backends.host import HostBackend
from .call_check import CallCheck
from .control import ControlBoard
from .errors import MpiringError, PeerFailedError, UnavailableError
from .notice import FailureNotice
from .options import DEFAULT_HOST_SLOT_BYTES, Options
from .replay import Replays
from .setup_steps import all_ranks
from .transports.host import slot_bytes_for

if TYPE_CHECKING:
    from .communicator import Communicator
    from .groups import Groups


def set_up(self: Communicator, groups: Groups, gpu: bool | None, device: int | None,
           opts: Options, inter: str, steps: float) -> HostBackend:
    """Collective set-up on every rank, once its groups are known (part of ``__init__``): the
    control board, the agreement check, the backends (per node); returns the host backend
    (the GPU one, if any, is ``self._gpu``). ``steps`` bounds the waits of set-up's own
    collective steps (every rank is known to be here: see ``Communicator.__init__``)."""
    slot_bytes = opts.slot_bytes
    host_slot = slot_bytes_for(DEFAULT_HOST_SLOT_BYTES if slot_bytes is None else int(slot_bytes))
    self.board = ControlBoard(groups.node, 2 * host_slot, self.timeouts, groups.node_ranks,
                              setup_timeout=steps)
    if groups.spans_nodes:  # a failure mark reaches the other nodes as a notice (mpiring.notice)
        topo, me = groups.topology, self.comm.rank
        others = [r for r in range(self.comm.size) if topo.node_of[r] != topo.node_of[me]]
        self.board.attach(FailureNotice(self.comm, others))
    self._host = host = HostBackend(groups, self.board, host_slot, self.timeouts)
    # After the board: the check counts its calls there, to name missing ranks.
    agreement = AgreementCheck(self.comm, self.timeout, self.board.shared, algorithms.name_of_code,
                               lambda c: Collective(c).label, groups.node_ranks)
    self._check = CallCheck(agreement, self._fail)
    board = self.board  # every host wait polls the peers' failure marks
    self._watch.check = lambda: board.check_peers(self.rank)
    for waiter in (host.waiter, host.transport.waiter, agreement.waiter):
        if waiter is not None:
            waiter.watch = self._watch
    here = cuda.available() if gpu is None or gpu else False  # gpu=True needs one too
    # Every rank must take the same branch: set-up below is collective.
    use_gpu = all_ranks(self.comm, here, steps, "decide whether to use GPUs")
    if gpu and not use_gpu:
        why = (f"this rank cannot: {cuda.unavailable_reason()}" if not here else
               "another rank cannot (its error says why)")
        raise UnavailableError(f"gpu=True but not every rank can use a GPU; {why}")
    if use_gpu:
        from .backends.gpu import GpuBackend

        self._gpu = GpuBackend(groups, self.board, device, slot_bytes, self.timeouts, inter,
                               opts.sm_budget)
        self._check.use_gpu(self._gpu, self.check_mode)
        if opts.replay:  # else the Replays(None) of __init__: it keys no call, so none replays
            self._replays = Replays.for_gpu()
    return host



def release(self: Communicator, peers_failed_too: bool = False) -> None:
    """Free what set-up made (all of it, or what a failed set-up got to), in reverse order.

    After a failure (here or on a peer) nothing waits for peers: they may be gone; unless
    ``peers_failed_too`` (every rank met the same set-up error), when the control board is
    closed with the usual bounded handshake."""
    self._replays.clear()  # their launches name staging that is about to go
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


def collected(self: Communicator) -> None:
    """A communicator garbage-collected without close() (the body of ``__del__``): warn. Freeing
    is collective (peers may not drop theirs at the same point): a healthy communicator's memory
    and MPI handles stay until MPI_Finalize; a failed one is released at once (that never waits
    for peers)."""
    if getattr(self, "_closed", True) or sys.is_finalizing():
        return
    warnings.warn(f"{self!r} was garbage-collected without close(): its shared memory and MPI "
                  "communicators stay allocated until MPI_Finalize; close it (or use 'with')",
                  ResourceWarning, stacklevel=3)
    if self._failed is not None:
        self._closed = True
        with contextlib.suppress(Exception):
            release(self)
