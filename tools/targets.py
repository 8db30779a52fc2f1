"""Issue 28's small-message targets as committed benchmark runs measured them, so that a claim
about them (docs/results.md) is checked against the CSV, not read off a table::

    python -m tools.targets results/h200x2-small-43e05e3.csv results/h200x2-graph-small-43e05e3.csv
    python -m tools.targets            # every results/*small*.csv

Per CSV (its allreduce rows; of several rows of one algorithm at a size, the fastest), per size:
``auto``'s time (``time_us``, the slowest rank's median) and pick (``resolved``), the best peer
(the fastest rival row, :func:`mpiring.bench.rivals.is_rival`), best peer time / auto time
(above 1: auto is faster) and the best of mpiring's own rows (the others but ``auto``). Then the
targets: auto >= 0.95x the best peer at every size 1 KiB-1 MiB (the range of the ratio over all
sizes, and the sizes below 0.95); eager: at 8 KiB auto <= 8 us and auto / best peer <= 0.85;
``--graph``: over 1-64 KiB auto <= 4.5 us and auto / best peer <= 0.8 (the largest of each); and
the ``wrong`` column's total over the ok rows (must be 0). A size where auto or every peer has
no ok row is ``n/a``, left out of the ratios, and said so. Ranks, commit and timing come from
the JSON beside the CSV (``settings.timing``), else from the rows and the file name. Exit 0, or
2 for a file that is missing, is not a bench CSV or has no ``auto`` row.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from mpiring.bench.results import Row, read_csv
from mpiring.bench.rivals import is_rival
from mpiring.bench.sizes import format_size

AUTO = "auto"
KIB, MIB = 1 << 10, 1 << 20
PEER_RATIO_FLOOR, PEER_RATIO_SIZES = 0.95, (KIB, MIB)  # best peer / auto >= 0.95 at each size
EAGER_SIZE, EAGER_TIME_US, EAGER_SHARE = 8 * KIB, 8.0, 0.85  # auto / best peer <= 0.85
GRAPH_SIZES, GRAPH_TIME_US, GRAPH_SHARE = (KIB, 64 * KIB), 4.5, 0.8
DEFAULT_GLOB = "results/*small*.csv"
VALUE = itemgetter(1)  # of a (size, value) pair: what min and max compare


class Timed(NamedTuple):
    """The fastest ok row of a group at one size: its algorithm, time and (auto's) pick."""

    algo: str
    time_us: float
    pick: str


@dataclass(frozen=True)
class SizePoint:
    """One size of a run: auto's, the best peer's and the best own row (None: no ok row)."""

    size: int
    auto: Timed | None
    peer: Timed | None
    own: Timed | None

    @property
    def peer_over_auto(self) -> float | None:
        """Best peer time / auto time (above 1: auto is faster); None where either is n/a."""
        if self.auto is None or self.peer is None:
            return None
        return self.peer.time_us / self.auto.time_us


@dataclass(frozen=True)
class Run:
    """One CSV: where it came from, how it timed, its sizes and its ``wrong`` total."""

    path: Path
    nranks: str
    commit: str
    graph: bool
    timing_from: str
    stopped_early: bool
    points: list[SizePoint]
    wrong: int
    unchecked: int


def fastest(rows: Sequence[Row], wanted: Callable[[str], bool]) -> Timed | None:
    timed = [Timed(r.algo, r.time_us, r.resolved) for r in rows
             if r.status == "ok" and r.time_us is not None and wanted(r.algo)]
    return min(timed, key=lambda t: t.time_us) if timed else None


def size_points(rows: Sequence[Row]) -> list[SizePoint]:
    allreduce = [r for r in rows if r.collective == "allreduce"]
    points = []
    for size in sorted({r.size_bytes for r in allreduce}):
        at_size = [r for r in allreduce if r.size_bytes == size]
        points.append(SizePoint(size, fastest(at_size, lambda a: a == AUTO), fastest(at_size, is_rival),
                                fastest(at_size, lambda a: a != AUTO and not is_rival(a))))
    return points


def load(path: Path) -> Run:
    """Raises ValueError for a file that is missing, not a bench CSV, or without an auto row."""
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    rows = read_csv(path)
    if not any(r.algo == AUTO for r in rows):
        raise ValueError(f"{path}: no {AUTO} row (the targets are auto's)")
    twin = path.with_suffix(".json")
    meta: dict[str, Any] = (json.loads(twin.read_text()).get("metadata") or {}) if twin.is_file() else {}
    timing = (meta.get("settings") or {}).get("timing")
    graph = timing == "graph" if timing else "graph" in path.name
    ok = [r for r in rows if r.status == "ok"]
    commits = sorted({r.commit for r in rows if r.commit})
    return Run(path, str(meta.get("world_size") or "/".join(sorted({str(r.nranks) for r in rows}))),
               str(meta.get("commit") or "/".join(commits) or "not recorded"), graph,
               "timing from its JSON" if timing else "timing from its name: no JSON beside it records it",
               meta.get("complete") is False, size_points(rows),
               sum(r.wrong or 0 for r in ok), sum(r.wrong is None for r in ok))


def timed_text(t: Timed | None, name: bool = False) -> str:
    """``4.44 us (oneshot-ll)``: a time, its pick (auto's), and with ``name`` the algorithm first."""
    if t is None:
        return "n/a"
    return f"{t.algo + ' ' if name else ''}{t.time_us:.2f} us" + (f" ({t.pick})" if t.pick else "")


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def rated(points: Sequence[SizePoint], first: int = 0, last: float = float("inf")) -> list[tuple[int, float]]:
    """(size, best peer / auto) of the sizes from ``first`` to ``last`` that are not n/a."""
    pairs = [(p.size, p.peer_over_auto) for p in points if first <= p.size <= last]
    return [(size, ratio) for size, ratio in pairs if ratio is not None]


def ratio_lines(points: Sequence[SizePoint]) -> list[str]:
    """The n/a sizes, and best peer / auto over the others: its range, the sizes below 0.95."""
    ratios = rated(points)
    missing = ", ".join(format_size(p.size) for p in points if p.peer_over_auto is None)
    out = [f"n/a (auto or every peer has no ok row; left out of the ratios): {missing or 'none'}"]
    if not ratios:
        return out
    (low_size, low), (high_size, high) = min(ratios, key=VALUE), max(ratios, key=VALUE)
    below = [(size, ratio) for size, ratio in ratios if ratio < PEER_RATIO_FLOOR]
    first, last = PEER_RATIO_SIZES
    met = not any(first <= size <= last for size, _ in below)
    listed = ", ".join(f"{format_size(size)} ({ratio:.3f})" for size, ratio in below) or "none"
    out.append(f"best peer / auto over {len(ratios)} sizes: {low:.2f} at {format_size(low_size)} to "
               f"{high:.2f} at {format_size(high_size)}; below {PEER_RATIO_FLOOR}: {listed} "
               f"[>= {PEER_RATIO_FLOOR} at every size {format_size(first)}-{format_size(last)}: "
               f"{verdict(met)}]")
    return out


def eager_line(points: Sequence[SizePoint]) -> str:
    """Auto's time at 8 KiB and its share of the best peer's, against the eager targets."""
    point = next((p for p in points if p.size == EAGER_SIZE and p.auto is not None), None)
    line = f"eager, {format_size(EAGER_SIZE)}: "
    if point is None or point.auto is None:
        return line + "auto not timed"
    time_us = point.auto.time_us
    line += f"auto {time_us:.2f} us [<= {EAGER_TIME_US} us: {verdict(time_us <= EAGER_TIME_US)}]"
    if point.peer_over_auto is not None:
        share = 1 / point.peer_over_auto
        line += f"; auto / best peer {share:.2f} [<= {EAGER_SHARE}: {verdict(share <= EAGER_SHARE)}]"
    return line


def graph_line(points: Sequence[SizePoint]) -> str:
    """The largest auto time and share of the best peer's over 1-64 KiB, against the graph targets."""
    first, last = GRAPH_SIZES
    line = f"graphs, {format_size(first)}-{format_size(last)}: "
    timed = [(p.size, p.auto.time_us) for p in points if first <= p.size <= last and p.auto is not None]
    if not timed:
        return line + "auto not timed"
    size, slowest = max(timed, key=VALUE)
    line += (f"largest auto time {slowest:.2f} us at {format_size(size)} "
             f"[<= {GRAPH_TIME_US} us: {verdict(slowest <= GRAPH_TIME_US)}]")
    shares = [(size, 1 / ratio) for size, ratio in rated(points, first, last)]
    if shares:
        size, share = max(shares, key=VALUE)
        line += (f"; largest auto / best peer {share:.2f} at {format_size(size)} "
                 f"[<= {GRAPH_SHARE}: {verdict(share <= GRAPH_SHARE)}]")
    return line


def summary(run: Run) -> list[str]:
    """The target lines of one run (the per-size table aside)."""
    unchecked = f" ({run.unchecked} ok rows unchecked)" if run.unchecked else ""
    return [*ratio_lines(run.points), graph_line(run.points) if run.graph else eager_line(run.points),
            f"wrong elements over the ok rows: {run.wrong}{unchecked}"]


def report(run: Run) -> str:
    timing = "CUDA graph replays (--graph)" if run.graph else "eager calls"
    head = f"{run.path}: {run.nranks} ranks, commit {run.commit}, {timing} ({run.timing_from})"
    if run.stopped_early:
        head += "; the run was stopped before its end: its largest size may be partial"
    lines = [head, f"  {'size':>8}  {'auto (pick)':<24} {'best peer':<28} {'peer/auto':>9}  best own"]
    for p in run.points:
        ratio = f"{p.peer_over_auto:.2f}" if p.peer_over_auto is not None else "n/a"
        lines.append(f"  {format_size(p.size):>8}  {timed_text(p.auto):<24} {timed_text(p.peer, True):<28} "
                     f"{ratio:>9}  {timed_text(p.own, True)}")
    return "\n".join(lines + [f"  {line}" for line in summary(run)])


def main(argv: Sequence[str] | None = None) -> int:
    """Print each CSV's block; 0 done, 2 a CSV cannot be read (nothing printed then)."""
    p = argparse.ArgumentParser(prog="python -m tools.targets",
                                description="Issue 28's small-message targets, per results CSV.")
    p.add_argument("csv", nargs="*", type=Path, help=f"results CSVs (default: {DEFAULT_GLOB})")
    ns = p.parse_args(argv)
    paths = ns.csv or sorted(Path().glob(DEFAULT_GLOB))
    if not paths:
        print(f"{p.prog}: no CSV named and none matches {DEFAULT_GLOB} here", file=sys.stderr)
        return 2
    try:
        runs = [load(path) for path in paths]
    except ValueError as err:
        print(f"{p.prog}: {err}", file=sys.stderr)
        return 2
    print("\n\n".join(report(run) for run in runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
