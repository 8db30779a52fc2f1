"""The tuner's table: built from benchmark rows (eager, graph and overlap entries, labelled with
the machine they were measured on), merged over an existing file, written in one step, and shown
as text. Pure apart from :func:`write_table`'s file I/O; :mod:`mpiring.bench.tune` runs the
measurements and the repository's ``tools/shipped.py`` builds the shipped table with the same
code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..algorithms import auto_candidates
from ..auto.machine import MachineKey
from ..auto.table import Entries, TuningTable, from_timings, overlap_starts, to_json
from .sizes import format_size

DTYPE, OP = "float32", "sum"

Timing = tuple[int, int, str, float]  # (ranks, bytes, algorithm, seconds)


def timings(rows: Sequence[Any], nranks: int) -> list[Timing]:
    """``(ranks, bytes, algorithm, seconds)`` of every timed candidate point (bench rows; the
    median of the slowest rank)."""
    return [(nranks, r.size_bytes, r.algo, r.time_us * 1e-6) for r in rows
            if r.timed and r.algo in auto_candidates()]


def makespan_timings(rows: Sequence[Any], nranks: int) -> list[Timing]:
    """``(ranks, bytes, algorithm, seconds)`` of every candidate point whose makespan beside the
    GEMM was measured (``--overlap gemm``'s ``t_both_us``, the slowest rank's median): the
    overlap sweep's times, whose smallest wins as the fastest does in the others. A point
    whose makespan was not measured (a note says why) is no candidate there."""
    return [(nranks, r.size_bytes, r.algo, r.t_both_us * 1e-6) for r in rows
            if r.timed and r.algo in auto_candidates() and r.t_both_us is not None
            and r.t_both_us > 0]


def merge_problem(base: TuningTable | None, mode: str, key: MachineKey | None = None) -> str:
    """Why this run's table must not go into ``base`` (its other tables were measured on the
    other transport, or on another GPU model or link), or ""."""
    runs = (base.meta.get("runs") or {}) if base else {}
    other = sorted(k for k, run in runs.items() if isinstance(run, dict)
                   and run.get("mode") not in (None, mode))
    if other:
        return (f"the --merge file's tables for {', '.join(other)} ranks were measured on the "
                f"{'host' if mode == 'gpu' else 'GPU'} transport, this run on the {mode} one: "
                "keep them in separate files")
    if base is None or key is None:
        return ""
    for label, theirs, mine in (("GPU model", base.gpu, key.gpu), ("link", base.link, key.link)):
        if theirs is not None and theirs != mine:
            return (f"the --merge file's tables are for the {label} {theirs!r}, this machine's is "
                    f"{mine!r}: keep them in separate files (mpiring-tune keeps one "
                    "per machine)")
    return ""


def make_table(times: Sequence[Timing], nranks: int, run: dict[str, Any],
               base: TuningTable | None = None, *, graph_times: Sequence[Timing] = (),
               key: MachineKey | None = None,
               overlap_times: Sequence[Timing] = ()) -> TuningTable:
    """This run's table for ``nranks``: eager entries from ``times``, graph entries from
    ``graph_times`` (none: eager serves graphs too), overlap entries from ``overlap_times``
    (makespans beside a GEMM; none: no overlap entries), over ``base``'s tables for other rank
    counts (this rank count's old graph and overlap entries go); ``run`` (machine, date, ...)
    is kept in the metadata under ``runs``. The table is labelled with ``key``'s GPU model and
    link, unless ``base`` is a table for any machine (format 1), which stays one."""
    built = from_timings(times)
    if nranks not in built:
        raise ValueError(f"no timings for {nranks} ranks")
    graphs = from_timings(graph_times) if graph_times else {}
    overlaps = from_timings(overlap_times) if overlap_times else {}
    tables = dict(base.tables) if base else {}
    graph = dict(base.graph) if base else {}
    overlap = dict(base.overlap) if base else {}
    overlap_from = dict(base.overlap_from) if base else {}
    tables[nranks] = built[nranks]
    for ladder, measured in ((graph, graphs), (overlap, overlaps)):
        ladder.pop(nranks, None)
        if nranks in measured:
            ladder[nranks] = measured[nranks]
    overlap_from.pop(nranks, None)
    if nranks in overlaps:  # a sweep beside a GEMM that began above the eager one: below, as any call
        overlap_from.update(overlap_starts(times, overlap_times))
    meta = dict(base.meta) if base else {}
    meta.update(dtype=DTYPE, op=OP)
    meta["runs"] = {**(meta.get("runs") or {}), str(nranks): run}
    if base is not None:
        gpu, link = base.gpu, base.link
    else:
        gpu, link = (key.gpu, key.link) if key is not None else (None, None)
    return TuningTable(tables, str(run.get("machine", "")), str(run.get("measured", "")), meta,
                       graph, gpu, link, overlap, overlap_from)


def table_lines(entries: Entries) -> list[str]:
    """One line per entry: ``up to 256 KiB   oneshot``, ..., ``above 64 MiB    ring``."""
    lines, below = [], 0
    for max_bytes, algo in entries:
        if max_bytes is not None:
            span = f"up to {format_size(max_bytes)}"
            below = max_bytes
        else:
            span = f"above {format_size(below)}" if below else "every size"
        lines.append(f"{span:<18} {algo}")
    return lines


def ladder_lines(table: TuningTable, nranks: int) -> list[str]:
    """The eager entries for ``nranks``, then the graph ones (or a line saying eager serves),
    then the overlap ones where there are any (tables without them say nothing of overlap)."""
    lines = ["eager calls:"] + [f"  {line}" for line in table_lines(table.tables[nranks])]
    if nranks in table.graph:
        lines += ["CUDA graph replays:"] + [f"  {line}" for line in table_lines(table.graph[nranks])]
    else:
        lines.append("CUDA graph replays: as eager calls (no graph entries)")
    if nranks in table.overlap:
        start = table.overlap_from.get(nranks)
        since = f", from {format_size(start)}; below it as eager calls" if start else ""
        lines += [f"beside a GEMM (overlap=True, smallest makespan{since}):"]
        lines += [f"  {line}" for line in table_lines(table.overlap[nranks])]
    return lines


def table_json(table: TuningTable) -> str:
    """``table`` as JSON text: metadata indented, then per rank count one line per ladder."""
    doc = to_json(table)
    tables = doc.pop("tables")
    head = json.dumps(doc, indent=1)[:-2]  # without the closing "\n}"
    blocks = []
    for world, ladders in tables.items():
        rows = ",\n".join(f"   {json.dumps(kind)}: {json.dumps(entries)}"
                          for kind, entries in ladders.items())
        blocks.append(f"  {json.dumps(world)}: {{\n{rows}\n  }}")
    body = ",\n".join(blocks)
    return f'{head},\n "tables": {{\n{body}\n }}\n}}\n'


def write_table(path: Path, table: TuningTable) -> Path:
    """Write ``table`` as JSON, replacing ``path`` in one step (a reader never sees half)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(table_json(table))
    os.replace(tmp, path)
    return path


def sizes_text(sizes: Sequence[int]) -> str:
    """``1 KiB .. 64 MiB (9 sizes)``."""
    if not sizes:
        return "no sizes"
    return f"{format_size(min(sizes))} .. {format_size(max(sizes))} ({len(sizes)} sizes)"
