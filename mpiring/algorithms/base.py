"""What an algorithm is: one record (:class:`Algorithm`) in the table of ``mpiring.algorithms``.

An algorithm module defines a ``run(backend, call)`` (the allreduce; ``reduce_scatter`` and
``allgather`` where it has them) and one ``ROW``; the table lists the rows.
Everything else — dispatch, ``auto``'s candidates, the agreement check's codes, the bench's
``--algo`` choices, the tuner, the README's table — reads the rows, so adding an algorithm is
one module plus one row (or :func:`mpiring.algorithms.register` at run time).

Reference semantics of every row's entries, as plain code (what each rank's ``recv`` holds
afterwards, whatever the algorithm; ``send`` is ``recv`` itself when ``call.send`` is None)::

    total = functools.reduce(op.ufunc, [send_of_rank(q) for q in range(size)])
    run:             recv[:] = total                                   # allreduce
    reduce_scatter:  recv[:m] = total[rank * m:(rank + 1) * m]         # m = len(total) // size
    allgather:       recv[:] = numpy.concatenate([send_of_rank(q) for q in range(size)])
                     # in place: rank q's block is recv[q * m:(q + 1) * m] on rank q
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from ..core.buffers import Memory
from ..core.collective import Call, Collective

if TYPE_CHECKING:
    from ..context.base import Backend
    from ..cuda.grids import GridLimits


class Scope(enum.Enum):
    """Which communicators a row runs on."""

    NODE = "node"  # every rank on one node: it moves data through node memory (IPC, shared memory)
    ANY = "any"  # any communicator, on one node or many


Run = Callable[["Backend", Call], None]
# Size limit in bytes for one call on this backend (None: no limit).
Limit = Callable[["Backend"], "int | None"]
# Mini-batches a call of (count, dtype, asked) runs with, on this backend.
Batches = Callable[["Backend", int, np.dtype, "int | None"], int]
# Extra argument checks of one algorithm: raise InvalidArgumentError naming the problem.
Check = Callable[["Backend", Call], None]


@dataclass(frozen=True)
class CallShape:
    """What a row's SM statement (:attr:`Algorithm.sm_work`) reads: one allreduce of ``count``
    elements of ``dtype`` over the ``ranks`` ranks of a node (``comm_ranks``: of the whole
    communicator, for rows that span nodes; default ``ranks``), run in ``batches``
    mini-batches (rows that have them; else None), on a communicator whose kernels' grids
    ``grids`` bounds (None: host memory, or not known). Buffers are taken as 16-byte aligned,
    as allocators give them."""

    memory: Memory
    ranks: int
    count: int
    dtype: np.dtype
    batches: int | None = None
    grids: GridLimits | None = None
    comm_ranks: int | None = None

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.count * self.itemsize


@dataclass(frozen=True)
class SmWork:
    """The SM work of one allreduce call, as its row states it.

    Attributes:
        blocks: the most thread blocks any of the row's kernels launches for the call, on any
            rank: 0 where copy engines (or the host) do all the work; None where mpiring cannot
            know (another library's kernels, or a grid bound it was not told).
        fold_traffic: bytes of memory the row's reduction ("fold") kernels read plus write on
            all ranks together, divided by the ranks and by the message's bytes: the per-rank
            memory traffic of reducing, per byte reduced. None: not known, or no byte reduced.
        device_sms: the SMs of the GPU the call runs on (None: not known; host memory).
    """

    blocks: int | None
    fold_traffic: float | None
    device_sms: int | None = None

    @property
    def sms(self) -> int | None:
        """The SMs the call's largest grid holds: ``min(blocks, device_sms)`` (a block runs on
        one SM, and the GPU spreads a grid's first blocks over distinct SMs, so a grid of
        fewer blocks than SMs holds as many SMs as blocks, a larger one every SM); 0 where no
        kernel runs; None where the grid or the GPU's SM count is not known."""
        if self.blocks == 0:
            return 0
        if self.blocks is None or self.device_sms is None:
            return None
        return min(self.blocks, self.device_sms)


# What a row states of one call's SM work (:class:`SmWork`) from the call's shape.
StateSmWork = Callable[[CallShape], SmWork]
# The call's allreduce with every argument fixed: calling the result enqueues it again, on the
# caller's stream (the eager fast path, mpiring.call.replay).
Bind = Callable[["Backend", Call], Callable[[], None]]


