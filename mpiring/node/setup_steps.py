"""Set-up's bounded collective steps: every rank is here (:func:`join`, :func:`finish`), and
the few collectives set-up runs once every rank is (:func:`all_ranks`, :func:`allgather`), each
bounded by the timeout so that a missing rank becomes an error on every rank, not a hang.

A bounded rendezvous of point-to-point messages (:mod:`mpiring.node.rendezvous`) on the caller's
communicator decides, alike on every rank, whether every rank is here: if not, every rank
raises, naming the missing ranks ("3 of 4 ranks joined (missing: rank 3)"), and nothing stays
pending on the caller's communicator. Only then is the communicator duplicated
(``MPI_Comm_idup``, the one collective set-up runs on it), so the blocking collectives of the
rest of set-up start with every rank present and committed. A last round on the duplicate
(:func:`finish`) makes set-up succeed on every rank or fail on every rank.

A failed set-up leaves no collective pending on the caller's communicator (the rendezvous uses
point-to-point messages only; their receives are cancelled, and a message a peer left behind is
dropped by this rank's next set-up on that communicator).
"""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator

import numpy as np
from mpi4py import MPI

from ..core.errors import MpiringError, MpiringTimeoutError
from .mailbox import attempts_of, session_of, set_session
from .rendezvous import Round, RoundFailed, settled
from .signals import Waiter

JOIN_TAG = 0x6D72  # "mr": the set-up rendezvous' messages on the caller's communicator
FINISH_TAG = 0x6D73  # the last round of set-up, on the communicator's own duplicate
SETUP_HINT = ("every rank of the communicator must create the mpiring.Communicator at the same time, and "
              "its communicators in the same order (raise MPIRING_TIMEOUT if some rank is just slow to "
              "get there)")


def join(comm: MPI.Intracomm, timeout: float) -> MPI.Intracomm:
    """Collective: wait, bounded, until every rank of ``comm`` is here, then duplicate ``comm``.

    The ``k``-th call on a communicator pairs with the ``k``-th call of every other rank (a call
    that failed counts too), as MPI pairs collectives. Every rank returns, or every rank raises
    :class:`MpiringTimeoutError` naming how many ranks joined and which are missing (a rank that
    arrives after the others gave up raises at once). A failed call leaves nothing pending on
    ``comm``. The duplicate carries its session (:func:`mpiring.node.mailbox.session_of`): a
    number every rank received from rank 0 in the rendezvous, which tells the duplicate's own
    messages from any that an earlier communicator left behind (:func:`finish`,
    :mod:`mpiring.node.notice`).
    """
    attempt = Round(comm, JOIN_TAG, timeout, presence=True, what="join", hint=SETUP_HINT,
                    attempts=attempts_of(comm))
    try:
        session = attempt.run()
    except RoundFailed as failed:
        raise failed.error from None
    # Every rank is committed to duplicate now: only a rank that dies from here on leaves it
    # pending, so the wait is bounded by settled(timeout), never by a timeout too short to
    # tell a slow rank from a dead one (one rank's expiry and another's completion would
    # split them: the stuck Idup also blocks MPICH's later communicator creation).
    dup, request = comm.Idup()
    try:
        Waiter(settled(timeout), comm.rank).request(
            request, lambda: "every rank to duplicate the communicator (MPI_Comm_idup)", hint=SETUP_HINT,
            buffers=(dup,))
    except MpiringTimeoutError as err:  # a rank left between committing and here: it crashed
        err.locate("in Communicator set-up", step="dup")
        raise
    set_session(dup, session)
    return dup


def finish(comm: MPI.Intracomm, timeout: float, failure: BaseException | None = None) -> None:
    """The last step of set-up, on the communicator's own duplicate ``comm`` (from
    :func:`join`): every rank goes ahead, or none does. A rank whose set-up raised passes its
    error as ``failure``: the others then raise :class:`PeerFailedError` naming it and its
    error (or their own error, if they had one), and this returns at once for the caller to
    raise ``failure``. Otherwise returns once every rank finished set-up, or raises what
    stopped it. Bounded by ``settled(timeout)``: every rank is known to be here since
    :func:`join`."""
    last = Round(comm, FINISH_TAG, settled(timeout), presence=False, what="finish set-up",
                 hint=SETUP_HINT, session=session_of(comm))
    try:
        last.run(failure)
    except RoundFailed as failed:
        if failed.error is not failure:
            raise failed.error from None


@contextlib.contextmanager
def settling(comm: MPI.Intracomm, timeout: float) -> Iterator[float]:
    """Around the set-up steps that follow :func:`join`, on its duplicate ``comm``: yields their
    bound, ``settled(timeout)``, and ends with :func:`finish` (every rank goes ahead, or none
    does). Every rank is here by then, so a step waits only for ranks that are: one that gave
    up on a slow rank while others completed the step would leave them waiting in the next
    blocking one. An exception of the steps is voted (the others raise PeerFailedError naming
    it), then re-raised."""
    try:
        yield settled(timeout)
    except BaseException as err:
        with contextlib.suppress(MpiringError):  # the steps' error is the one to raise
            finish(comm, timeout, err)
        raise
    finish(comm, timeout)


def all_ranks(comm: MPI.Intracomm, flag: bool, timeout: float, what: str) -> bool:
    """Collective, bounded: whether ``flag`` holds on every rank (one polled MIN ``Iallreduce``).

    For set-up decisions every rank must take alike; ``what`` names the decision in the error.
    """
    mine = np.array([int(bool(flag))], dtype=np.int64)
    every = np.zeros_like(mine)
    request = comm.Iallreduce(mine, every, op=MPI.MIN)
    try:
        Waiter(timeout, comm.rank).request(request, lambda: f"every rank to {what}", hint=SETUP_HINT,
                                           buffers=(mine, every))
    except MpiringTimeoutError as err:
        err.locate("in Communicator set-up", step=what)
        raise
    return bool(every[0])


def allgather(comm: MPI.Intracomm, obj: object, timeout: float, what: str) -> list:
    """Collective, bounded: every rank's ``obj`` (picklable), like ``comm.allgather``.

    Two polled nonblocking collectives (the sizes, then the bytes), so a rank that died during
    set-up becomes a timeout naming ``what`` instead of a hang.
    """
    waiter = Waiter(timeout, comm.rank)
    mine = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    length = np.array([mine.size], dtype=np.int64)
    sizes = np.zeros(comm.size, dtype=np.int64)
    try:
        waiter.request(comm.Iallgather(length, sizes), lambda: f"every rank to {what}",
                       hint=SETUP_HINT, buffers=(length, sizes))
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        data = np.empty(int(sizes.sum()), dtype=np.uint8)
        waiter.request(comm.Iallgatherv(mine, [data, sizes, offsets, MPI.BYTE]),
                       lambda: f"every rank to {what}", hint=SETUP_HINT, buffers=(mine, data))
    except MpiringTimeoutError as err:
        err.locate("in Communicator set-up", step=what)
        raise
    return [pickle.loads(data[o:o + n].tobytes()) for o, n in zip(offsets, sizes, strict=True)]
