"""What every figure of :mod:`mpiring.bench.plot` shares: each algorithm's colour, marker and
line, its legend name, the log2 size axis, the lines a figure draws (:func:`main_series`), the
title block and the legend under the panels."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from matplotlib.ticker import FixedLocator, NullLocator

from .. import algorithms
from .algorithms import AUTO, AUTO_REPRODUCIBLE, VARIANTS, default_sweep, picks_per_size
from .collectives import ALLREDUCE, MPI_NAMES, kind
from .results import Row
from .sizes import format_size

# algorithm: (legend name, colour, marker). A row of the algorithm table without one is named
# from the table ("mpiring <name>", a baseline by its name) in a colour of the fallback cycle.
STYLES = {
    "nccl": ("NCCL allreduce", "#2ca02c", "s"),
    "nccl-ring": ("NCCL send/recv ring", "#ff7f0e", "^"),
    "ring": ("mpiring ring", "#1f77b4", "o"),
    "oneshot": ("mpiring one-shot", "#9467bd", "v"),
    "twoshot": ("mpiring two-shot", "#8c564b", "D"),
    "ring-events": ("mpiring ring (events)", "#17becf", "P"),
    "auto": ("mpiring auto", "#d62728", "x"),
    AUTO_REPRODUCIBLE: ("mpiring auto, reproducible=True", "#8b0000", "X"),
    "mpi": ("MPI.Allreduce", "#7f7f7f", "D"),
    "oneshot-ll": ("mpiring one-shot LL", "#ff9896", "1"),
    "torch": ("torch.distributed all_reduce", "#e377c2", "<"),
    "torch-symm-1shot": ("torch symm-mem one-shot", "#bcbd22", ">"),
    "torch-symm-2shot": ("torch symm-mem two-shot", "#6b6b00", "h"),
    "nccl-symm": ("NCCL symmetric window", "#004d00", "*"),
    "nccl-direct": ("ncclAllReduce, direct (CuPy)", "#98df8a", "d"),
    "nccl-lib": ("ncclAllReduce, MPIRING_NCCL_LIB's libnccl", "#2b7a2b", "P"),
    "mpi-direct": ("MPI.Allreduce, direct (mpi4py)", "#3f3f3f", "d"),
}
EMPHASIZED = ("ring", AUTO, AUTO_REPRODUCIBLE)  # drawn wider and on top: the ring and auto
_FALLBACK = ("#e377c2", "#17becf", "#bcbd22", "#000000")
ORDER = {a: i for i, a in enumerate(dict.fromkeys(default_sweep(True) + default_sweep(False)
                                                  + (AUTO, *VARIANTS)))}


def _row(algo: str) -> algorithms.Algorithm | None:
    """``algo``'s row of the algorithm table (None for auto and the rivals)."""
    return algorithms.get(algo) if algo in algorithms.names(with_auto=False) else None


def style_of(algo: str) -> tuple[str, str, str]:
    if algo in STYLES:
        return STYLES[algo]
    row = _row(algo)
    name = f"mpiring {algo}" if row is not None and not row.baseline else algo
    return name, _FALLBACK[sum(map(ord, algo)) % len(_FALLBACK)], "o"


def baseline_prefix(algo: str, collective: str) -> str:
    """What a baseline row's line of ``collective`` (not allreduce) is named by, before MPI's
    name of the collective: "NCCL " for the table's NCCL rows, "MPI." for the others; "" for
    mpiring's rows, the rivals, and rows without that collective."""
    row = _row(algo)
    if row is None or not row.baseline or row.runner(kind(collective)) is None:
        return ""
    return "NCCL " if row.nccl else "MPI."


def line_style(algo: str, placement: str, label: str) -> dict[str, Any]:
    """Matplotlib keywords of one algorithm's line: in-place dashed, auto (and
    auto-reproducible) dotted on top."""
    _, color, marker = style_of(algo)
    dashes = {("out", False): "-", ("in", False): "--", ("out", True): ":", ("in", True): "-."}
    return dict(color=color, marker=marker, markersize=4, label=label,
                linewidth=2.2 if algo in EMPHASIZED else 1.6,
                zorder=3 if algo in EMPHASIZED else 2,
                linestyle=dashes[(placement, picks_per_size(algo))])


def _short_size(nbytes: int) -> str:
    return format_size(nbytes).replace(" ", "\u2009")


