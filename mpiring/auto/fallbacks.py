"""Where ``algorithm="auto"`` goes when the tuning table does not decide, as data (read by
:mod:`mpiring.call.dispatch`; every name is a row of :mod:`mpiring.algorithms`, which a test
checks). Pure.

Reference semantics, as plain code (``nodes``, ``size``: the communicator's)::

    if nodes > 1:   ACROSS_NODES if allreduce else ACROSS_NODES_OTHER[memory]
    elif host memory or not allreduce:
                    WHILE_CAPTURING if capturing a CUDA graph (and it can run) else the first candidate
    elif size == 1: ONE_RANK[0] if nbytes <= ONE_RANK_BYTES else ONE_RANK[1]
    else:           the table's pick
    then, for GPU allreduce, the first of (pick, *THEN, *candidates) that can take the call
"""

from __future__ import annotations

from ..core.buffers import Memory

ACROSS_NODES = "hier"  # allreduce on a communicator that spans nodes
ACROSS_NODES_OTHER = {Memory.CUDA: "nccl", Memory.HOST: "mpi"}  # the other collectives there
WHILE_CAPTURING = "nccl"  # GPU reduce-scatter / all-gather inside a CUDA graph (the ring cannot be)
ONE_RANK_BYTES = 4 << 20  # one rank: a copy, one kernel launch up to here ...
ONE_RANK = ("twoshot", "nccl")  # ... else NCCL's copy
THEN = ("twoshot", "nccl")  # where the pick cannot take a call (its size limit, a capture)


def names() -> tuple[str, ...]:
    """Every row named here."""
    return (ACROSS_NODES, *ACROSS_NODES_OTHER.values(), WHILE_CAPTURING, *ONE_RANK, *THEN)
