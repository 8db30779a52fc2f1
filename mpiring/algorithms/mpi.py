"""``mpi``: ``MPI.Allreduce`` (``Reduce_scatter_block``, ``Allgather``) on host arrays, the host
baseline, on any number of nodes.

One blocking MPI call, MPI's own algorithm (a polled nonblocking one would run another): the
timeout does not bound it, since nothing outside it can see its progress or interrupt it. The
agreement check before it is bounded, and catches a rank that does not come."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpi4py import MPI

from ..core.errors import InvalidArgumentError
from ..core.mpi_ops import mpi_op
from .base import HOST, Algorithm, Call, Scope

if TYPE_CHECKING:
    from ..context.base import Backend


def _send(call: Call):
    return MPI.IN_PLACE if call.send is None else call.send.array


def run(backend: Backend, call: Call) -> None:
    backend.comm.Allreduce(_send(call), call.recv.array, op=mpi_op(call.op, call.recv.dtype))


def reduce_scatter(backend: Backend, call: Call) -> None:
    backend.comm.Reduce_scatter_block(_send(call), call.recv.array, op=mpi_op(call.op, call.recv.dtype))


def allgather(backend: Backend, call: Call) -> None:
    backend.comm.Allgather(_send(call), call.recv.array)


def check(backend: Backend, call: Call) -> None:
    if call.recv.dtype.name == "bfloat16":
        raise InvalidArgumentError("algorithm 'mpi' cannot reduce bfloat16 (MPI has no bfloat16 type): "
                                   "use algorithm='ring'")


ROW = Algorithm("mpi", 4, HOST, run, summary="`MPI.Allreduce`", best_for="baseline", check=check,
                baseline=True, scope=Scope.ANY, reduce_scatter=reduce_scatter, allgather=allgather)
