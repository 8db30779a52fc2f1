"""The sweep's side of the rivals: start them once the sweep is known (``start_rivals``), and
measure one rival point the way every row is measured (``measure_rival``): the rival's call
replaces the communicator's in the same :class:`~mpiring.bench.measure.PointMeasurer` (check
on poisoned output, warm-up, eager or graph timing, the ranks' agreement at every stage).

``sw`` is the run's :class:`~mpiring.bench.sweep.Sweep`; only its attributes are used.
"""

from __future__ import annotations

from typing import Any

from ...node.timeouts import TimeoutPolicy
from ..collectives import ALLREDUCE
from ..measure import Outcome, Point, PointMeasurer, StageFailed, agree
from ..sizes import format_size
from . import is_rival
from .base import RivalContext


def context(sw: Any) -> RivalContext:
    """The run's facts the rivals are set up with (their buffers: the largest allreduce)."""
    counts = [count for _, count in sw.sizes_of.get(ALLREDUCE, [])] or [1]
    return RivalContext(max_count=max(counts), dtype=sw.dtype, op=sw.opts.op, rank=sw.rank,
                        size=sw.world.size, nodes=sw.nodes,
                        timeout=TimeoutPolicy.resolve(sw.opts.timeout).seconds)


def start_rivals(sw: Any, make: Any = None) -> None:
    """Collective: set up the sweep's rivals; those that cannot run here are ``sw.skipped``
    (name -> one-line reason) and their rows "unavailable"."""
    from .runtime import RivalSet

    sw.rivals = RivalSet()
    wanted = [a for a in sw.algos if is_rival(a)]
    sw.skipped = sw.rivals.start(sw.world, wanted, context(sw), make)
    sw.unavailable.update(sw.skipped)


def measure_rival(sw: Any, measurer: PointMeasurer, p: Point, bufs: Any) -> Outcome:
    """Collective: one point of a rival. A point the rival refuses is n/a; a rival that errs is
    not used again in this run (its library's state is unknown after it), and mpiring's
    communicator, which did not take part, is kept."""
    name = p.algo
    try:
        call = agree(sw.world, lambda: sw.rivals.call(name, bufs, p.placement == "in"))
    except StageFailed as err:
        out = Outcome(err.status, "-", note=err.errors[0], errors=err.errors)
    else:
        out = measurer.measure(p, bufs, call=call, capture=sw.rivals.capture(name))
    if out.status == "error":
        sw.rivals.abandon(name)
        sw.unavailable[name] = f"stopped after an error at {format_size(p.nbytes)}"
    out.needs_rebuild = False
    return out
