"""``mpi``: ``MPI.Allreduce`` on host arrays, the host baseline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpi4py import MPI

from ..errors import InvalidArgumentError
from .base import HOST, Algorithm, Call

if TYPE_CHECKING:
    from ..backends.base import Backend


def run(backend: Backend, call: Call) -> None:
    send = MPI.IN_PLACE if call.send is None else call.send.array
    backend.comm.Allreduce(send, call.recv.array, op=getattr(MPI, call.op.row.mpi))


def check(backend: Backend, call: Call) -> None:
    if call.recv.dtype.name == "bfloat16":
        raise InvalidArgumentError("algorithm 'mpi' cannot reduce bfloat16 (MPI has no bfloat16 type): "
                                   "use algorithm='ring'")


ROW = Algorithm("mpi", 4, HOST, run, summary="`MPI.Allreduce`", best_for="baseline", check=check,
                baseline=True)
