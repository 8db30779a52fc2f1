"""The tuning table that ships with mpiring (``mpiring/data/tuning-h200.json``), derived from
the benchmark results committed in ``results/`` with the tuner's own code, so that the shipped
numbers cannot drift from their evidence (``tests/tools/test_shipped.py`` derives it again
and compares)::

    python -m tools.shipped            # from the repository root: rewrite the file
    python -m tools.shipped --check    # exit 1 if the file differs from the results

Per rank count, ``SOURCES`` names the results of its eager entries (calls made one by one from
Python) and of its graph entries (``--graph``: calls replayed from a CUDA graph), each an
ordered list of :class:`Source`: a CSV and the largest size taken from it, so that a newer run
of the small sizes overlays the full 1 KiB to 8 GiB run (each source supplies the sizes above
the previous source's limit, up to its own; every size comes from exactly one CSV, never a mix).
At each size the fastest of auto's candidates (the median of the slowest rank, the CSVs'
``time_us``) wins, by :func:`mpiring.bench.tunefile.timings` and
:func:`mpiring.auto.table.from_timings`, exactly as ``mpiring-tune`` does. A run stopped
before its end (its JSON says ``"complete": false``) supplies only the sizes below the one it
was stopped in: a limit at or above that size is refused. The overlap entries
(``overlap=True``: the smallest makespan ``T_both`` beside a GEMM) come from a ``--overlap
gemm`` run of that machine and rank count listed in ``OVERLAP_SOURCES``, by
:func:`mpiring.bench.tunefile.makespan_timings`, as ``mpiring-tune --overlap`` makes them;
where none is committed (``results/h200x1-makespan.csv`` is one rank) a rank count
has no overlap entries, and ``--check`` says "overlap: not measured" for it. The file's
``runs`` say, per rank count and kind of call, which candidates or sizes the results lack,
and per source which sizes it supplied and which it did not (taken from another source, or
measured in part), its machine, date, command, commit and versions (nothing is filled in:
past the largest size measured, the largest size's winner holds, as in every table). The
link is not in the results' metadata: it comes from the README's description of the
reference machine (``LINK_EVIDENCE``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from mpiring import algorithms
from mpiring.algorithms import auto_candidates
from mpiring.auto.table import SHIPPED, Entries, TuningTable, from_timings, overlap_starts
from mpiring.bench.results import Row, read_csv
from mpiring.bench.sizes import format_size
from mpiring.bench.tunefile import DTYPE, OP, makespan_timings, sizes_text, table_json, timings


class Source(NamedTuple):
    """One results CSV of a ladder and ``up_to``, the largest size taken from it (None: every
    size it measured in full above the previous source's limit)."""

    csv: str
    up_to: int | None = None


Overlay = tuple[Source, ...]  # the sources of one ladder, smallest sizes first

GPU, LINK = "NVIDIA H200", "nvlink"
LINK_EVIDENCE = ("docs/results.md: '4 × H200 (NVLink, all-to-all)' and '2 × H200 (NVLink)' "
                 "(the results' metadata does not record the link)")
# Per rank count, (eager, graph): the newest runs of the small sizes (2 ranks: 2026-11-27 at
# 682f42d, 1 KiB to 4 MiB eager and 1 KiB to 1 MiB in graphs; 4 ranks: 2026-11-27 at a280745,
# 1 KiB to 4 MiB eager and in graphs) over the full 1 KiB to 8 GiB runs of 2026-11-26.
SOURCES: dict[int, tuple[Overlay, Overlay]] = {
    2: ((Source("results/h200x2-small-682f42d.csv", 4 << 20),
         Source("results/h200x2-7230227.csv")),
        (Source("results/h200x2-graph-small-682f42d.csv", 1 << 20),
         Source("results/h200x2-graph-7230227.csv"))),
    4: ((Source("results/h200x4-small-edc9fe7.csv", 4 << 20),
         Source("results/h200x4-mid-3aabc14.csv", 256 << 20),
         Source("results/h200x4-785a13a.csv")),
        (Source("results/h200x4-graph-small-3aabc14.csv", 512 << 10),
         Source("results/h200x4-graph-small-edc9fe7.csv", 4 << 20),
         Source("results/h200x4-graph-785a13a.csv"))),
}
# Per rank count, a committed makespan run (python -m mpiring.bench --overlap gemm,train, every
# auto candidate, no SM budget, as the eager and graph runs) on the reference machine: its
# overlap entries (64 MiB to 1 GiB).
OVERLAP_SOURCES: dict[int, str] = {2: "results/h200x2-overlap-682f42d.csv",
                                   4: "results/h200x4-overlap-9ea0311.csv"}
OVERLAP_GAP = "overlap: not measured (no --overlap gemm makespan run committed under results/)"
TARGET = f"mpiring/data/{SHIPPED}"
# What the shipped file says made it.
DERIVED_BY = "python -m tools.shipped (tests/tools/test_shipped.py checks it)"
# A log's first line names the commit where the results' metadata records none ("unknown").
LOG_COMMIT = re.compile(r"\bcommit ([0-9a-f]{7,40})\b")


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
        if not timed and not missing:
            out.append(f"{algo}: refuses every size measured, {_spans(refused)}: above its size limit")
            continue
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


def sizes_in_full(rows: Sequence[Row], meta: dict[str, Any]) -> list[int]:
    """The sizes a run measured in full: all of its CSV's, but for a run stopped before its end
    (its JSON's ``"complete": false``) not the largest, the one it was stopped in, whose rows
    may be missing (the bench writes them as they come) or timed while the stop was pending."""
    sizes = sorted({r.size_bytes for r in rows})
    return sizes[:-1] if meta.get("complete") is False else sizes


def overlay(sources: Sequence[tuple[Source, Sequence[int]]]) -> dict[int, str]:
    """Which CSV each size comes from: ``sources`` in order, each with the sizes it measured
    in full, supplies those above the previous source's limit up to its own ``up_to``. A limit
    must be a size its run measured in full (a limit past a stopped run's last full size, or
    past its sizes, would leave sizes to no CSV or to a partial one), limits must increase,
    only the last source may have none, each source must supply a size, and a CSV is named
    once."""
    taken: dict[int, str] = {}
    below = 0  # the previous source's limit: this one supplies only sizes above it
    names = [source.csv for source, _ in sources]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)}: named twice in one ladder")
    for index, (source, full) in enumerate(sources):
        if index and sources[index - 1][0].up_to is None:
            raise ValueError(f"{source.csv}: follows {sources[index - 1][0].csv}, which has no "
                             "limit and leaves it no size")
        if source.up_to is not None and source.up_to not in full:
            raise ValueError(
                f"{source.csv}: sizes up to {format_size(source.up_to)} asked, but its run "
                f"measured in full only {_spans(list(full)) or 'no size'}: the limit must be one "
                "of those (a run stopped before its end misses the size it was stopped in)")
        if source.up_to is not None and source.up_to <= below:
            raise ValueError(f"{source.csv}: its limit {format_size(source.up_to)} is not above "
                             f"the previous source's, {format_size(below)}")
        supplied = [s for s in full if s > below and (source.up_to is None or s <= source.up_to)]
        if not supplied:
            raise ValueError(f"{source.csv}: supplies no size (it measured in full "
                             f"{_spans(list(full)) or 'no size'}, and the sources before it "
                             f"cover up to {format_size(below)})")
        taken.update((s, source.csv) for s in supplied)
        below = source.up_to or 0
    return taken


