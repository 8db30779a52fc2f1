"""The figures of ``--overlap`` (:mod:`mpiring.bench.overlap`), drawn with the styles of
:mod:`mpiring.bench.plot_style`:

  _overlap.png   (gemm shape) the GEMM's slowdown and the allreduce's slowdown vs size
  _makespan.png  one column per workload shape: on top the makespan T_both of each algorithm
                 vs size (solid), the same calls alone T_ar (dotted, the algorithm's colour)
                 and the GEMMs alone T_gemm (grey dashed: one work per size, equal for every
                 algorithm); below, the overlap efficiency (T_gemm + T_ar - T_both) /
                 min(T_gemm, T_ar), between 0 (serial) and 1 (the shorter one hidden)
"""

from __future__ import annotations

import statistics
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from .plot_style import legend_below, line_style, main_series, size_axis, time_label, times_label, title
from .results import MAKESPAN_COLUMNS, Row  # noqa: E402

SHAPE_TITLES = {"gemm": "beside large GEMMs started with the allreduce",
                "train": "training shape: the allreduce issued after the first GEMM"}


def plot_overlap(rows: list[Row], meta: dict[str, Any], path: Path) -> Path | None:
    """GEMM slowdown and allreduce slowdown vs size, per algorithm (--overlap gemm)."""
    series = main_series([r for r in rows if r.gemm_slowdown is not None])
    if not series:
        return None
    fig, (ax_g, ax_a) = plt.subplots(1, 2, figsize=(14, 6.8))
    sizes = sorted({r.size_bytes for _, _, _, rs in series for r in rs})
    for label, algo, place, rs in series:
        style = line_style(algo, place, label)
        ax_g.plot([r.size_bytes for r in rs], [r.gemm_slowdown for r in rs], **style)
        pts = [(r.size_bytes, r.ar_slowdown) for r in rs if r.ar_slowdown is not None]
        ax_a.plot([p[0] for p in pts], [p[1] for p in pts], **style)
    what = (meta.get("overlap_shapes") or {}).get("gemm") or meta.get("overlap") or \
        "a large GEMM on its own stream"
    ax_g.set_title(f"GEMM slowdown: its time beside the allreduce loop / alone\n({what})",
                   fontsize=10)
    ax_a.set_title("allreduce slowdown: its time beside the GEMMs / alone", fontsize=10)
    for ax, who in ((ax_g, "GEMM"), (ax_a, "allreduce")):
        ax.axhline(1.0, color="#888888", linewidth=1.2, linestyle="--")
        ax.set_ylabel(f"{who} slowdown (1 = unaffected)")
        ax.yaxis.set_major_formatter(FuncFormatter(times_label))
        size_axis(ax, sizes)
        ax.grid(True, which="major", alpha=0.3)
    room = legend_below(fig, ax_g)
    title(fig, rows, meta, "overlap with compute", bands=False)
    fig.tight_layout(rect=(0, room, 1, 0.91))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def makespan_shapes(rows: list[Row]) -> list[str]:
    """The --overlap shapes with a measured makespan among ``rows``, in MAKESPAN_COLUMNS order."""
    return [shape for shape, cols in MAKESPAN_COLUMNS.items()
            if any(r.timed and getattr(r, cols.t_both) is not None for r in rows)]


def gemm_reference(rows: list[Row], shape: str) -> list[tuple[int, float]]:
    """(size, T_gemm in us) per size: the GEMMs alone, the median over the size's rows (one
    work per size, so they differ only by noise)."""
    col = MAKESPAN_COLUMNS[shape].t_gemm
    by_size: dict[int, list[float]] = {}
    for r in rows:
        value = getattr(r, col)
        if r.timed and value is not None:
            by_size.setdefault(r.size_bytes, []).append(value)
    return [(size, statistics.median(v)) for size, v in sorted(by_size.items())]


def _makespan_column(ax_t: Any, ax_e: Any, rows: list[Row], shape: str, what: str) -> None:
    cols = MAKESPAN_COLUMNS[shape]
    series = main_series([r for r in rows if getattr(r, cols.t_both) is not None])
    sizes = sorted({r.size_bytes for _, _, _, rs in series for r in rs})
    ref = gemm_reference(rows, shape)
    ax_t.plot([s for s, _ in ref], [t for _, t in ref], color="#555555", linestyle="--",
              linewidth=2.4, zorder=1)
    for label, algo, place, rs in series:
        style = line_style(algo, place, label)
        ax_t.plot([r.size_bytes for r in rs], [getattr(r, cols.t_both) for r in rs], **style)
        alone = [(r.size_bytes, getattr(r, cols.t_ar)) for r in rs if getattr(r, cols.t_ar)]
        ax_t.plot([p[0] for p in alone], [p[1] for p in alone], color=style["color"],
                  linestyle=(0, (1, 2)), linewidth=1.2, alpha=0.8, zorder=1)
        eff = [(r.size_bytes, getattr(r, cols.eff)) for r in rs if getattr(r, cols.eff) is not None]
        ax_e.plot([p[0] for p in eff], [p[1] for p in eff], **style)
    name = SHAPE_TITLES.get(shape, shape)
    ax_t.set_title(f"{shape}: makespan T_both, {name}"
                   + ("\n" + textwrap.fill(f"({what})", 95) if what else ""), fontsize=10)
    ax_t.set_yscale("log")
    ax_t.yaxis.set_major_formatter(FuncFormatter(time_label))
    ax_t.yaxis.set_minor_formatter(FuncFormatter(time_label))  # spans under a decade: minor ticks
    ax_t.set_ylabel("time of the fixed work (GEMMs and calls)")
    ax_e.set_title("overlap efficiency (T_gemm + T_ar \u2212 T_both) / min(T_gemm, T_ar)",
                   fontsize=10)
    for level in (0.0, 1.0):
        ax_e.axhline(level, color="#888888", linewidth=1.2, linestyle="--")
    effs = [v for r in rows if (v := getattr(r, cols.eff)) is not None]
    ax_e.set_ylim(min([-0.1] + [v - 0.05 for v in effs]), max([1.15] + [v + 0.05 for v in effs]))
    ax_e.set_ylabel("efficiency (1: the shorter one hidden, 0: serial)")
    for ax in (ax_t, ax_e):
        if sizes:
            size_axis(ax, sizes)
        ax.grid(True, which="major", alpha=0.3)


def plot_makespan(rows: list[Row], meta: dict[str, Any], path: Path) -> Path | None:
    """Per --overlap shape (a column): makespan vs size per algorithm with the GEMMs alone and
    the calls alone as references, and the overlap efficiency below."""
    shapes = makespan_shapes(rows)
    if not shapes:
        return None
    fig, axes = plt.subplots(2, len(shapes), figsize=(8 * len(shapes), 10.5), squeeze=False,
                             height_ratios=(3, 2))
    labels = meta.get("overlap_shapes") or {}
    for i, shape in enumerate(shapes):
        _makespan_column(axes[0][i], axes[1][i], rows, shape, labels.get(shape, ""))
    handles: dict[str, Any] = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    handles["GEMMs alone (T_gemm)"] = Line2D([], [], color="#555555", linestyle="--", linewidth=2.4)
    handles["the calls alone (T_ar), dotted"] = Line2D([], [], color="#333333",
                                                         linestyle=(0, (1, 2)), linewidth=1.2)
    ncol = min(4, len(handles))
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=ncol, fontsize=9,
               frameon=False)
    room = 0.02 + 0.025 * -(-len(handles) // ncol)
    title(fig, rows, meta, "makespan beside compute", bands=False)
    fig.tight_layout(rect=(0, room, 1, 0.92))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
