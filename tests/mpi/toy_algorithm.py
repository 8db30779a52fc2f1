"""A toy algorithm, as a contributor would add one: one module and one row.

"reduce then broadcast through rank 0": ``MPI.Reduce`` to rank 0, then ``MPI.Bcast``. Host
arrays only. The test that registers it (test_mpi_toy_algorithm.py) touches no other file.
"""

from __future__ import annotations

from mpi4py import MPI

from mpiring.algorithms import HOST, Algorithm, Call


def run(backend, call: Call) -> None:
    comm, recv = backend.comm, call.recv
    op = getattr(MPI, call.op.row.mpi)
    if comm.rank == 0:
        comm.Reduce(MPI.IN_PLACE if call.send is None else call.send.array, recv.array, op=op, root=0)
    else:
        comm.Reduce(call.source.array, None, op=op, root=0)
    comm.Bcast(recv.array, root=0)


ROW = Algorithm("toy-reduce-bcast", 99, HOST, run, summary="MPI.Reduce to rank 0, then MPI.Bcast",
                best_for="a test of the algorithm table")