TIMING = {"eager": "eager calls", "graph": "CUDA graph replays (--graph)",
          "overlap": "eager calls beside a GEMM (--overlap gemm): the smallest makespan T_both"}


def _commit(root: Path, name: str, meta: dict[str, Any]) -> str:
    """The commit a run measured: its metadata's, else the one its log's first line names
    (runs made from a copy of the repository record none), else ``unknown``."""
    recorded = str(meta.get("commit") or "unknown")
    log = (root / name).with_suffix(".log")
    if recorded != "unknown" or not log.is_file():
        return recorded
    lines = log.read_text(errors="replace").splitlines()
    named = LOG_COMMIT.search(lines[0]) if lines else None
    if named is None:
        return recorded
    return f"{named.group(1)} (named by the first line of {log.name}; the results record none)"


def _not_taken(name: str, rows: Sequence[Row], meta: dict[str, Any],
               taken: dict[int, str]) -> list[str]:
    """Why the sizes a CSV holds but did not supply were left: another source supplied them,
    the run was stopped in them, or they are above the CSV's limit; runs of one reason merge."""
    reasons: list[tuple[str, list[int]]] = []
    sizes = sorted({r.size_bytes for r in rows})
    partial = set(sizes) - set(sizes_in_full(rows, meta))
    for size in sizes:
        if taken.get(size) == name:
            continue
        where = f"from {taken[size]}" if size in taken else "no source supplies it"
        if size in partial:
            reason = (f"measured in part (the run was stopped by {meta.get('interrupted')} "
                      f"there), so not used; {where}")
        elif size in taken:
            reason = where
        else:
            reason = f"above the largest size taken from it; {where}"
        if reasons and reasons[-1][0] == reason:
            reasons[-1][1].append(size)
        else:
            reasons.append((reason, [size]))
    return [f"{_spans(spanned)}: {reason}" for reason, spanned in reasons]


