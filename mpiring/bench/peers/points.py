"""The sweep's side of the peers: start them once the sweep is known (``start_peers``), and
measure one peer point the way every row is measured (``measure_peer``): the peer's call
replaces the communicator's in the same :class:`~mpiring.bench.measure.PointMeasurer` (check
on poisoned output, warm-up, eager or graph timing, the ranks' agreement at every stage).

``sw`` is the run's :class:`~mpiring.bench.runner.Sweep`; only its attributes are used.
"""

from __future__ import annotations

from typing import Any

from ...timeouts import TimeoutPolicy
from ..collectives import ALLREDUCE
from ..measure import Outcome, Point, PointMeasurer, StageFailed, agree
from ..sizes import format_size
from . import is_peer
from .base import PeerContext


def context(sw: Any) -> PeerContext:
    """The run's facts the peers are set up with (their buffers: the largest allreduce)."""
    counts = [count for _, count in sw.sizes_of.get(ALLREDUCE, [])] or [1]
    return PeerContext(max_count=max(counts), dtype=sw.dtype, op=sw.opts.op, rank=sw.rank,
                       size=sw.world.size, nodes=sw.nodes,
                       timeout=TimeoutPolicy.resolve(sw.opts.timeout).seconds)


def start_peers(sw: Any, make: Any = None) -> None:
    """Collective: set up the sweep's peers; those that cannot run here are ``sw.skipped``
    (name -> one-line reason) and their rows "unavailable"."""
    from .runtime import PeerSet

    sw.peers = PeerSet()
    wanted = [a for a in sw.algos if is_peer(a)]
    sw.skipped = sw.peers.start(sw.world, wanted, context(sw), make)
    sw.unavailable.update(sw.skipped)


def measure_peer(sw: Any, measurer: PointMeasurer, p: Point, bufs: Any) -> Outcome:
    """Collective: one point of a peer. A point the peer refuses is n/a; a peer that errs is
    not used again in this run (its library's state is unknown after it), and mpiring's
    communicator, which did not take part, is kept."""
    name = p.algo
    try:
        call = agree(sw.world, lambda: sw.peers.call(name, bufs, p.placement == "in"))
    except StageFailed as err:
        out = Outcome(err.status, "-", note=err.errors[0], errors=err.errors)
    else:
        out = measurer.measure(p, bufs, call=call, capture=sw.peers.capture(name))
    if out.status == "error":
        sw.peers.abandon(name)
        sw.unavailable[name] = f"stopped after an error at {format_size(p.nbytes)}"
    out.needs_rebuild = False
    return out
