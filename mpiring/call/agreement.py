"""The per-call agreement check, bounded in time: every rank passes the same arguments, so that
a mismatched or missing rank becomes an error on every rank within the timeout instead of a
hang. (Set-up's own bounded steps, that every rank is here, are :mod:`mpiring.node.setup_steps`.)

Each call (:class:`AgreementCheck`) compares one descriptor per rank: a rejection code (its
rank + 1 if a rank rejected its own arguments, else 0) and the call's fields (:mod:`mpiring.core.fields`).

* **One node** (every rank of the communicator shares the node's control board): each rank
  writes its descriptor into its board lines ``AGREE[k % D]`` (``D = AGREE_DEPTH``, 16) for
  check ``k``, then posts ``k`` in its ``CALLS`` counter (the post fences first, so the
  descriptor is visible before the count); it waits, bounded, until every rank's count
  reaches ``k``, fences, and reads every descriptor. No MPI call: what it costs is mostly the
  wait for the slowest rank.
  Reuse: before a rank writes line ``k % D`` it waits until every rank posted ``k - D + 1``,
  which each rank does only after it finished reading check ``k - D`` (the line's last use).
* **Calls checked on the GPU** (one node, a row with ``gpu_check``, :meth:`AgreementCheck.post`):
  the rank writes and posts its descriptor as above but does not wait for the others: its
  kernels compare descriptors on the GPU (``csrc/agree.cuh``). The board still matters: a
  rank whose own row checks on the host (or that rejected its arguments) reads the
  descriptors, and if it finds the ranks disagree while some peer's row checks on the GPU, it
  launches a *notice* (``notify``) so that the peer's kernel skips the call instead of waiting
  for it. The reuse rule above bounds how far a rank can run ahead (``D - 1`` calls).
* **Several nodes**: one nonblocking ``MPI_Iallreduce`` of a few int64s, polled until done
  or the timeout. Each rank contributes, for every field, ``(value, -value)``; a MAX
  reduction then yields the largest and (negated) smallest value of every field at once.

Either way each rank counts the checks it entered in node shared memory, so a rank that
times out can name the ranks that never arrived. Switch the check off with ``check=False``
or ``MPIRING_CHECK=0``; a communicator of one rank skips it (no one to disagree with).

What a timeout leaves behind: MPI cannot cancel a collective, so the timed-out ``Iallreduce``
stays pending, with its buffers, for the life of the process. The communicator it ran on must
never start another collective (it would match the stale one): the caller marks it failed.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from ..core import descriptor
from ..core.buffers import Memory
from ..core.descriptor import Descriptor
from ..core.errors import MpiringTimeoutError, PeerArgumentError, RankMismatchError
from ..core.fields import FIELD_NAMES, FIELDS, SAME
from ..node.signals import AGREE, AGREE_LINES, CALLS, COUNTER_STRIDE, SharedBoard, Waiter

CALLS_ENTERED, ALL_POSTED = 0, 1  # AgreementCheck's progress words (PostWords.progress)
CHECK_HINT = ("every rank must call each collective the same number of times, in the same order, with the "
              "agreement check on (raise MPIRING_TIMEOUT if some rank is just slow to get there); this "
              "communicator now refuses further use")


class PostWords(NamedTuple):
    """Where :meth:`AgreementCheck.post` reads and writes, as addresses of int64 words (valid
    while the board is open): for the compiled replay (mpiring.call.hot_replay), which posts as
    :meth:`AgreementCheck.post` does, on the same words."""

    progress: int  # [0]: checks this rank entered (``calls``); [1]: every rank posted at least this
    lines: tuple[int, ...]  # this rank's descriptor line of check k: ``lines[k % len(lines)]``
    count: int  # this rank's CALLS counter, posted after the line (a release store)
    all_counts: tuple[int, ...]  # every board rank's CALLS counter, this rank's included


class AgreementCheck:
    """Reusable buffers for the check, made once per communicator.

    Args:
        comm: the communicator the check's allreduce runs on (the communicator's own duplicate).
        timeout: seconds to wait for every rank; None waits forever (tests with fake comms).
        board: node shared memory where each rank counts the checks it entered, to name the
            missing ranks on a timeout (optional).
        algorithm_name: the name of an algorithm's wire code, for mismatch errors (optional).
        collective_name: the name of a collective's wire code, likewise (optional).
        board_ranks: the communicator rank of each row of ``board`` (default: the same
            numbers); a board covers one node, so on several nodes it names only this node's.
        use_board: compare the descriptors in ``board`` when it holds every rank (one node)
            and the check is bounded; False: always by MPI (tests compare the two).
        gpu_codes: the wire codes of the rows whose kernels check on the GPU.
        notify: called with a notice's descriptor (:mod:`mpiring.core.descriptor`) when this
            rank's check finds a problem while some peer's call checks on the GPU.
    """

    def __init__(self, comm: MPI.Intracomm, timeout: float | None = None,
                 board: SharedBoard | None = None,
                 algorithm_name: Callable[[int], str] | None = None,
                 collective_name: Callable[[int], str] | None = None,
                 board_ranks: Sequence[int] | None = None, use_board: bool = True,
                 gpu_codes: frozenset[int] = frozenset(),
                 notify: Callable[[Descriptor], None] | None = None) -> None:
        self.comm = comm
        self.gpu_codes, self.notify = gpu_codes, notify
        # Two int64 words (an array, so that the compiled replay shares them: post_words()):
        # [CALLS_ENTERED] the checks this rank entered (``calls``), [ALL_POSTED] every rank's
        # count was at least this, last we looked.
        self._progress = array("q", [0, 0])
        # How each field's wire code reads in an error ("float32", not "dtype 2").
        self.names: dict[str, Callable[[int], str]] = dict(FIELD_NAMES)
        if algorithm_name is not None:
            self.names["algorithm"] = algorithm_name
        if collective_name is not None:
            self.names["collective"] = collective_name
        self.waiter = None if timeout is None else Waiter(timeout, comm.rank)
        self.board = board
        self.board_ranks = list(board_ranks) if board_ranks is not None else None
        self.what = "allreduce"  # the collective of the call being checked, as messages name it
        self._send = np.zeros(1 + 2 * len(FIELDS), dtype=np.int64)
        self._recv = np.zeros_like(self._send)
        # One node: the board's lines hold the descriptors (module docstring), else MPI.
        self._lines: list[list[np.ndarray]] | None = None
        self._counts: list[np.ndarray] | None = None
        if use_board and board is not None and self.waiter is not None and board.size == comm.size:
            self._lines = [[_descriptor_line(board.lines[r], i) for r in range(board.size)] for i in AGREE]
            self._counts = list(board.counters)

    @property
    def calls(self) -> int:
        """Checks entered by this rank: the sequence number of a call."""
        return self._progress[CALLS_ENTERED]

    @calls.setter
    def calls(self, value: int) -> None:
        self._progress[CALLS_ENTERED] = value

    def post_words(self) -> PostWords:
        """The words :meth:`post` reads and writes (:class:`PostWords`); only where it :attr:`posts`."""
        board, lines = self.board, self._lines
        assert board is not None and lines is not None, "post_words() of a check that does not post"
        return PostWords(self._progress.buffer_info()[0],
                         tuple(int(slot[board.rank].ctypes.data) for slot in lines),
                         board.counter_address(board.rank, CALLS),
                         tuple(board.counter_address(r, CALLS) for r in range(board.size)))

    @property
    def posts(self) -> bool:
        """Whether :meth:`post` can stand in for :meth:`run` here (one node, in the board)."""
        return self._lines is not None

    @staticmethod
    def line(values: dict[str, int], code: int = 0) -> np.ndarray:
        """A rank's descriptor line of one check: its code (rejection) and the call's fields."""
        return np.array([code, *(values[name] for name in FIELDS)], dtype=np.int64)

    def post(self, line: np.ndarray) -> None:
        """Announce this rank's call (its :meth:`line`), whose kernels check it on the GPU,
        without waiting for the others (only, bounded, for a rank ``D - 1`` calls behind: see
        the module docstring)."""
        self._progress[CALLS_ENTERED] += 1  # (the words themselves, not the property: a hot path)
        self._store(line, None)

    def _write(self, code: int, values: dict[str, int], algorithm: str | None) -> list[int]:
        """Write this rank's descriptor of check ``self.calls`` (see :meth:`_store`); returns it."""
        mine = [code, *(values[name] for name in FIELDS)]
        self._store(mine, algorithm)
        return mine

    def _store(self, line: np.ndarray | list[int], algorithm: str | None) -> None:
        """Write ``line`` into this rank's board line of check ``self.calls``, then post the
        count (which fences first)."""
        board, progress = self.board, self._progress
        k = progress[CALLS_ENTERED]
        assert board is not None and self._lines is not None
        last_use = k - len(AGREE) + 1  # every rank must have posted this: then line k % D is free
        if progress[ALL_POSTED] < last_use:
            self._wait_all(last_use, algorithm)
        self._lines[k % len(AGREE)][board.rank][:] = line
        board.post(board.rank, CALLS, k)

    def _wait_all(self, count: int, algorithm: str | None) -> None:
        """Wait, bounded, until every rank of the board posted ``count``."""
        counts, waiter = self._counts, self.waiter
        assert counts is not None and waiter is not None
        try:
            # A rank that enters any check meanwhile is progress: the clock restarts.
            waiter.until(lambda: all(row[CALLS] >= count for row in counts), self._absent, hint=CHECK_HINT,
                         progress=lambda: [int(row[CALLS]) for row in counts])
        except MpiringTimeoutError as err:
            absent = self._absent_ranks()
            err.peer = absent[0] if len(absent) == 1 else None
            where = f"in the agreement check of call {self.calls}"
            where += f" (algorithm {algorithm})" if algorithm else ""
            err.locate(where, algorithm=algorithm, step="agreement check", seq=self.calls)
            raise
        self._progress[ALL_POSTED] = min(int(row[CALLS]) for row in counts)  # often ahead: later waits skip

    def run(self, rejected: bool, values: dict[str, int], algorithm: str | None = None) -> None:
        """Raise on every rank if any rank rejected its arguments or the ranks disagree.

        Raises :class:`MpiringTimeoutError` if some rank does not arrive within the timeout;
        the check's allreduce then stays pending, and ``comm`` must not be used again.
        """
        self.calls += 1
        self.what = what = self.names.get("collective", lambda c: "allreduce")(values.get("collective") or 1)
        code = self.comm.rank + 1 if rejected else 0
        if self._lines is not None:
            if self._agree_in_board(code, values, algorithm):
                return  # the common case: every rank's descriptor is this rank's, code 0
        else:
            if self.board is not None:
                self.board.post(self.board.rank, CALLS, self.calls)
            self._send[0] = code
            for i, name in enumerate(FIELDS):
                v = values[name]
                self._send[1 + 2 * i] = v
                self._send[2 + 2 * i] = -v
            self._reduce(algorithm)
        if rejected:
            return  # the caller raises its own, more precise error
        if self._recv[0]:
            raise PeerArgumentError(
                f"{what} aborted on rank {self.comm.rank}: rank {self._recv[0] - 1} "
                "rejected its arguments (its own error says why)"
            )
        diffs = []
        for i, name in enumerate(FIELDS):
            hi, lo = int(self._recv[1 + 2 * i]), -int(self._recv[2 + 2 * i])
            if hi != lo:
                say = self.names.get(name, str)
                diffs.append(f"{name} (this rank {say(values[name])}, others from {say(lo)} to {say(hi)})")
        if diffs:
            raise RankMismatchError(
                f"ranks called {what} with different arguments: {'; '.join(diffs)}. Every rank "
                f"must pass the same {SAME}"
            )

    def _agree_in_board(self, code: int, values: dict[str, int], algorithm: str | None) -> bool:
        """The check of one node, in the control board. True: every rank's descriptor equals
        this rank's and none rejected (nothing to raise). Otherwise leaves in ``self._recv``
        what the MPI reduction would (max of the codes; per field, the largest value and minus
        the smallest) and returns False."""
        board, k = self.board, self.calls
        assert board is not None and self._lines is not None
        mine = self._write(code, values, algorithm)
        self._wait_all(k, algorithm)
        board.fence()  # every count seen: now the descriptors they announce
        rows = [line.tolist() for line in self._lines[k % len(AGREE)]]
        if code == 0 and all(row == mine for row in rows):  # the common case, at the least cost
            return True
        recv = self._recv
        recv[0] = max(row[0] for row in rows)
        for i in range(len(FIELDS)):
            column = [row[1 + i] for row in rows]
            recv[1 + 2 * i], recv[2 + 2 * i] = max(column), -min(column)
        # Some rank's kernel may be waiting on the GPU for this rank's part in the call.
        algo, memory, gpu = 1 + FIELDS.index("algorithm"), 1 + FIELDS.index("memory"), int(Memory.CUDA)
        if self.notify is not None and any(r != board.rank and row[0] == 0 and row[algo] in self.gpu_codes
                                           and row[memory] == gpu for r, row in enumerate(rows)):
            self.notify(descriptor.pack({}, 0, descriptor.REJECTED) if code else
                        descriptor.pack(values, 0, descriptor.DISAGREED))
        return False

    def _reduce(self, algorithm: str | None) -> None:
        if self.waiter is None:
            self.comm.Allreduce(self._send, self._recv, op=MPI.MAX)
            return
        request = self.comm.Iallreduce(self._send, self._recv, op=MPI.MAX)
        try:
            self.waiter.request(request, self._absent, hint=CHECK_HINT, buffers=(self._send, self._recv))
        except MpiringTimeoutError as err:
            # The request stays pending, writing into these buffers should it ever complete.
            self._send, self._recv = self._send.copy(), self._recv.copy()
            absent = self._absent_ranks()
            err.peer = absent[0] if len(absent) == 1 else None
            where = f"in the agreement check of call {self.calls}"
            if algorithm:
                where += f" (algorithm {algorithm})"
            err.locate(where, algorithm=algorithm, step="agreement check", seq=self.calls)
            raise

    def _absent_ranks(self) -> list[int]:
        """Ranks that have not entered this call's check, as their counters in the board say."""
        if self.board is None:
            return []
        self.board.fence()
        named = self.board_ranks or list(range(self.board.size))
        return [named[r] for r in range(self.board.size) if self.board.read(r, CALLS) < self.calls]

    def _absent(self) -> str:
        """What the check waits for, naming the ranks that never arrived when that is known."""
        head = f"every rank to enter the agreement check of call {self.calls}"
        if self.board is None:
            return head + f": some rank did not call {self.what}"
        absent = self._absent_ranks()
        node = self.board_ranks is not None and len(self.board_ranks) < self.comm.size
        if not absent:
            if node:
                return head + " (every rank of this node did: a rank on another node is late or gone)"
            return head + " (all did: a rank may have crashed or stopped inside it)"
        row = {rank: i for i, rank in enumerate(self.board_ranks or range(self.board.size))}
        where = ", ".join(f"rank {r} is at call {self.board.read(row[r], CALLS)}" for r in absent[:16])
        of = f"{self.board.size} ranks of this node" if node else f"{self.board.size} ranks"
        return f"{head}: {len(absent)} of {of} did not call {self.what} ({where})"


def _descriptor_line(lines: np.ndarray, first: int) -> np.ndarray:
    """The words of a rank's board (``lines``: its rows of 8 int64 words) that hold one
    descriptor, from row ``first`` on: a view, never a copy (writes must reach the board)."""
    width = 1 + len(FIELDS)  # the rejection code, then the fields
    assert width <= AGREE_LINES * COUNTER_STRIDE, "the descriptor outgrew its board lines"
    flat = lines.reshape(-1)
    assert np.shares_memory(flat, lines), "the board's lines must be one contiguous block"
    return flat[first * COUNTER_STRIDE:first * COUNTER_STRIDE + width]
