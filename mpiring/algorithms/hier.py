"""``hier``: the hierarchical allreduce, for communicators that span nodes (what ``auto`` runs
there).

Inside each node the ring reduce-scatters over the node's ranks (each rank ends with 1/L of
the node's sum), an existing engine allreduces that shard between nodes along the rank's
*rail* (the ranks at the same place on every node: NCCL or a CUDA-aware MPI for GPU arrays,
MPI for host arrays), and the ring all-gathers inside the node. On GPUs the message goes in
pieces (``batches=``: 1 turns the pipelining off) so that the network carries one piece while
the copy engines reduce-scatter the next; see ``mpiring/context/gpu_hier.py``.

Nodes of different sizes cannot line their shards up: there the GPU runs a flat
``ncclAllReduce`` over every rank, and the host a ring allreduce in each node, the node
leaders' ``MPI_Allreduce`` and a broadcast from the leader in each node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..core.buffers import Memory
from ..core.errors import InvalidArgumentError
from .base import BOTH, Algorithm, Call, Scope

if TYPE_CHECKING:
    from ..context.base import Backend


def run(backend: Backend, call: Call) -> None:
    backend.run_hier(call)


def pieces(backend: Backend, count: int, dtype: np.dtype, asked: int | None) -> int:
    return backend.hier_pieces(count, dtype, asked)


def check(backend: Backend, call: Call) -> None:
    if backend.memory is Memory.HOST and call.recv.dtype.name == "bfloat16":
        raise InvalidArgumentError("algorithm 'hier' cannot reduce bfloat16 host arrays between nodes "
                                   "(MPI has no bfloat16 type): use float32, or GPU arrays")


ROW = Algorithm(
    "hier", 9, BOTH, run,
    summary="ring reduce-scatter in each node, NCCL / MPI allreduce between nodes on each rank's "
            "rail, ring all-gather in each node; pipelined in pieces",
    best_for="communicators that span nodes",
    batches=pieces, check=check, scope=Scope.ANY,
)
