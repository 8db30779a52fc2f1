"""Which algorithms the benchmark runs, and in which order, derived from the communicator's
own lists (:data:`~mpiring.communicator.CUDA_ALGORITHMS`, ``HOST_ALGORITHMS``, ``ALGORITHMS``),
so a new algorithm there shows up here without a copy to update.

Order of a sweep: the reference first (speed-ups are against it: ncclAllReduce on GPUs,
MPI.Allreduce on the host), then the other baselines, then mpiring's algorithms in the
communicator's order, then ``auto`` (GPU sweeps only: on the host ``auto`` means ``ring``, so it
runs there only when asked for with ``--algo``).
"""

from __future__ import annotations

from ..communicator import ALGORITHMS, CUDA_ALGORITHMS, HOST_ALGORITHMS

AUTO = "auto"
# Not mpiring's own: listed first, the first one present being the reference.
BASELINES = ("nccl", "nccl-ring", "mpi")
# Algorithms that take a mini-batch count (the others run once per size).
BATCHED = tuple(a for a in ("ring", "nccl-ring") if a in ALGORITHMS)
ALL = tuple(ALGORITHMS)


def default_sweep(gpu: bool) -> tuple[str, ...]:
    """The algorithms a run on GPU (or host) arrays measures when ``--algo`` is not given."""
    native = CUDA_ALGORITHMS if gpu else HOST_ALGORITHMS
    first = [a for a in BASELINES if a in native]
    rest = [a for a in native if a not in first]
    auto = [AUTO] if gpu and AUTO in ALGORITHMS else []
    return tuple(first + rest + auto)


def runnable(gpu: bool) -> tuple[str, ...]:
    """Every algorithm that can reduce GPU (or host) arrays: the default sweep, plus ``auto``."""
    sweep = default_sweep(gpu)
    return sweep + ((AUTO,) if AUTO in ALGORITHMS and AUTO not in sweep else ())


def reference(gpu: bool) -> str:
    """The baseline speed-ups are computed against."""
    return default_sweep(gpu)[0]
