"""What one run of the benchmark holds (:class:`Sweep`): its options, world, communicator,
memory space, reporter, algorithms, sizes and the rows so far. :func:`mpiring.bench.runner.setup`
builds it and :func:`mpiring.bench.runner.run_sweep` fills it. The modules that read a run
(:mod:`.summary`, :mod:`.rowmaker`, :mod:`.rivals.points`) are handed one; its type lives here,
below the runner, so that none of them imports the runner.

A row's calls go to the main communicator, naming the row itself, or, for a row of
:data:`~mpiring.bench.algorithms.VARIANTS` (``auto-reproducible``), to that row's own
communicator, naming its algorithm: :func:`target` says which, for every caller.

Every row goes to :meth:`Sweep.add`, which marks a row whose repetitions spread too far
(``noisy``) and hands it to the run's sink (rank 0's files, appended as each point completes).
Before every point the sweep asks ``Sweep.stop`` (when set; collective) whether to stop
(:meth:`Sweep.should_stop`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .algorithms import VARIANTS, is_batched
from .collectives import ALLREDUCE
from .measure import Point
from .results import Row, spread_is_wide

if TYPE_CHECKING:  # annotations only
    from .cli import BenchOptions
    from .report import Reporter


@dataclass
class Sweep:
    """Everything one run needs; built by :func:`mpiring.bench.runner.setup`."""

    opts: BenchOptions
    world: Any
    comm: Any
    space: Any
    reporter: Reporter
    mode: str  # "gpu" or "host"
    algos: list[str]
    baseline: str
    sizes: list[tuple[int, int]]
    dtype: Any
    note: str = ""  # why a host run benchmarks the host (for the banner)
    overlap: Any = None  # an overlap_run.OverlapMeasurer with --overlap
    overlap_line: str = ""  # what the overlap shapes are, for the banner
    rows: list[Row] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # algorithm -> why (found running)
    # A variant's communicator may refuse one collective and run another (reproducible=True:
    # GPU Reduce_scatter_block, Allgather): (collective, row) -> why (found running).
    refused: dict[tuple[str, str], str] = field(default_factory=dict)
    inapplicable: set[str] = field(default_factory=set)  # algorithms already noted n/a
    sink: Callable[[Row], None] | None = None  # called with every row as it is made
    # Per collective (--collective, in order): its algorithms and its (bytes, count) sizes;
    # ``algos`` and ``sizes`` above are their union and the first collective's sizes.
    algos_of: dict[str, list[str]] = field(default_factory=dict)
    sizes_of: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    left_out: tuple[str, ...] = ()  # node-scoped rows left out: the communicator spans nodes
    nodes: int = 1  # nodes the communicator spans
    rivals: Any = None  # a rivals.runtime.RivalSet when the sweep holds rivals
    skipped: dict[str, str] = field(default_factory=dict)  # rivals that cannot run here -> why
    # Collective, asked before every point: the signal to stop for ("" to go on); None: never.
    stop: Callable[[], str] | None = None
    stopped: str = ""  # the signal the sweep stopped for ("" while it runs, or once complete)
    # Row of algorithms.VARIANTS -> its communicator, made only where the sweep holds the row.
    variants: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        """Collective: the overlap's GEMM gate, the rivals, then the communicators."""
        if self.overlap is not None:
            self.overlap.close()  # the GEMM stream's start gate (pinned memory)
        if self.rivals is not None:
            self.rivals.close()
        self.comm.close()
        for comm in self.variants.values():
            comm.close()

    @property
    def rank(self) -> int:
        return int(self.world.rank)

    def add(self, row: Row) -> None:
        """Record ``row`` (marked ``noisy`` where its repetitions spread too far), and hand it
        to the sink at once."""
        row.noisy = spread_is_wide(row)
        self.rows.append(row)
        if self.sink is not None:
            self.sink(row)

    def gone(self, p: Point) -> str | None:
        """Why ``p``'s row cannot run here, as an earlier point found (None: it may): for the
        whole run, or for ``p``'s collective where a variant's communicator refused it."""
        why = self.unavailable.get(p.algo)
        return why if why is not None else self.refused.get((p.collective, p.algo))

    def give_up(self, p: Point, why: str) -> None:
        """Remember that ``p``'s row cannot run here (:meth:`gone`): a row of the main
        communicator for the whole run, a variant's for ``p``'s collective."""
        if p.algo in VARIANTS:
            self.refused[(p.collective, p.algo)] = why
        else:
            self.unavailable[p.algo] = why

    def should_stop(self) -> bool:
        """Collective: whether to stop before the next point (``stop`` says so; remembered
        in ``stopped``)."""
        if not self.stopped and self.stop is not None:
            self.stopped = self.stop()
        return bool(self.stopped)

    @property
    def collectives(self) -> list[str]:
        return list(self.algos_of) or [ALLREDUCE]

    def points_of(self, nbytes: int, count: int, collective: str = ALLREDUCE) -> list[Point]:
        pts = []
        for algo in self.algos_of.get(collective, self.algos):
            for b in (self.opts.batches if is_batched(algo) else (None,)):
                for place in self.opts.placements:
                    pts.append(Point(nbytes, count, self.opts.dtype, self.opts.op, algo, b,
                                     place, collective))
        return pts


def target(sw: Any, name: str) -> tuple[Any, str]:
    """The communicator row ``name``'s calls go to, and the algorithm they name: a variant's
    own communicator and algorithm (``auto-reproducible``: ``auto`` on the communicator made
    with ``reproducible=True``), else the main communicator and ``name`` itself. ``sw`` is the
    run's :class:`Sweep`."""
    variant = VARIANTS.get(name)
    if variant is None:
        return sw.comm, name
    return sw.variants[name], variant.algorithm
