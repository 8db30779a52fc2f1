"""The row the speed-ups are against: ``--baseline NAME``, or by default the mode's reference
(``nccl`` on GPUs, ``mpi`` on the host).

Pure decisions, the same on every rank. A ``--baseline`` given on purpose must be able to run
every measured collective here (else :class:`~mpiring.bench.command.BenchError`, naming the
choices), and runs even when ``--algo`` leaves it out; the default reference runs only where
the sweep holds it (``--algo ring`` alone has no speed-ups). Either way the baseline is
measured first at every size (:func:`~mpiring.bench.algorithms.baseline_first`), so each
row's ratio (baseline median time / its median time) is known when the row is printed, and
it is written into every row (the CSV/JSON ``baseline`` column), the table's header, the
summary and the figures.
"""

from __future__ import annotations

from collections.abc import Sequence

from .algorithms import baseline_first, implements, node_only, picks_per_size, reference, runnable
from .command import BenchError


def choose(asked: str | None, gpu: bool, collectives: Sequence[str], nodes: int = 1) -> str:
    """The baseline's name: ``asked`` (checked) or the mode's reference."""
    if not asked:
        return reference(gpu)
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
                         f"{reference(gpu)})")
    if nodes > 1 and asked in node_only(gpu):
        raise BenchError(f"--baseline {asked}: runs only where every rank is on one node, and "
                         f"this communicator spans {nodes} nodes; choose e.g. {reference(gpu)}")
    return asked


def arrange(algos_of: dict[str, list[str]], baseline: str,
            asked: bool) -> tuple[dict[str, list[str]], str]:
    """Each collective's algorithms with the baseline first (added where ``asked``), and the
    run's baseline ("" when the default reference is not in the sweep: no speed-ups)."""
    if not asked and not any(baseline in algos for algos in algos_of.values()):
        return algos_of, ""
    return {c: baseline_first(algos, baseline) if asked or baseline in algos else algos
            for c, algos in algos_of.items()}, baseline
