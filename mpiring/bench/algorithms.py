"""Which algorithms the benchmark runs, and in which order, read from the algorithm table
(:mod:`mpiring.algorithms`), so a new row shows up here without a copy to update.

Order of a sweep: the reference first (speed-ups are against it by default: for the
allreduce the direct row, ``ncclAllReduce`` on CuPy's NCCL communicator on GPUs
(``nccl-direct``), mpi4py's ``Comm.Allreduce`` on the host (``mpi-direct``), nothing of mpiring
on their path; for reduce-scatter and all-gather, which have no direct rows, NCCL's / MPI's
through mpiring), then the table's baselines (``nccl``, ``nccl-ring``, ``mpi``: the same library
calls through ``mpiring.Communicator``, right after the direct row, which they replace as the
reference where it cannot run: :mod:`mpiring.bench.baseline`), then the other rivals (other
libraries' allreduce: :mod:`mpiring.bench.rivals`; allreduce only), then mpiring's algorithms
in table order, then
``auto`` (GPU sweeps only: on the host ``auto`` means ``ring``, so it runs there only when
asked for with ``--algo``), then ``auto-reproducible`` where asked for (``--reproducible``, or
``--algo``: :data:`VARIANTS`). A collective's sweep holds the rows that implement it; on a
communicator that spans nodes, rows that need every rank on one node (``Scope.NODE``, or a
rival's ``node_only``) are left out (:func:`node_only`). ``--baseline`` moves its row first
(:func:`baseline_first`), so every row's speed-up is known when the row is printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import algorithms
from ..algorithms import Algorithm
from ..core.buffers import Memory
from . import rivals
from .collectives import ALLREDUCE, kind

AUTO = algorithms.AUTO
AUTO_REPRODUCIBLE = "auto-reproducible"


@dataclass(frozen=True)
class Variant:
    """A bench row whose calls name ``algorithm`` on a second communicator of the run, made
    like the main one (same timeout, SM budget, overlap) with ``settings`` added
    (``Communicator`` keyword arguments)."""

    algorithm: str
    settings: Mapping[str, Any]
    summary: str  # what the row is, for the banner


# Rows that call an algorithm through another communicator than the bench's main one: row name
# -> its Variant. Every other row's calls name the row itself, on the main communicator;
# :func:`mpiring.bench.sweep.target` turns a row's name into (communicator, algorithm).
VARIANTS: dict[str, Variant] = {
    AUTO_REPRODUCIBLE: Variant(AUTO, {"reproducible": True},
                               "auto on a second communicator made with reproducible=True: every "
                               "result reduced in rank order, the same bits at every size "
                               "(docs/reproducible.md)"),
}


def algorithm_of(name: str) -> str:
    """The algorithm row ``name``'s calls name: a variant's (``auto-reproducible``: ``auto``),
    else ``name`` itself."""
    variant = VARIANTS.get(name)
    return variant.algorithm if variant is not None else name


def picks_per_size(name: str) -> bool:
    """Whether row ``name`` runs what ``auto`` picks at each size (``auto`` and its variants):
    no mini-batches of its own, and no baseline, since ratios against it would compare with
    different rows."""
    return algorithm_of(name) == AUTO


def all_names() -> tuple[str, ...]:
    """Every name ``--algo`` accepts: the table's rows, the rivals, then ``auto`` and its
    variants."""
    rows = algorithms.names(with_auto=False)
    return rows + rivals.names() + (AUTO, *VARIANTS)


def is_batched(name: str) -> bool:
    """Whether ``name`` takes a mini-batch count (the others run once per size)."""
    return (not picks_per_size(name) and not rivals.is_rival(name)
            and algorithms.get(algorithm_of(name)).batched)


def graph_capturable(name: str) -> bool:
    """Whether ``name``'s calls can be captured into a CUDA graph (``auto`` and its variants:
    yes, it picks only capturable rows while capturing)."""
    if picks_per_size(name):
        return True
    if rivals.is_rival(name):
        return rivals.get(name).graph_capturable
    return algorithms.get(name).graph_capturable


def _rivals(gpu: bool, collective: str, nodes: int | None) -> list[str]:
    """The rivals of a sweep (allreduce only), those that run on ``nodes`` (None: any)."""
    if collective != ALLREDUCE:
        return []
    specs = [rivals.get(n) for n in rivals.names(rivals.GPU if gpu else rivals.HOST)]
    return [p.name for p in specs if nodes is None or p.runs_on(nodes)]


def _direct(gpu: bool, collective: str, nodes: int | None, baselines: Sequence[str]) -> list[str]:
    """The rivals of a sweep that call one of the table's ``baselines`` directly (``wraps``)."""
    return [n for n in _rivals(gpu, collective, nodes) if rivals.wrapped(n) in baselines]


def _rows(gpu: bool, collective: str) -> list[Algorithm]:
    memory = Memory.CUDA if gpu else Memory.HOST
    return [a for a in algorithms.rows() if a.serves(memory) and a.runner(kind(collective))]


def default_sweep(gpu: bool, collective: str = ALLREDUCE, nodes: int = 1) -> tuple[str, ...]:
    """The algorithms a run on GPU (or host) arrays measures for ``collective`` when ``--algo``
    is not given, on a communicator over ``nodes`` nodes."""
    rows = [a for a in _rows(gpu, collective) if a.runs_on(nodes)]
    first = [a.name for a in rows if a.baseline]
    rest = [a.name for a in rows if not a.baseline]
    direct = _direct(gpu, collective, nodes, first)
    others = [n for n in _rivals(gpu, collective, nodes) if n not in direct]
    return tuple(direct + first + others + rest + ([AUTO] if gpu else []))


def runnable(gpu: bool, collective: str = ALLREDUCE, nodes: int = 1) -> tuple[str, ...]:
    """Every algorithm that can run ``collective`` on GPU (or host) arrays: the default sweep,
    plus ``auto``, then its variants (right after it: ``auto-reproducible``; its communicator
    may refuse a call, and its rows then say why)."""
    sweep = default_sweep(gpu, collective, nodes)
    return sweep + ((AUTO,) if AUTO not in sweep else ()) + tuple(VARIANTS)


def implements(name: str, collective: str) -> bool:
    """Whether ``name`` runs ``collective`` (``auto`` and its variants run every one; rivals
    allreduce only)."""
    if rivals.is_rival(name):
        return collective == ALLREDUCE
    return picks_per_size(name) or algorithms.get(name).runner(kind(collective)) is not None


def node_only(gpu: bool, collective: str = ALLREDUCE) -> tuple[str, ...]:
    """The rows of ``collective``'s sweep that run only where every rank is on one node."""
    rows = [a.name for a in _rows(gpu, collective) if not a.runs_on(2)]
    scoped = [n for n in _rivals(gpu, collective, None) if not rivals.get(n).runs_on(2)]
    return tuple(rows + scoped)


def reference(gpu: bool, collective: str = ALLREDUCE) -> str:
    """The baseline speed-ups of ``collective`` are computed against by default: the first row
    of its sweep (for the allreduce, the direct row: ``nccl-direct``, ``mpi-direct``)."""
    return default_sweep(gpu, collective)[0]


def baseline_first(algos: Sequence[str], baseline: str) -> list[str]:
    """``algos`` with ``baseline`` moved to the front (added if missing): the baseline runs
    first at every size, so each row's speed-up over it is known when the row is made."""
    if not baseline:
        return list(algos)
    return [baseline] + [a for a in algos if a != baseline]
