"""Sequence counters (and optional payload) in node shared memory, and bounded waits on them.

Each rank owns one segment of an MPI shared-memory window (``MPI.Win.Allocate_shared`` on
the node communicator): a block of int64 counters, each on its own 64-byte line so that
writers on different ranks never share a cache line, followed by ``payload_bytes`` of raw
memory (the host transport's receive slots). Counters only grow.

Memory ordering follows MPI's unified shared-memory model: a writer fences (``Win.Sync``)
between writing data and posting the counter that announces it, and a reader fences between
seeing the counter and reading the data.

Every wait here is bounded by a timeout (:class:`Waiter`): waits on counters, and waits on
nonblocking MPI operations (the board's own barriers, the agreement check, set-up). The timeout
bounds the time a wait goes without progress from the peers it waits on: its clock starts when
the wait does, and restarts whenever what it watches of them moves (a counter of a peer that
posts). So a call that keeps moving never times out, however long it takes, and a peer that
stops is noticed about one timeout after its last move. A nonblocking MPI operation shows no
progress until it completes: a wait on one is bounded as a whole. A wait that expires raises
:class:`~mpiring.core.errors.MpiringTimeoutError`; what it waited for stays pending, so its owner
must be treated as failed.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from ..core.errors import MpiringTimeoutError, PeerFailedError

COUNTER_STRIDE = 8  # int64 words between counters: one 64-byte line each
PAYLOAD_ALIGN = 4096

# Counter indices in a rank's row.
FULL = (0, 1)  # slot k of this rank holds use FULL[k] (written by the previous rank)
FREE = (2, 3)  # this rank has folded use FREE[k] of its slot k (written by this rank)
# The event-signalled GPU ring (ring-events) orders its event records and waits through these:
EV_FULL = (4, 5)  # the previous rank has recorded its FULL event for use EV_FULL[k] of slot k
EV_FREE = (6, 7)  # this rank has recorded its FREE event for use EV_FREE[k] of its slot k
# (the memops GPU ring signals through flags in device memory instead)
CALLS = 8  # agreement checks this rank has entered (by this rank): names the ranks that are missing
CLOSING = 9  # this rank's part in closing the board (by this rank): CLOSE_READY or ABANDONED
CLOSE_READY, ABANDONED = 1, 2
FAILED = 10  # nonzero once this rank's communicator failed (by this rank): peers stop at once
# Not counters: whole 64-byte lines holding this rank's descriptor of agreement check k in
# lines AGREE[k % AGREE_DEPTH] .. + AGREE_LINES - 1 (16 int64 words, of which
# mpiring.call.agreement uses 1 + len(FIELDS)), written before CALLS announces k. The depth
# bounds how far a rank that posts without waiting runs ahead of the slowest (AGREE_DEPTH - 1
# calls): deep enough that a rank late by a few calls does not stall the others, and that a
# posting rank reads its peers' CALLS lines once every few calls, not every other call.
AGREE_LINES = 2
AGREE_DEPTH = 16
AGREE = tuple(range(11, 11 + AGREE_LINES * AGREE_DEPTH, AGREE_LINES))
NUM_COUNTERS = AGREE[-1] + AGREE_LINES  # lines per rank (2 KiB of them descriptors)
HEADER_BYTES = NUM_COUNTERS * COUNTER_STRIDE * 8

ABANDONED_REQUESTS: list[tuple] = []  # requests that timed out, with their buffers: see Waiter.request
ABANDONED_WINDOWS: list[MPI.Win] = []  # windows of boards abandoned: see SharedBoard.close

PEER_HINT = ("the peer may have crashed, hung or called a different collective (raise MPIRING_TIMEOUT if "
             "its work is just slow); this communicator now refuses further use")


class SharedBoard:
    """Per-rank counters plus payload in one node shared-memory window.

    With a ``timeout``, the barrier after set-up (``setup_timeout``, if given) and the handshake
    of :meth:`close` are bounded.
    Allocating and freeing the window are blocking collectives MPI cannot bound: allocation
    runs right after the communicator's bounded set-up rendezvous, and the free only once the
    close handshake has seen every rank there.
    """

    def __init__(self, node_comm: MPI.Intracomm, payload_bytes: int = 0,
                 timeout: float | None = None, setup_timeout: float | None = None) -> None:
        self.comm = node_comm
        self.rank = node_comm.rank
        self.size = node_comm.size
        self.payload_bytes = payload_bytes
        self.waiter = Waiter(math.inf if timeout is None else timeout, self.rank)
        local = HEADER_BYTES + payload_bytes
        self.win = MPI.Win.Allocate_shared(local, 1, comm=node_comm)
        self.counters: list[np.ndarray] = []
        self.lines: list[np.ndarray] = []  # per rank: (NUM_COUNTERS, COUNTER_STRIDE) int64, whole lines
        self.payloads: list[np.ndarray] = []
        for r in range(self.size):
            mem, _ = self.win.Shared_query(r)
            raw = np.frombuffer(mem, dtype=np.uint8)
            self.lines.append(raw[:HEADER_BYTES].view(np.int64).reshape(NUM_COUNTERS, COUNTER_STRIDE))
            self.counters.append(raw[:HEADER_BYTES].view(np.int64)[::COUNTER_STRIDE])
            self.payloads.append(raw[HEADER_BYTES:HEADER_BYTES + payload_bytes])
        self.lines[self.rank][:] = 0  # every counter and the agreement lines
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.win.Sync()
        # Before anyone reads a peer's row; bounded by ``setup_timeout`` if given (set-up's own).
        setup = self.waiter if setup_timeout is None else Waiter(setup_timeout, self.rank)
        setup.barrier(node_comm, "every rank to zero its counters")

    def fence(self) -> None:
        """A full memory barrier for the shared window (MPI_Win_sync)."""
        self.win.Sync()

    def post(self, rank: int, index: int, value: int) -> None:
        """Publish ``value`` in counter ``index`` of ``rank``'s row, after all earlier writes."""
        self.win.Sync()
        self.counters[rank][index] = value

    def read(self, rank: int, index: int) -> int:
        return int(self.counters[rank][index])

    def counter_address(self, rank: int, index: int) -> int:
        """The address of counter ``index`` of ``rank``'s row in this process (an aligned int64
        word; valid until :meth:`close`): for code that reads or posts it without Python
        (mpiring.call.hot_replay), under the same ordering rules as :meth:`post` and :meth:`fence`."""
        row = self.counters[rank]
        return int(row.ctypes.data) + index * row.strides[0]

    def close(self, abandon: bool = False) -> None:
        """Collective: free the window once no rank touches it any more.

        The ranks meet in the board itself: each posts ``CLOSING`` in its row and waits,
        bounded, until every row says so (read twice, so that a peer giving up at that moment
        is seen). Only then is the window freed: ``MPI_Win_free`` is a blocking collective
        that would wait for a missing peer forever. A rank whose wait expires, or that sees a
        peer that abandoned the board, abandons it too (posts ``ABANDONED``, leaves the window
        to MPI_Finalize) and raises. ``abandon=True``, for a communicator that failed and whose
        peers may be gone, does only that, at once and quietly. Either way the board is closed.
        """
        if self.win == MPI.WIN_NULL:
            return
        rows = list(self.counters)
        self.counters.clear()  # no view of the window outlives it
        self.lines.clear()
        self.payloads.clear()
        win, self.win = self.win, MPI.WIN_NULL  # closed from here on, whatever happens below
        if abandon:
            self._abandon(win, rows)
            return
        win.Sync()
        rows[self.rank][CLOSING] = CLOSE_READY

        def states() -> list[int]:
            win.Sync()
            return [int(row[CLOSING]) for row in rows]

        def met() -> bool:  # everyone is here (seen twice), or someone left for good
            now = states()
            return ABANDONED in now or (set(now) == {CLOSE_READY} and set(states()) == {CLOSE_READY})

        try:
            self.waiter.until(met, lambda: "every rank to close the communicator (ranks "
                              f"{[r for r, s in enumerate(states()) if s != CLOSE_READY]} did not)",
                              hint="a rank crashed, hung, or does not close the communicator")
        except MpiringTimeoutError:
            self._abandon(win, rows)
            raise
        gone = [r for r, s in enumerate(states()) if s == ABANDONED]
        if gone:
            self._abandon(win, rows)
            raise PeerFailedError(
                f"rank {self.rank} cannot free the communicator's shared memory: rank(s) {gone} "
                "abandoned it after an error or a timeout of their own (their errors say why); "
                "it is left to MPI_Finalize"
            )
        rows.clear()
        win.Unlock_all()
        win.Free()

    def _abandon(self, win: MPI.Win, rows: list[np.ndarray]) -> None:
        """Tell the peers this rank will never free the window, and keep it alive for good:
        a peer that is merely late may still write into this memory."""
        win.Sync()
        rows[self.rank][CLOSING] = ABANDONED
        win.Sync()
        ABANDONED_WINDOWS.append(win)