@dataclass(frozen=True)
class Algorithm:
    """One row of the algorithm table.

    Attributes:
        name: what users pass as ``algorithm=`` (and ``--algo`` in the bench).
        code: its wire code in the agreement check: unique, never reused, never 0.
        memory: the kinds of memory it reduces (host arrays, GPU arrays, or both).
        run: ``run(backend, call)``: enqueue (GPU) or do (host) the allreduce.
        summary: one line for the README's table: what it does.
        best_for: one line for the README's table: when to use it.
        batches: for algorithms that cut calls into mini-batches, the rule of how many.
        graph_capturable: whether its GPU calls may be captured into a CUDA graph.
        limit: the largest message it takes on a backend, in bytes (None: no limit).
        check: further checks of a call's arguments (e.g. a dtype it cannot reduce).
        auto: whether ``algorithm="auto"`` may pick it (a tuning-table candidate).
        baseline: not mpiring's own algorithm (NCCL, MPI): the bench measures it for reference.
        scope: ``Scope.NODE`` if it runs only where every rank is on one node.
        reduce_scatter: ``run`` of ``Reduce_scatter_block``, if the row has one.
        allgather: ``run`` of ``Allgather``, if the row has one.
        averages: its entries take ``Op.AVG`` themselves (NCCL's ``ncclAvg``); for the other
            rows the dispatcher runs ``SUM`` and then divides the result by the rank count.
        nccl: it runs on NCCL communicators of every rank (unavailable where NCCL cannot run:
            several ranks on one GPU).
        lazy: it makes per-communicator resources at its first call (NCCL's communicator),
            which cannot happen while a CUDA graph is being captured: auto's graph entries
            pick it only once it ran outside a capture.
        gpu_check: its kernels check on the GPU that every rank runs the same call
            (``csrc/agree.cuh``), so the agreement check does not wait on the host for it.
        bind: ``bind(backend, call)``: its allreduce of ``call`` with every argument fixed, as
            a callable that enqueues that allreduce again (on the caller's stream) and does
            exactly what ``run(backend, call)`` would: the eager fast path replays it for
            later calls of the same shape (:mod:`mpiring.call.replay`). None: every call runs ``run``.
        rank_ordered: every element it reduces is the ranks' values folded in rank order,
            accumulated in float32 for 2-byte floats and rounded once — exactly
            :func:`mpiring.core.reproducible.reference`, whatever the size, chunking or placement —
            so ``reproducible=True`` may run it (and only such rows).
        sm_work: what one allreduce of a shape (:class:`CallShape`) holds of the GPU's SMs
            and how much memory its folds move per byte (:class:`SmWork`), computed with the
            grid rules its launchers use (:mod:`mpiring.cuda.grids`); None: not stated (the
            bench shows "-").
    """

    name: str
    code: int
    memory: frozenset[Memory]
    run: Run
    summary: str
    best_for: str
    batches: Batches | None = None
    graph_capturable: bool = False
    limit: Limit | None = None
    check: Check | None = None
    auto: bool = False
    baseline: bool = False
    scope: Scope = Scope.NODE
    reduce_scatter: Run | None = None
    allgather: Run | None = None
    averages: bool = False
    nccl: bool = False
    lazy: bool = False
    gpu_check: bool = False
    bind: Bind | None = None
    rank_ordered: bool = False
    sm_work: StateSmWork | None = None

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.lower() or self.name == "auto":
            raise ValueError(f"algorithm name {self.name!r} must be lower case and not 'auto'")
        if not 0 < self.code < 1 << 31:
            raise ValueError(f"algorithm {self.name!r}: wire code {self.code} must be positive")
        if not self.memory:
            raise ValueError(f"algorithm {self.name!r} serves no kind of memory")

    @property
    def batched(self) -> bool:
        return self.batches is not None

    def runner(self, collective: Collective) -> Run | None:
        """The entry that runs ``collective``, or None if this row lacks it."""
        return {Collective.ALLREDUCE: self.run, Collective.REDUCE_SCATTER: self.reduce_scatter,
                Collective.ALLGATHER: self.allgather}[collective]

    def collectives(self) -> tuple[Collective, ...]:
        return tuple(c for c in Collective if self.runner(c) is not None)

    def runs_on(self, nodes: int) -> bool:
        """Whether it can run on a communicator spanning ``nodes`` nodes."""
        return self.scope is Scope.ANY or nodes == 1

    def serves(self, memory: Memory) -> bool:
        return memory in self.memory

    def unavailable(self, backend: Backend) -> str | None:
        """Why this row cannot run on ``backend`` although it serves its memory, or None."""
        if self.nccl:
            why = backend.nccl_unavailable()
            if why is not None:
                return f"algorithm {self.name!r} runs on NCCL, and {why}: use mpiring's own rows"
        return None

    def max_bytes(self, backend: Backend) -> int | None:
        return None if self.limit is None else self.limit(backend)

    def state_sm_work(self, backend: Backend, count: int, dtype: np.dtype,
                      batches: int | None = None) -> SmWork | None:
        """What this row states of an allreduce of ``count`` elements of ``dtype`` on ``backend``
        (``batches``: as asked; the row's rule picks the count it runs), or None if it states nothing."""
        if self.sm_work is None:
            return None
        dtype = np.dtype(dtype)
        ran = None if self.batches is None else self.batches(backend, count, dtype, batches)
        grids = backend.grids
        work = self.sm_work(CallShape(backend.memory, backend.node_size, count, dtype, ran, grids,
                                      backend.size))
        # The row states its grid; the GPU's SM count, known to the communicator, says what it holds.
        return work if grids is None else replace(work, device_sms=grids.device_sms)

    def describe_memory(self) -> str:
        return " and ".join({Memory.CUDA: "GPU", Memory.HOST: "host"}[m] for m in sorted(self.memory,
                                                                                      reverse=True))


HOST = frozenset({Memory.HOST})
GPU = frozenset({Memory.CUDA})
BOTH = frozenset({Memory.HOST, Memory.CUDA})


