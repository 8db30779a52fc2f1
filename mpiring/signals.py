"""Sequence counters (and optional payload) in node shared memory, and bounded waits on them.

Each rank owns one segment of an MPI shared-memory window (``MPI.Win.Allocate_shared`` on
the node communicator): a block of int64 counters, each on its own 64-byte line so that
writers on different ranks never share a cache line, followed by ``payload_bytes`` of raw
memory (the host transport's receive slots). Counters only grow.

Memory ordering follows MPI's unified shared-memory model: a writer fences (``Win.Sync``)
between writing data and posting the counter that announces it, and a reader fences between
seeing the counter and reading the data.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from .errors import MpiringTimeoutError

COUNTER_STRIDE = 8  # int64 words between counters: one 64-byte line each
NUM_COUNTERS = 16
HEADER_BYTES = NUM_COUNTERS * COUNTER_STRIDE * 8
PAYLOAD_ALIGN = 4096

# Counter indices in a rank's row.
FULL = (0, 1)  # slot k of this rank holds use FULL[k] (written by the previous rank)
FREE = (2, 3)  # this rank has folded use FREE[k] of its slot k (written by this rank)
RECORDED = (4, 5)  # CUDA transport: full event of slot k recorded for this use (by the writer)
FREED_RECORDED = (6, 7)  # CUDA transport: free event of slot k recorded for this use (by the reader)


class SharedBoard:
    """Per-rank counters plus payload in one node shared-memory window."""

    def __init__(self, node_comm: MPI.Intracomm, payload_bytes: int = 0) -> None:
        self.comm = node_comm
        self.rank = node_comm.rank
        self.size = node_comm.size
        self.payload_bytes = payload_bytes
        local = HEADER_BYTES + payload_bytes
        self.win = MPI.Win.Allocate_shared(local, 1, comm=node_comm)
        self.counters: list[np.ndarray] = []
        self.payloads: list[np.ndarray] = []
        for r in range(self.size):
            mem, _ = self.win.Shared_query(r)
            raw = np.frombuffer(mem, dtype=np.uint8)
            self.counters.append(raw[:HEADER_BYTES].view(np.int64)[::COUNTER_STRIDE])
            self.payloads.append(raw[HEADER_BYTES:HEADER_BYTES + payload_bytes])
        self.counters[self.rank][:] = 0
        self.win.Lock_all(MPI.MODE_NOCHECK)
        self.win.Sync()
        node_comm.Barrier()  # every row is zeroed before anyone reads a peer's

    def fence(self) -> None:
        """A full memory barrier for the shared window (MPI_Win_sync)."""
        self.win.Sync()

    def post(self, rank: int, index: int, value: int) -> None:
        """Publish ``value`` in counter ``index`` of ``rank``'s row, after all earlier writes."""
        self.win.Sync()
        self.counters[rank][index] = value

    def read(self, rank: int, index: int) -> int:
        return int(self.counters[rank][index])

    def close(self) -> None:
        """Collective: free the window once no rank touches it any more."""
        if self.win == MPI.WIN_NULL:
            return
        self.counters.clear()
        self.payloads.clear()
        self.win.Unlock_all()
        self.comm.Barrier()
        self.win.Free()


class Waiter:
    """Bounded spin-waits that give the CPU away: CI runs 4 ranks on 2 cores."""

    def __init__(self, timeout: float, describe_rank: int) -> None:
        self.timeout = timeout
        self.rank = describe_rank

    def until(self, ready: Callable[[], bool], what: Callable[[], str]) -> None:
        """Return once ``ready()`` is true; raise :class:`MpiringTimeoutError` after the timeout."""
        if ready():
            return
        deadline = time.monotonic() + self.timeout
        spins = 0
        while not ready():
            spins += 1
            if spins < 2000:
                os.sched_yield()
            else:  # a long wait: stop burning a core another rank may need
                time.sleep(50e-6)
            if spins % 256 == 0 and time.monotonic() > deadline:
                raise MpiringTimeoutError(
                    f"rank {self.rank} timed out after {self.timeout:g} s waiting for {what()}; "
                    "the peer may have crashed, hung or called a different collective "
                    "(raise MPIRING_TIMEOUT if its work is just slow)"
                )

    def counter_at_least(self, board: SharedBoard, rank: int, index: int, target: int,
                         what: Callable[[], str]) -> None:
        """Wait until counter ``index`` of ``rank`` reaches ``target``, then fence."""
        row = board.counters[rank]
        self.until(lambda: row[index] >= target, what)
        board.fence()
