"""The per-call agreement check: one small ``MPI_Allreduce`` that makes every rank see the same
verdict, so bad input on one rank becomes an error on all ranks instead of a hang.

Each rank contributes, for every field, ``(value, -value)``; a MAX reduction then yields the
largest and (negated) smallest value of every field at once. A rank whose own arguments were
rejected contributes its rank + 1 in the first field. Cost: one allreduce of a few int64s
(microseconds on one node); switch it off with ``check=False`` or ``MPIRING_CHECK=0``.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from .errors import PeerArgumentError, RankMismatchError

FIELDS = ("count", "dtype", "op", "algorithm", "batches", "memory")


class AgreementCheck:
    """Reusable buffers for the check, made once per communicator."""

    def __init__(self, comm: MPI.Intracomm) -> None:
        self.comm = comm
        self._send = np.zeros(1 + 2 * len(FIELDS), dtype=np.int64)
        self._recv = np.zeros_like(self._send)

    def run(self, rejected: bool, values: dict[str, int]) -> None:
        """Raise on every rank if any rank rejected its arguments or the ranks disagree."""
        self._send[0] = self.comm.rank + 1 if rejected else 0
        for i, name in enumerate(FIELDS):
            v = values[name]
            self._send[1 + 2 * i] = v
            self._send[2 + 2 * i] = -v
        self.comm.Allreduce(self._send, self._recv, op=MPI.MAX)
        if rejected:
            return  # the caller raises its own, more precise error
        if self._recv[0]:
            raise PeerArgumentError(
                f"allreduce aborted on rank {self.comm.rank}: rank {self._recv[0] - 1} "
                "rejected its arguments (its own error says why)"
            )
        diffs = []
        for i, name in enumerate(FIELDS):
            hi, lo = int(self._recv[1 + 2 * i]), -int(self._recv[2 + 2 * i])
            if hi != lo:
                diffs.append(f"{name} (this rank {values[name]}, lowest {lo}, highest {hi})")
        if diffs:
            raise RankMismatchError(
                f"ranks called allreduce with different arguments: {'; '.join(diffs)}. Every rank "
                "must pass the same count, dtype, op, algorithm, batches and memory kind"
            )
