"""The tuning table that ships with mpiring (``mpiring/data/tuning-h200.json``), derived from
the benchmark results committed in ``results/`` with the tuner's own code, so that the shipped
numbers cannot drift from their evidence (``tests/tools/test_shipped.py`` derives it again
and compares)::

    python -m tools.shipped            # from the repository root: rewrite the file
    python -m tools.shipped --check    # exit 1 if the file differs from the results

Per rank count: the eager entries from ``results/h200x<N>.csv`` (calls made one by one from
Python), the graph entries from ``results/h200x<N>-graph.csv`` (``--graph``: calls replayed
from a CUDA graph); at each size the fastest of auto's candidates (the median of the slowest
rank, the CSVs' ``time_us``), by :func:`mpiring.bench.tunefile.timings` and
:func:`mpiring.auto.table.from_timings`, exactly as ``mpiring-tune`` does. The
overlap entries (``overlap=True``: the smallest makespan ``T_both`` beside a GEMM) come from a
``--overlap gemm`` run of that machine and rank count listed in ``OVERLAP_SOURCES``, by
:func:`mpiring.bench.tunefile.makespan_timings`, as ``mpiring-tune --overlap`` makes
them; where none is committed (none yet: ``results/h200x1-makespan.csv`` is one rank) the rank
count has no overlap entries, and ``--check`` says "overlap: not measured" for it. The
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

from mpiring import algorithms
from mpiring.algorithms import auto_candidates
from mpiring.auto.table import SHIPPED, Entries, TuningTable, from_timings
from mpiring.bench.results import Row, read_csv
from mpiring.bench.sizes import format_size
from mpiring.bench.tunefile import DTYPE, OP, makespan_timings, sizes_text, table_json, timings

GPU, LINK = "NVIDIA H200", "nvlink"
LINK_EVIDENCE = ("docs/results.md: '4 × H200 (NVLink, all-to-all)' and '2 × H200 (NVLink)' "
                 "(the results' metadata does not record the link)")
SOURCES = {2: ("results/h200x2-7230227.csv", "results/h200x2-graph-7230227.csv"),
           4: ("results/h200x4-785a13a.csv", "results/h200x4-graph-785a13a.csv")}
# Per rank count, a committed makespan run (python -m mpiring.bench --overlap gemm, every auto
# candidate) on the reference machine: its overlap entries. None yet for 2 or 4 H200s.
OVERLAP_SOURCES: dict[int, str] = {}
OVERLAP_GAP = "overlap: not measured (no --overlap gemm makespan run committed under results/)"
TARGET = f"mpiring/data/{SHIPPED}"
# What the shipped file says made it. The committed file still names the command's former
# place; change this to "python -m tools.shipped (tests/tools/test_shipped.py checks it)" and run
# python -m tools.shipped in the same commit (the file is compared byte for byte).
DERIVED_BY = "python -m tools.shipped (tests/tools/test_shipped.py checks it)"


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


def gaps(rows: Sequence[Row], graph: bool, makespan: bool = False) -> list[str]:
    """What the CSV lacks for a table: candidates it never timed, and sizes at which a
    candidate has no timed point (refused sizes, such as one-shot above its limit, said so);
    ``makespan``: a point counts as timed only with its makespan (``t_both_us``)."""
    sizes = sorted({r.size_bytes for r in rows})
    wanted = [a for a in auto_candidates() if not graph or algorithms.get(a).graph_capturable]
    out = [f"{a}: not measured (cannot be captured into a CUDA graph)"
           for a in auto_candidates() if a not in wanted]
    for algo in wanted:
        timed = {r.size_bytes for r in rows if r.algo == algo and r.timed
                 and (not makespan or r.t_both_us is not None)}
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


TIMING = {"eager": "eager calls", "graph": "CUDA graph replays (--graph)",
          "overlap": "eager calls beside a GEMM (--overlap gemm): the smallest makespan T_both"}


def _run(root: Path, name: str, rows: Sequence[Row], kind: str,
         times: Sequence[tuple[int, int, str, float]]) -> dict[str, Any]:
    meta = _metadata(root, name)
    gpus = sorted({str(g.get("name")) for g in meta.get("gpus") or [] if isinstance(g, dict)})
    return {"source": name, "machine": f"{meta.get('hostname', '?')}: {meta.get('world_size')} x "
                                       f"{', '.join(gpus) or '?'}",
            "measured": meta.get("date"), "command": meta.get("command"), "timing": TIMING[kind],
            "sizes": sizes_text(sorted({r.size_bytes for r in rows})),
            "candidates": sorted({algo for _, _, algo, _ in times}),
            "gaps": gaps(rows, kind == "graph", kind == "overlap"), "mpiring": meta.get("mpiring"),
            "nccl": meta.get("nccl"), "cuda_runtime": meta.get("cuda_runtime"),
            "sm_budget": meta.get("sm_budget")}  # bench --sm-budget (None: none); auto looks it up


def _ladder(root: Path, name: str, nranks: int, kind: str) -> tuple[Entries, dict[str, Any]]:
    """One ladder of the table from one results CSV, and its ``runs`` entry."""
    rows = _rows(root, name, nranks)
    times = makespan_timings(rows, nranks) if kind == "overlap" else timings(rows, nranks)
    built = from_timings(times)
    if nranks not in built:
        what = "'s makespan" if kind == "overlap" else ""
        raise ValueError(f"{name}: no candidate of auto{what} was timed on {nranks} ranks")
    return built[nranks], _run(root, name, rows, kind, times)


def build(root: Path, sources: dict[int, tuple[str, str]] | None = None,
          overlap_sources: dict[int, str] | None = None) -> TuningTable:
    """The shipped table from the results under ``root`` (the repository): per rank count of
    ``sources`` its eager and graph CSVs, and its makespan CSV where ``overlap_sources`` has
    one (default: ``SOURCES`` and ``OVERLAP_SOURCES``)."""
    sources = SOURCES if sources is None else sources
    overlap_sources = OVERLAP_SOURCES if overlap_sources is None else overlap_sources
    stray = sorted(set(overlap_sources) - set(sources))
    if stray:
        raise ValueError(f"makespan runs for {stray} ranks, which have no eager results")
    ladders: dict[str, dict[int, Entries]] = {"eager": {}, "graph": {}, "overlap": {}}
    runs: dict[str, dict[str, Any]] = {}
    for nranks, (eager_csv, graph_csv) in sorted(sources.items()):
        kinds: dict[str, Any] = {}
        named = [("eager", eager_csv), ("graph", graph_csv)]
        named += [("overlap", overlap_sources[nranks])] if nranks in overlap_sources else []
        for kind, name in named:
            ladders[kind][nranks], kinds[kind] = _ladder(root, name, nranks, kind)
        budgets = {kind: run["sm_budget"] for kind, run in kinds.items()}
        if len(set(budgets.values())) > 1:
            raise ValueError(f"{nranks} ranks: the results were measured under different SM "
                             f"budgets {budgets}: one table serves one budget")
        runs[str(nranks)] = kinds
    meta = {"dtype": DTYPE, "op": OP, "link evidence": LINK_EVIDENCE,
            "derived by": DERIVED_BY,
            "runs": runs}
    latest = max(str(run["measured"]) for kinds in runs.values() for run in kinds.values())
    counts = " and ".join(map(str, sorted(sources)))
    return TuningTable(ladders["eager"], f"reference machine: {counts} x {GPU}, NVLink", latest,
                       meta, ladders["graph"], GPU, LINK, ladders["overlap"])


def overlap_gaps(table: TuningTable) -> list[str]:
    """``4 ranks: overlap: not measured (...)`` for each rank count without overlap entries."""
    return [f"{n} ranks: {OVERLAP_GAP}" for n in sorted(table.tables) if n not in table.overlap]


def missing(root: Path, sources: dict[int, tuple[str, str]] | None = None,
            overlap_sources: dict[int, str] | None = None) -> list[str]:
    """The files :func:`build` reads (the results CSVs and the JSONs beside them) that ``root``
    lacks: all of them outside mpiring's repository, whose ``results/`` the installed package
    does not carry."""
    sources = SOURCES if sources is None else sources
    overlap_sources = OVERLAP_SOURCES if overlap_sources is None else overlap_sources
    names = [n for pair in sources.values() for n in pair] + list(overlap_sources.values())
    needed = [p for n in names for p in (n, str(Path(n).with_suffix(".json")))]
    return [n for n in needed if not (root / n).is_file()]


def main(argv: Sequence[str] | None = None) -> int:
    """Derive (or with ``--check`` compare) the shipped table; 0 done (or the same), 1 the
    file differs, 2 the results cannot be read (not run in mpiring's repository)."""
    p = argparse.ArgumentParser(prog="python -m tools.shipped",
                                description="Derive mpiring/data/tuning-h200.json from results/.")
    p.add_argument("--root", default=".", help="the repository (default: the current directory)")
    p.add_argument("--check", action="store_true",
                   help="only compare: exit 1 if the shipped file differs from the results")
    ns = p.parse_args(argv)
    root = Path(ns.root)
    lacking = missing(root)
    if lacking:
        print(f"{p.prog}: {root.resolve()} is not mpiring's repository: the table is derived "
              f"from the committed results, and {', '.join(lacking[:3])}"
              f"{f' (and {len(lacking) - 3} more)' if len(lacking) > 3 else ''} "
              f"{'is' if len(lacking) == 1 else 'are'} missing there (an installed mpiring does "
              "not carry results/). Run it in a checkout of the repository, or pass --root "
              "<checkout>", file=sys.stderr)
        return 2
    try:
        table = build(root)
    except ValueError as err:  # a results file that is not what a table is made of
        print(f"{p.prog}: cannot derive the table from {root.resolve()}: {err}", file=sys.stderr)
        return 2
    text = table_json(table)
    target = root / TARGET
    for gap in overlap_gaps(table):
        print(f"{TARGET}: {gap}")
    if ns.check:
        same = target.is_file() and target.read_text() == text
        print(f"{target}: {'matches' if same else 'DIFFERS from'} the results")
        return 0 if same else 1
    target.write_text(text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