def _source_run(root: Path, name: str, rows: Sequence[Row], meta: dict[str, Any],
                taken: dict[int, str]) -> dict[str, Any]:
    """One source's part of a ``runs`` entry: what it supplied, what not, and where from."""
    gpus = sorted({str(g.get("name")) for g in meta.get("gpus") or [] if isinstance(g, dict)})
    out = {"source": name, "supplied": sizes_text(sorted(s for s, n in taken.items() if n == name)),
           "machine": f"{meta.get('hostname', '?')}: {meta.get('world_size')} x "
                      f"{', '.join(gpus) or '?'}",
           "measured": meta.get("date"), "command": meta.get("command"),
           "commit": _commit(root, name, meta), "mpiring": meta.get("mpiring"),
           "nccl": meta.get("nccl"), "cuda_runtime": meta.get("cuda_runtime"),
           "sm_budget": meta.get("sm_budget")}  # bench --sm-budget (None: none)
    if meta.get("complete") is False:
        asked = (meta.get("settings") or {}).get("maxbytes")
        last = max(r.size_bytes for r in rows)
        out["stopped"] = (f"by {meta.get('interrupted')} in {format_size(last)}"
                          + (f"; it was to measure up to {format_size(asked)}" if asked else ""))
    left = _not_taken(name, rows, meta, taken)
    if left:
        out["not taken"] = left
    return out


def _check_timing(name: str, meta: dict[str, Any], kind: str) -> None:
    """A graph ladder is made of ``--graph`` runs, the others of eager ones (where the run's
    settings say how it timed: older runs may not)."""
    timing = (meta.get("settings") or {}).get("timing")
    if timing is not None and (timing == "graph") != (kind == "graph"):
        raise ValueError(f"{name}: timed {timing!r} calls, which cannot make the {kind} entries")


def _ladder(root: Path, sources: Overlay, nranks: int,
            kind: str) -> tuple[Entries, dict[str, Any], list[tuple[int, int, str, float]]]:
    """One ladder of the table from its sources' results CSVs, its ``runs`` entry, and the
    timings it was built from."""
    loaded = []
    for source in sources:
        rows, meta = _rows(root, source.csv, nranks), _metadata(root, source.csv)
        _check_timing(source.csv, meta, kind)
        loaded.append((source, rows, meta))
    taken = overlay([(source, sizes_in_full(rows, meta)) for source, rows, meta in loaded])
    timed = makespan_timings if kind == "overlap" else timings
    used: list[Row] = []
    for source, rows, _ in loaded:
        supplied = [r for r in rows if taken.get(r.size_bytes) == source.csv]
        if not timed(supplied, nranks):  # its sizes would silently take a larger size's winner
            what = "'s makespan" if kind == "overlap" else ""
            raise ValueError(f"{source.csv}: no candidate of auto{what} was timed on {nranks} "
                             "ranks at the sizes it supplies")
        used += supplied
    times = timed(used, nranks)
    built = from_timings(times)
    budgets = {source.csv: meta.get("sm_budget") for source, _, meta in loaded}
    if len(set(budgets.values())) > 1:
        raise ValueError(f"{nranks} ranks, {kind}: the sources were measured under different SM "
                         f"budgets {budgets}: one table serves one budget")
    run = {"timing": TIMING[kind], "sizes": sizes_text(sorted(taken)),
           "candidates": sorted({algo for _, _, algo, _ in times}),
           "gaps": gaps(used, kind == "graph", kind == "overlap"),
           "sm_budget": budgets[sources[0].csv],  # auto looks tables up by it
           "sources": [_source_run(root, source.csv, rows, meta, taken)
                       for source, rows, meta in loaded]}
    return built[nranks], run, times


