"""The row the speed-ups are against: ``--baseline NAME``, or by default the mode's reference.

The default is the plain library call, as its users make it: for the allreduce the direct rows
(:mod:`mpiring.bench.rivals.direct_calls`), ``nccl-direct`` on GPUs (``ncclAllReduce`` on CuPy's NCCL
communicator) and ``mpi-direct`` on the host (mpi4py's ``Comm.Allreduce``), not the table's
``nccl`` and ``mpi`` rows, which make the same calls through ``mpiring.Communicator`` and so
pay mpiring's per-call work. Where the direct row cannot be the baseline, the row it wraps is
(:func:`~mpiring.bench.rivals.wrapped`): where the sweep holds the table's row and not the
direct one (``--algo nccl,ring``), where the direct row cannot run here (no NCCL in CuPy; a
type MPI lacks: found when the rivals start, :func:`fall_back`), and for runs that measure
reduce-scatter or all-gather, which have no direct rows (one baseline serves every collective
of a run).

Pure decisions, the same on every rank. A ``--baseline`` given on purpose must be able to run
every measured collective here (else :class:`~mpiring.bench.command.BenchError`, naming the
choices), runs even when ``--algo`` leaves it out, and is never replaced (a row that cannot
run here then gives no speed-ups); the default reference runs only where the sweep holds it
(``--algo ring`` alone has no speed-ups). Either way the baseline is measured first at every
size (:func:`~mpiring.bench.algorithms.baseline_first`), so each row's ratio (baseline median
time / its median time) is known when the row is printed, and it is written into every row
(the CSV/JSON ``baseline`` column), the table's header, the summary and the figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .algorithms import baseline_first, implements, node_only, picks_per_size, reference, runnable
from .command import BenchError
from .rivals import wrapped


def default(gpu: bool, collectives: Sequence[str]) -> str:
    """The mode's reference for a run of ``collectives``: the first collective's reference
    that runs them all (the direct row where the run measures the allreduce alone, else the
    table's ``nccl`` or ``mpi``)."""
    refs = [reference(gpu, c) for c in collectives]
    return next((r for r in refs if all(implements(r, c) for c in collectives)), refs[0])


def choose(asked: str | None, gpu: bool, collectives: Sequence[str], nodes: int = 1) -> str:
    """The baseline's name: ``asked`` (checked) or the mode's reference (:func:`default`)."""
    if not asked:
        return default(gpu, collectives)
    memory = "GPU" if gpu else "host"
    if not any(asked in runnable(gpu, c) for c in collectives) and all(
            implements(asked, c) for c in collectives):
        choices = dict.fromkeys(a for c in collectives for a in runnable(gpu, c)
                                if not picks_per_size(a))
        raise BenchError(f"--baseline {asked}: cannot reduce the {memory} arrays this run "
                         f"benchmarks; choose from {', '.join(choices)}")
    lacking = [c for c in collectives if not implements(asked, c)]
    if lacking:
        raise BenchError(f"--baseline {asked}: has no {' or '.join(lacking)}, so the "
                         f"{', '.join(lacking)} rows would have no ratio; drop those from "
                         "--collective or choose a baseline that runs every collective (e.g. "
                         f"{default(gpu, collectives)})")
    if nodes > 1 and asked in node_only(gpu):
        raise BenchError(f"--baseline {asked}: runs only where every rank is on one node, and "
                         f"this communicator spans {nodes} nodes; choose e.g. "
                         f"{default(gpu, collectives)}")
    return asked


def arrange(algos_of: dict[str, list[str]], baseline: str,
            asked: bool) -> tuple[dict[str, list[str]], str]:
    """Each collective's algorithms with the baseline first (added where ``asked``), and the
    run's baseline: a default reference the sweep does not hold gives way to the row it wraps
    where the sweep holds that one; "" when neither is in the sweep (no speed-ups)."""
    def held(name: str) -> bool:
        return bool(name) and any(name in algos for algos in algos_of.values())

    if not asked and not held(baseline):
        baseline = wrapped(baseline)
        if not held(baseline):
            return algos_of, ""
    return {c: baseline_first(algos, baseline) if asked or baseline in algos else algos
            for c, algos in algos_of.items()}, baseline


def fall_back(baseline: str, asked: bool, skipped: Mapping[str, str],
              algos_of: dict[str, list[str]]) -> tuple[dict[str, list[str]], str]:
    """Once the rivals are set up: a default baseline that cannot run here (``skipped``: rival
    -> why) gives way to the row it wraps where the sweep holds it, moved right after it so it
    is still measured before every other row of each size. Returns each collective's
    algorithms and the run's baseline (both unchanged otherwise: a ``--baseline`` given on
    purpose is never replaced)."""
    fallback = wrapped(baseline)
    if asked or baseline not in skipped or not any(fallback in a for a in algos_of.values()):
        return algos_of, baseline

    def moved(algos: list[str]) -> list[str]:
        if fallback not in algos or baseline not in algos:
            return algos
        rest = [a for a in algos if a != fallback]
        at = rest.index(baseline) + 1
        return rest[:at] + [fallback] + rest[at:]

    return {c: moved(algos) for c, algos in algos_of.items()}, fallback


def note(baseline: str, asked: bool, gpu: bool, collectives: Sequence[str],
         skipped: Mapping[str, str], algos: Sequence[str]) -> str:
    """Why a default baseline is the table's row and not the direct row that makes its call
    without mpiring ("" where it is not, or was asked for): the banner's words."""
    direct = reference(gpu)  # the allreduce's: nccl-direct, mpi-direct
    if asked or not baseline or baseline == direct or wrapped(direct) != baseline:
        return ""
    if direct in skipped:
        return f"{direct} cannot run here"
    lacking = [c for c in collectives if not implements(direct, c)]
    if lacking:
        return f"{direct} has no {' or '.join(lacking)}"
    return "" if direct in algos else f"the sweep leaves out {direct}"
