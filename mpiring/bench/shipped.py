"""The tuning table that ships with mpiring (``mpiring/data/tuning-h200.json``), derived from
the benchmark results committed in ``results/`` with the tuner's own code, so that the shipped
numbers cannot drift from their evidence (``tests/test_shipped_tuning.py`` derives it again
and compares)::

    python -m mpiring.bench.shipped            # from the repository root: rewrite the file
    python -m mpiring.bench.shipped --check    # exit 1 if the file differs from the results

Per rank count: the eager entries from ``results/h200x<N>.csv`` (calls made one by one from
Python), the graph entries from ``results/h200x<N>-graph.csv`` (``--graph``: calls replayed
from a CUDA graph); at each size the fastest of auto's candidates (the median of the slowest
rank, the CSVs' ``time_us``), by :func:`mpiring.bench.tunefile.timings` and
:func:`mpiring.algorithms.auto.from_timings`, exactly as ``python -m mpiring.tune`` does. The
file's ``runs`` say, per rank count and kind of call, which CSV, machine, date, command and
versions each table comes from, and which candidates or sizes the CSV lacks (nothing is
filled in: past the largest size measured, the largest size's winner holds, as in every
table). The link is not in the results' metadata: it comes from the README's description of
the reference machine (``LINK_EVIDENCE``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import algorithms
from ..algorithms import auto_candidates
from ..algorithms.auto import SHIPPED, Entries, TuningTable, from_timings
from .results import Row, read_csv
from .sizes import format_size
from .tunefile import DTYPE, OP, sizes_text, table_json, timings

GPU, LINK = "NVIDIA H200", "nvlink"
LINK_EVIDENCE = ("README.md, Results: '4 x H200 (NVLink, all-to-all)' and '2 x H200 (NVLink)' "
                 "(the results' metadata does not record the link)")
SOURCES = {2: ("results/h200x2.csv", "results/h200x2-graph.csv"),
           4: ("results/h200x4.csv", "results/h200x4-graph.csv")}
TARGET = f"mpiring/data/{SHIPPED}"


def _rows(root: Path, name: str, nranks: int) -> list[Row]:
    """The allreduce rows of one results CSV, checked to be what a tuning table is made of."""
    rows = [r for r in read_csv(root / name) if r.collective == "allreduce"]
    kinds = {(r.dtype, r.op, r.placement, r.nranks) for r in rows}
    if kinds != {(DTYPE, OP, "out", nranks)}:
        raise ValueError(f"{name}: a tuning table is made of {DTYPE} {OP} out-of-place points on "
                         f"{nranks} ranks, this file holds {sorted(kinds)}")
    return rows


def _metadata(root: Path, name: str) -> dict[str, Any]:
    """The metadata block of the JSON written beside the CSV (``<name>.json``)."""
    path = (root / name).with_suffix(".json")
    return dict(json.loads(path.read_text()).get("metadata") or {})


def _spans(sizes: Sequence[int]) -> str:
    """``4 MiB, 16 MiB, 64 MiB``, or ``4 MiB to 8 GiB (12 sizes)`` for more than 3 (sorted)."""
    if len(sizes) <= 3:
        return ", ".join(format_size(s) for s in sizes)
    return f"{format_size(sizes[0])} to {format_size(sizes[-1])} ({len(sizes)} sizes)"


def gaps(rows: Sequence[Row], graph: bool) -> list[str]:
    """What the CSV lacks for a table: candidates it never timed, and sizes at which a
    candidate has no timed point (refused sizes, such as one-shot above its limit, said so)."""
    sizes = sorted({r.size_bytes for r in rows})
    wanted = [a for a in auto_candidates() if not graph or algorithms.get(a).graph_capturable]
    out = [f"{a}: not measured (cannot be captured into a CUDA graph)"
           for a in auto_candidates() if a not in wanted]
    for algo in wanted:
        timed = {r.size_bytes for r in rows if r.algo == algo and r.timed}
        refused = sorted({r.size_bytes for r in rows if r.algo == algo
                          and r.status == "inapplicable"} - timed)
        missing = [s for s in sizes if s not in timed and s not in refused]
        if not timed:
            out.append(f"{algo}: not measured")
            continue
        if refused:
            out.append(f"{algo}: refuses {_spans(refused)}: above its size limit")
        if missing:
            out.append(f"{algo}: no timed point at {_spans(missing)}")
    if sizes:
        out.append(f"sizes above {format_size(sizes[-1])}: not measured (the "
                   f"{format_size(sizes[-1])} winner holds)")
    return out


def _run(root: Path, name: str, rows: Sequence[Row], graph: bool) -> dict[str, Any]:
    meta = _metadata(root, name)
    gpus = sorted({str(g.get("name")) for g in meta.get("gpus") or [] if isinstance(g, dict)})
    return {"source": name, "machine": f"{meta.get('hostname', '?')}: {meta.get('world_size')} x "
                                       f"{', '.join(gpus) or '?'}",
            "measured": meta.get("date"), "command": meta.get("command"),
            "timing": "CUDA graph replays (--graph)" if graph else "eager calls",
            "sizes": sizes_text(sorted({r.size_bytes for r in rows})),
            "candidates": sorted({r.algo for r in rows if r.timed and r.algo in auto_candidates()}),
            "gaps": gaps(rows, graph), "mpiring": meta.get("mpiring"), "nccl": meta.get("nccl"),
            "cuda_runtime": meta.get("cuda_runtime")}


def build(root: Path, sources: dict[int, tuple[str, str]] | None = None) -> TuningTable:
    """The shipped table from the results under ``root`` (the repository)."""
    sources = SOURCES if sources is None else sources
    eager: dict[int, Entries] = {}
    graph: dict[int, Entries] = {}
    runs: dict[str, dict[str, Any]] = {}
    for nranks, (eager_csv, graph_csv) in sorted(sources.items()):
        kinds: dict[str, Any] = {}
        for name, is_graph, into in ((eager_csv, False, eager), (graph_csv, True, graph)):
            rows = _rows(root, name, nranks)
            built = from_timings(timings(rows, nranks))
            if nranks not in built:
                raise ValueError(f"{name}: no candidate of auto was timed on {nranks} ranks")
            into[nranks] = built[nranks]
            kinds["graph" if is_graph else "eager"] = _run(root, name, rows, is_graph)
        runs[str(nranks)] = kinds
    meta = {"dtype": DTYPE, "op": OP, "link evidence": LINK_EVIDENCE,
            "derived by": "python -m mpiring.bench.shipped (tests/test_shipped_tuning.py checks it)",
            "runs": runs}
    latest = max(str(run["measured"]) for kinds in runs.values() for run in kinds.values())
    counts = " and ".join(map(str, sorted(sources)))
    return TuningTable(eager, f"reference machine: {counts} x {GPU}, NVLink", latest, meta, graph,
                       GPU, LINK)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mpiring.bench.shipped",
                                description="Derive mpiring/data/tuning-h200.json from results/.")
    p.add_argument("--root", default=".", help="the repository (default: the current directory)")
    p.add_argument("--check", action="store_true",
                   help="only compare: exit 1 if the shipped file differs from the results")
    ns = p.parse_args(argv)
    root = Path(ns.root)
    text = table_json(build(root))
    target = root / TARGET
    if ns.check:
        same = target.is_file() and target.read_text() == text
        print(f"{target}: {'matches' if same else 'DIFFERS from'} the results")
        return 0 if same else 1
    target.write_text(text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
