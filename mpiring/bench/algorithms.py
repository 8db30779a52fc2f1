"""Which algorithms the benchmark runs, and in which order, read from the algorithm table
(:mod:`mpiring.algorithms`), so a new row shows up here without a copy to update.

Order of a sweep: the reference first (speed-ups are against it: ncclAllReduce on GPUs,
MPI.Allreduce on the host; NCCL's / MPI's reduce-scatter and all-gather for those
collectives), then the other baselines, then mpiring's algorithms in table order, then
``auto`` (GPU sweeps only: on the host ``auto`` means ``ring``, so it runs there only when
asked for with ``--algo``). A collective's sweep holds the rows that implement it; on a
communicator that spans nodes, rows that need every rank on one node (``Scope.NODE``) are
left out (:func:`node_only`).
"""

from __future__ import annotations

from .. import algorithms
from ..algorithms import Algorithm
from ..buffers import Memory
from .collectives import ALLREDUCE, kind

AUTO = algorithms.AUTO


def all_names() -> tuple[str, ...]:
    """Every name ``--algo`` accepts: the table's rows, then ``auto``."""
    return algorithms.names()


def is_batched(name: str) -> bool:
    """Whether ``name`` takes a mini-batch count (the others run once per size)."""
    return name != AUTO and algorithms.get(name).batched


def _rows(gpu: bool, collective: str) -> list[Algorithm]:
    memory = Memory.CUDA if gpu else Memory.HOST
    return [a for a in algorithms.rows() if a.serves(memory) and a.runner(kind(collective))]


def default_sweep(gpu: bool, collective: str = ALLREDUCE, nodes: int = 1) -> tuple[str, ...]:
    """The algorithms a run on GPU (or host) arrays measures for ``collective`` when ``--algo``
    is not given, on a communicator over ``nodes`` nodes."""
    rows = [a for a in _rows(gpu, collective) if a.runs_on(nodes)]
    first = [a.name for a in rows if a.baseline]
    rest = [a.name for a in rows if not a.baseline]
    return tuple(first + rest + ([AUTO] if gpu else []))


def runnable(gpu: bool, collective: str = ALLREDUCE, nodes: int = 1) -> tuple[str, ...]:
    """Every algorithm that can run ``collective`` on GPU (or host) arrays: the default sweep,
    plus ``auto``."""
    sweep = default_sweep(gpu, collective, nodes)
    return sweep + ((AUTO,) if AUTO not in sweep else ())


def implements(name: str, collective: str) -> bool:
    """Whether ``name`` runs ``collective`` (``auto`` runs every one)."""
    return name == AUTO or algorithms.get(name).runner(kind(collective)) is not None


def node_only(gpu: bool, collective: str = ALLREDUCE) -> tuple[str, ...]:
    """The rows of ``collective``'s sweep that run only where every rank is on one node."""
    return tuple(a.name for a in _rows(gpu, collective) if not a.runs_on(2))


def reference(gpu: bool, collective: str = ALLREDUCE) -> str:
    """The baseline speed-ups are computed against."""
    return default_sweep(gpu, collective)[0]