def size_axis(ax: Any, sizes: list[int], max_ticks: int = 10) -> None:
    """Log2 x axis with ticks at powers of two labelled in KiB/MiB/GiB."""
    ax.set_xscale("log", base=2)
    lo, hi = min(sizes), max(sizes)
    e_lo, e_hi = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    step = max(1, math.ceil((e_hi - e_lo + 1) / max_ticks))
    ticks = [2**e for e in range(e_hi, e_lo - 1, -step)][::-1]  # the largest size labelled
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([_short_size(t) for t in ticks], rotation=35, ha="right")
    if lo == hi:
        ax.set_xlim(lo / 2, hi * 2)
    else:
        ax.set_xlim(lo / 2**0.25, hi * 2**0.25)
    ax.set_xlabel("message size")


def series_label(algo: str, batches: str, placement: str, mode: str,
                 collective: str = ALLREDUCE) -> str:
    text = style_of(algo)[0]
    prefix = baseline_prefix(algo, collective) if collective != ALLREDUCE else ""
    if prefix:  # not "NCCL allreduce"
        text = f"{prefix}{MPI_NAMES[collective]}"
    if mode == "best":
        text += " (best batches)"
    elif batches not in ("-", "auto"):
        text += f" (batches {batches})"
    return text + (" in-place" if placement == "in" else "")


def main_series(rows: list[Row]) -> list[tuple[str, str, str, list[Row]]]:
    """Lines of the main figure: (label, algo, placement, rows by size). An algorithm run
    with several batches values is drawn with 'auto' if present, else the best per size."""
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.timed:
            groups[(r.algo, r.placement)].append(r)
    out = []
    for (algo, place), rs in sorted(groups.items(),
                                    key=lambda kv: (ORDER.get(kv[0][0], 9), kv[0][1] != "out")):
        values = list(dict.fromkeys(r.batches for r in rs))
        if len(values) == 1:
            chosen, mode, b = rs, "single", values[0]
        elif "auto" in values:
            chosen, mode, b = [r for r in rs if r.batches == "auto"], "single", "auto"
        else:
            best: dict[int, Row] = {}
            for r in rs:
                if r.size_bytes not in best or (r.busbw_gbs or 0) > (best[r.size_bytes].busbw_gbs
                                                                     or 0):
                    best[r.size_bytes] = r
            chosen, mode, b = list(best.values()), "best", "-"
        chosen = sorted(chosen, key=lambda r: r.size_bytes)
        out.append((series_label(algo, b, place, mode, rs[0].collective), algo, place, chosen))
    return out


def title(fig: Any, rows: list[Row], meta: dict[str, Any], what: str,
           bands: bool = True) -> None:
    r0 = rows[0]
    host_only = [r for r in rows if (row := _row(r.algo)) is not None and row.memory == algorithms.HOST]
    where = ", ".join(meta.get("gpu_names") or []) or ("host memory" if host_only else "")
    op = "" if r0.collective == "allgather" else f" {r0.op}"
    head = f"{what}: {r0.collective} {r0.dtype}{op}, {r0.nranks} ranks"
    if where:
        head += f" \u00b7 {where}"
    if meta.get("complete") is False:
        head += f" (partial: {meta.get('interrupted') or 'cut short'})"
    fig.suptitle(head, fontsize=13, fontweight="bold")
    bits = [meta.get("hostname"), meta.get("date")]
    if meta.get("nccl"):
        bits.append(f"NCCL {meta['nccl']}")
    if meta.get("cuda_runtime"):
        bits.append(f"CUDA {meta['cuda_runtime']}")
    if meta.get("mpiring"):
        bits.append(f"mpiring {meta['mpiring']}")
    average = (meta.get("settings") or {}).get("average", 3)
    who = {0: "of rank 0", 1: "averaged over ranks", 2: "of the fastest rank"}.get(
        average, "of the slowest rank")
    bits.append(f"median {who}" + ("; bands: min..max repetition" if bands else ""))
    fig.text(0.5, 0.915, " \u00b7 ".join(str(b) for b in bits if b), ha="center", fontsize=8.5,
             color="#555555")


def time_label(us: float, _pos: Any = None) -> str:
    """Latency tick labels: 10 us, 1 ms, 2 s."""
    if us >= 1e6:
        return f"{us / 1e6:g} s"
    if us >= 1e3:
        return f"{us / 1e3:g} ms"
    return f"{us:g} \u00b5s"


def times_label(x: float, _pos: Any = None) -> str:
    """Ratio tick labels: 0.5x, 1x, 2x."""
    return f"{x:g}\u00d7"


def legend_below(fig: Any, ax: Any) -> float:
    """One legend under the panels (they share their lines); returns the room it takes."""
    handles, labels = ax.get_legend_handles_labels()
    ncol = min(4, max(1, len(labels)))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    return 0.03 + 0.035 * math.ceil(len(labels) / ncol)
