"""``ring-events``: the seed's design of the ring, kept as a variant to measure against.

The same double-buffered schedule and pipeline as ``ring``, signalled the seed's way:
receive slots **and interprocess events** exported through CUDA IPC
(``cudaIpcGetMemHandle``/``cudaIpcGetEventHandle``, exchanged in the staging's one
allgather), each signal an ``cudaEventRecord`` on the sender's stream, each wait a
``cudaStreamWaitEvent`` on the peer's event, ordered by the host through counters in node
shared memory (a wait on an event must be enqueued after the record it means). The host
therefore follows the pipeline step by step; see ``mpiring/ring/transports/cuda_events.py``.
Its folds and copies are the ring's kernels on the same plan: the same SM work (``ring.sm_work``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import GPU, Algorithm, Call, Collective
from .ring import batches, sm_work

if TYPE_CHECKING:
    from ..context.base import Backend


def run(backend: Backend, call: Call) -> None:
    backend.run_ring(call, Collective.ALLREDUCE, events=True)


def reduce_scatter(backend: Backend, call: Call) -> None:
    backend.run_ring(call, Collective.REDUCE_SCATTER, events=True)


def allgather(backend: Backend, call: Call) -> None:
    backend.run_ring(call, Collective.ALLGATHER, events=True)


ROW = Algorithm(
    "ring-events", 8, GPU, run,
    summary="the same ring, signalled the seed's way: interprocess CUDA events, host-ordered "
            "`cudaStreamWaitEvent`",
    best_for="comparison with `ring` (the seed's design)",
    batches=batches, reduce_scatter=reduce_scatter, allgather=allgather, sm_work=sm_work,
)
