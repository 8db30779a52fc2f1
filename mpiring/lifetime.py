"""What a communicator holds beyond its MPI groups (:class:`Resources`): made in order by
:meth:`Resources.set_up` (in ``Communicator.__init__``), freed in reverse order by
:meth:`Resources.release` (the body of ``close()``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mpi4py import MPI

from . import algorithms, cuda
from .algorithms import Collective
from .call.agreement import AgreementCheck
from .call.call_check import CallCheck
from .call.options import DEFAULT_HOST_SLOT_BYTES, Options
from .call.replay import CallKeys
from .context.host import HostBackend
from .core.errors import MpiringError, PeerFailedError, UnavailableError
from .node.control import ControlBoard
from .node.notice import FailureNotice
from .node.setup_steps import all_ranks
from .node.signals import Watch
from .node.timeouts import TimeoutPolicy
from .ring.transports.host import slot_bytes_for

if TYPE_CHECKING:
    from .context.gpu import GpuBackend
    from .node.groups import Groups


class Resources:
    """One communicator's control board (node shared memory), host context, GPU context (when
    every rank uses a GPU), per-call check and the keys of eager replays.

    ``comm`` is the communicator's own duplicate; ``fail(err)`` marks it failed (the call check
    calls it); ``watch`` is what every host wait also polls (set here to the board's failure
    marks)."""

    def __init__(self, comm: MPI.Intracomm, timeouts: TimeoutPolicy, watch: Watch,
                 fail: Callable[[BaseException], None]) -> None:
        self.comm, self.timeouts, self.watch, self.fail = comm, timeouts, watch, fail
        self.board: ControlBoard | None = None
        self.host: HostBackend | None = None
        self.gpu: GpuBackend | None = None
        self.check: CallCheck  # made by set_up, with the board
        self.call_keys = CallKeys(None)  # keys calls on CuPy arrays once the GPU context exists

    def set_up(self, groups: Groups, gpu: bool | None, device: int | None, opts: Options,
               inter: str, steps: float) -> HostBackend:
        """Collective set-up on every rank, once its groups are known: the control board, the
        agreement check, the contexts (per node); returns the host context. ``steps`` bounds
        the waits of set-up's own collective steps (every rank is known to be here: see
        ``Communicator.__init__``)."""
        comm, timeouts = self.comm, self.timeouts
        slot_bytes = opts.slot_bytes
        host_slot = slot_bytes_for(DEFAULT_HOST_SLOT_BYTES if slot_bytes is None else int(slot_bytes))
        self.board = board = ControlBoard(groups.node, 2 * host_slot, timeouts, groups.node_ranks,
                                          setup_timeout=steps)
        if groups.spans_nodes:  # a failure mark reaches the other nodes as a notice (mpiring.node.notice)
            topo, me = groups.topology, comm.rank
            others = [r for r in range(comm.size) if topo.node_of[r] != topo.node_of[me]]
            board.attach(FailureNotice(comm, others))
        self.host = host = HostBackend(groups, board, host_slot, timeouts)
        # After the board: the check counts its calls there, to name missing ranks.
        agreement = AgreementCheck(comm, timeouts.seconds, board.shared, algorithms.name_of_code,
                                   lambda c: Collective(c).label, groups.node_ranks)
        self.check = CallCheck(agreement, self.fail)
        rank = comm.rank
        self.watch.check = lambda: board.check_peers(rank)  # every host wait polls the peers' marks
        for waiter in (host.waiter, host.transport.waiter, agreement.waiter):
            if waiter is not None:
                waiter.watch = self.watch
        here = cuda.available() if gpu is None or gpu else False  # gpu=True needs one too
        # Every rank must take the same branch: set-up below is collective.
        use_gpu = all_ranks(comm, here, steps, "decide whether to use GPUs")
        if gpu and not use_gpu:
            why = (f"this rank cannot: {cuda.unavailable_reason()}" if not here else
                   "another rank cannot (its error says why)")
            raise UnavailableError(f"gpu=True but not every rank can use a GPU; {why}")
        if use_gpu:
            from .context.gpu import GpuBackend

            self.gpu = GpuBackend(groups, board, device, slot_bytes, timeouts, inter, opts.sm_budget)
            self.check.use_gpu(self.gpu, opts.check_mode)
            if opts.replay:  # else CallKeys(None): it keys no call, so none replays
                self.call_keys = CallKeys.for_gpu()
        return host

    def release(self, groups: Groups | None, failed_here: bool, peers_failed_too: bool = False) -> None:
        """Free what set-up made (all of it, or what a failed set-up got to), in reverse order,
        then ``groups`` and ``comm``.

        After a failure (here: ``failed_here``, or on a peer) nothing waits for peers: they may
        be gone; unless ``peers_failed_too`` (every rank met the same set-up error), when the
        control board is closed with the usual bounded handshake."""
        peers = self.board.failed_peers() if self.board is not None else []
        failed = (failed_here and not peers_failed_too) or bool(peers)
        error: MpiringError | None = None
        if peers and not failed_here:  # this rank has not heard yet: close tells it
            error = PeerFailedError(
                f"rank {self.comm.rank} cannot free the communicator's memory: rank(s) {peers} "
                "abandoned it after an error or a timeout of their own (their errors say why); it "
                "is left to the end of the process"
            )
        if self.gpu is not None:
            try:
                seen = self.gpu.close(abandon=failed)
                if seen is not None and not failed_here:  # met after the last call: say so
                    error, failed = seen, True
            except MpiringError as err:  # a bounded wait expired: the GPU context abandoned
                error, failed = err, True
            self.gpu = None
        try:
            if self.host is not None:
                host, self.host = self.host, None
                host.close(abandon=failed)
            if self.board is not None:
                board, self.board = self.board, None
                board.close(abandon=failed)
        finally:
            if groups is not None:
                groups.free()
            self.comm.Free()
        if error is not None:
            raise error