Sources = dict[int, tuple[Overlay, Overlay]]  # per rank count, its eager and graph ladders


def _chosen(sources: Sources | None,
            overlap_sources: dict[int, str] | None) -> tuple[Sources, dict[int, str]]:
    """The sources asked for, or ``SOURCES``; the makespan CSVs asked for, or those of
    ``OVERLAP_SOURCES`` for the rank counts of the sources."""
    sources = SOURCES if sources is None else sources
    if overlap_sources is None:
        overlap_sources = {n: csv for n, csv in OVERLAP_SOURCES.items() if n in sources}
    return sources, overlap_sources


def build(root: Path, sources: dict[int, tuple[Overlay, Overlay]] | None = None,
          overlap_sources: dict[int, str] | None = None) -> TuningTable:
    """The shipped table from the results under ``root`` (the repository): per rank count of
    ``sources`` its eager and graph sources, and its makespan CSV where ``overlap_sources`` has
    one (default: ``SOURCES``, and ``OVERLAP_SOURCES`` for the rank counts of ``sources``)."""
    sources, overlap_sources = _chosen(sources, overlap_sources)
    stray = sorted(set(overlap_sources) - set(sources))
    if stray:
        raise ValueError(f"makespan runs for {stray} ranks, which have no eager results")
    ladders: dict[str, dict[int, Entries]] = {"eager": {}, "graph": {}, "overlap": {}}
    overlap_from: dict[int, int] = {}  # below the makespan run's smallest size: as any call
    runs: dict[str, dict[str, Any]] = {}
    for nranks, (eager, graph) in sorted(sources.items()):
        kinds: dict[str, Any] = {}
        named = [("eager", eager), ("graph", graph)]
        if nranks in overlap_sources:
            named.append(("overlap", (Source(overlap_sources[nranks]),)))
        times = {}
        for kind, overlaid in named:
            ladders[kind][nranks], kinds[kind], times[kind] = _ladder(root, overlaid, nranks, kind)
        if "overlap" in times:
            overlap_from.update(overlap_starts(times["eager"], times["overlap"]))
        budgets = {kind: run["sm_budget"] for kind, run in kinds.items()}
        if len(set(budgets.values())) > 1:
            raise ValueError(f"{nranks} ranks: the results were measured under different SM "
                             f"budgets {budgets}: one table serves one budget")
        runs[str(nranks)] = kinds
    meta = {"dtype": DTYPE, "op": OP, "link evidence": LINK_EVIDENCE,
            "derived by": DERIVED_BY,
            "runs": runs}
    latest = max(str(source["measured"]) for kinds in runs.values() for run in kinds.values()
                 for source in run["sources"])
    counts = " and ".join(map(str, sorted(sources)))
    return TuningTable(ladders["eager"], f"reference machine: {counts} x {GPU}, NVLink", latest,
                       meta, ladders["graph"], GPU, LINK, ladders["overlap"], overlap_from)


def overlap_gaps(table: TuningTable) -> list[str]:
    """``4 ranks: overlap: not measured (...)`` for each rank count without overlap entries."""
    return [f"{n} ranks: {OVERLAP_GAP}" for n in sorted(table.tables) if n not in table.overlap]


def missing(root: Path, sources: dict[int, tuple[Overlay, Overlay]] | None = None,
            overlap_sources: dict[int, str] | None = None) -> list[str]:
    """The files :func:`build` needs (the results CSVs and the JSONs beside them) that ``root``
    lacks: all of them outside mpiring's repository, whose ``results/`` the installed package
    does not carry. (A run's log, read only for a commit its results do not record, may be
    absent: the commit then reads ``unknown``.)"""
    sources, overlap_sources = _chosen(sources, overlap_sources)
    names = [s.csv for pair in sources.values() for ladder in pair for s in ladder]
    names += list(overlap_sources.values())
    needed = [p for n in dict.fromkeys(names) for p in (n, str(Path(n).with_suffix(".json")))]
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