class Watch:
    """What every wait of one communicator also watches (shared by its waiters): ``check``,
    which raises if a peer marked the communicator failed (polled about every millisecond or
    less of waiting), so that a rank stops at once when a peer gave up, not a timeout later."""

    def __init__(self, check: Callable[[], None] | None = None) -> None:
        self.check = check


class Waiter:
    """Bounded spin-waits that give the CPU away: CI runs 4 ranks on 2 cores."""

    def __init__(self, timeout: float, describe_rank: int) -> None:
        self.timeout = timeout
        self.rank = describe_rank
        self.watch: Watch | None = None

    def until(self, ready: Callable[[], bool], what: Callable[[], str], *, peer: int | None = None,
              hint: str = PEER_HINT, progress: Callable[[], object] | None = None) -> None:
        """Return once ``ready()`` is true; raise :class:`MpiringTimeoutError` once the wait has
        gone the timeout without progress: since it began, or since ``progress()`` (what the
        awaited peers have done so far, e.g. their counters; compared with ``!=``) last changed.

        ``what()`` (called only on expiry) says what was awaited; ``peer`` is the rank awaited,
        when there is one.
        """
        if ready():
            return
        deadline = time.monotonic() + self.timeout
        seen = progress() if progress is not None else None
        watch = self.watch
        spins = 0
        while not ready():
            spins += 1
            if spins < 2000:
                os.sched_yield()
            else:  # a long wait: stop burning a core another rank may need
                time.sleep(50e-6)
            if spins % 64 == 0:
                if watch is not None and watch.check is not None:
                    watch.check()  # a peer that failed: raise now, not at the timeout
                now = time.monotonic()
                if progress is not None:
                    moved = progress()
                    if moved != seen:  # the peers moved: the clock restarts
                        seen, deadline = moved, now + self.timeout
                if now > deadline and not ready():  # (a stall may end)
                    raise MpiringTimeoutError(self.rank, self.timeout, what(), peer=peer, hint=hint)

    def counter_at_least(self, board: SharedBoard, rank: int, index: int, target: int,
                         what: Callable[[], str], *, peer: int | None = None) -> None:
        """Wait until counter ``index`` of ``rank`` reaches ``target``, then fence. Any move of
        the counter short of ``target`` is progress (restarts the clock)."""
        row = board.counters[rank]
        self.until(lambda: row[index] >= target, what, peer=peer, progress=lambda: int(row[index]))
        board.fence()

    def request(self, request: MPI.Request, what: Callable[[], str], *, hint: str = PEER_HINT,
                buffers: tuple = ()) -> None:
        """Wait for a nonblocking MPI operation, polling it (which also drives MPI's progress).
        MPI shows nothing of an operation until it completes, so the timeout bounds it whole.

        On expiry the operation stays pending: MPI cannot cancel a collective, so the caller
        must never start another collective on that communicator. The request and its
        ``buffers`` are then kept until the process ends (mpi4py does not keep them): MPI may
        still complete it, and write into them, should the missing rank ever arrive.
        """
        try:
            self.until(request.Test, what, hint=hint)
        except MpiringTimeoutError:
            ABANDONED_REQUESTS.append((request, buffers))
            raise

    def barrier(self, comm: MPI.Intracomm, what: str) -> None:
        """A barrier on ``comm`` bounded by the timeout (a polled ``MPI_Ibarrier``)."""
        self.request(comm.Ibarrier(), lambda: what,
                     hint="some rank crashed, hung, or did not take part (raise MPIRING_TIMEOUT if it is "
                          "just slow)")
