"""Which algorithms the benchmark runs, and in which order, read from the algorithm table
(:mod:`mpiring.algorithms`), so a new row shows up here without a copy to update.

Order of a sweep: the reference first (speed-ups are against it: ncclAllReduce on GPUs,
MPI.Allreduce on the host), then the other baselines, then mpiring's algorithms in table
order, then ``auto`` (GPU sweeps only: on the host ``auto`` means ``ring``, so it runs there
only when asked for with ``--algo``).
"""

from __future__ import annotations

from .. import algorithms
from ..buffers import Memory

AUTO = algorithms.AUTO


def all_names() -> tuple[str, ...]:
    """Every name ``--algo`` accepts: the table's rows, then ``auto``."""
    return algorithms.names()


def is_batched(name: str) -> bool:
    """Whether ``name`` takes a mini-batch count (the others run once per size)."""
    return name != AUTO and algorithms.get(name).batched


def default_sweep(gpu: bool) -> tuple[str, ...]:
    """The algorithms a run on GPU (or host) arrays measures when ``--algo`` is not given."""
    memory = Memory.CUDA if gpu else Memory.HOST
    rows = [a for a in algorithms.rows() if a.serves(memory)]
    first = [a.name for a in rows if a.baseline]
    rest = [a.name for a in rows if not a.baseline]
    return tuple(first + rest + ([AUTO] if gpu else []))


def runnable(gpu: bool) -> tuple[str, ...]:
    """Every algorithm that can reduce GPU (or host) arrays: the default sweep, plus ``auto``."""
    sweep = default_sweep(gpu)
    return sweep + ((AUTO,) if AUTO not in sweep else ())


def reference(gpu: bool) -> str:
    """The baseline speed-ups are computed against."""
    return default_sweep(gpu)[0]
