"""Figures of a benchmark run (matplotlib, Agg backend; no display needed).

  <prefix>.png           bus bandwidth vs size (the S-curve), latency vs size and speed-up
                         over the baseline vs size, one line per algorithm; shaded bands span
                         the min..max repetition
  <prefix>_batches.png   bus bandwidth vs size per batches value, for every algorithm run
                         with several (e.g. --batches 1,2,4,8)
  <prefix>_overlap.png   with --overlap gemm: the GEMM's slowdown and the allreduce's slowdown
                         vs size, one line per algorithm (:mod:`mpiring.bench.plot_overlap`)
  <prefix>_makespan.png  with --overlap: per workload shape, the makespan of GEMMs and calls
                         together vs size per algorithm, beside the GEMMs alone and the calls
                         alone, and the overlap efficiency (:mod:`mpiring.bench.plot_overlap`)

A run of several collectives (``--collective``) draws each in its own files; those of
reduce_scatter and allgather end in ``_<collective>`` (``<prefix>_allgather.png``), unless
the prefix already starts with the collective's name (the default ``--name``). Styles, axes
and titles every figure shares: :mod:`mpiring.bench.plot_style`.

Re-plot saved results: ``python -m mpiring.bench.plot results/run.csv [-o PREFIX]`` (the
run's .json next to the CSV, if present, supplies the title).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

from .collectives import ALLREDUCE, factor_text  # noqa: E402
from .plot_overlap import plot_makespan, plot_overlap  # noqa: E402
from .plot_style import (
    legend_below,
    line_style,
    main_series,
    series_label,
    size_axis,
    style_of,
    time_label,
    times_label,
    title,
)
from .results import Row, read_csv_counted, read_json  # noqa: E402
from .stats import busbw  # noqa: E402

__all__ = ["collective_prefix", "line_style", "main", "main_series", "plot_results", "size_axis"]


def _band(r: Row, nranks: int) -> tuple[float, float]:
    lo = busbw(r.size_bytes, r.max_us * 1e-6, nranks, r.collective) if r.max_us else math.nan
    hi = busbw(r.size_bytes, r.min_us * 1e-6, nranks, r.collective) if r.min_us else math.nan
    return lo, hi


def plot_main(rows: list[Row], meta: dict[str, Any], path: Path) -> Path | None:
    series = main_series(rows)
    if not series:
        return None
    baseline = next((r.baseline for r in rows if r.baseline), "")
    speedups = baseline and any(r.speedup is not None for _, _, _, rs in series for r in rs)
    fig, axes = plt.subplots(1, 3 if speedups else 2, figsize=(20 if speedups else 14, 6.8))
    ax_bw, ax_t = axes[0], axes[1]
    sizes = sorted({r.size_bytes for _, _, _, rs in series for r in rs})
    for label, algo, place, rs in series:
        x = [r.size_bytes for r in rs]
        style = line_style(algo, place, label)
        ax_bw.plot(x, [r.busbw_gbs for r in rs], **style)
        bands = [_band(r, r.nranks) for r in rs]
        ax_bw.fill_between(x, [b[0] for b in bands], [b[1] for b in bands],
                           color=style["color"], alpha=0.12, linewidth=0)
        ax_t.plot(x, [r.time_us for r in rs], **style)
        ax_t.fill_between(x, [r.min_us for r in rs], [r.max_us for r in rs],
                          color=style["color"], alpha=0.12, linewidth=0)
        if speedups and algo != baseline:
            pts = [(r.size_bytes, r.speedup) for r in rs if r.speedup is not None]
            axes[2].plot([p[0] for p in pts], [p[1] for p in pts], **style)
    ax_bw.set_ylabel("bus bandwidth (GB/s)")
    ax_bw.set_ylim(bottom=0)
    coll = rows[0].collective
    factor = factor_text(coll).replace("-", "\u2212")
    ax_bw.set_title(f"bus bandwidth  (busbw = bytes/time \u00b7 {factor})", fontsize=10)
    ax_t.set_yscale("log")
    ax_t.yaxis.set_major_formatter(FuncFormatter(time_label))
    ax_t.set_ylabel(f"time per {coll}")
    ax_t.set_title("latency", fontsize=10)
    if speedups:
        ax_s = axes[2]
        ax_s.axhline(1.0, color="#888888", linewidth=1.2, linestyle="--")
        ax_s.set_yscale("log")
        for axis_ticks in (ax_s.yaxis.set_major_formatter, ax_s.yaxis.set_minor_formatter):
            axis_ticks(FuncFormatter(times_label))
        ax_s.set_ylabel(f"speed-up vs {baseline} (its time / this time)")
        ax_s.set_title(f"speed-up over {style_of(baseline)[0]} (above 1: faster)", fontsize=10)
    for ax in axes:
        size_axis(ax, sizes)
        ax.grid(True, which="major", alpha=0.3)
    room = legend_below(fig, ax_t)
    title(fig, rows, meta, "mpiring benchmark")
    fig.tight_layout(rect=(0, room, 1, 0.91))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

def batch_sweeps(rows: list[Row]) -> dict[str, list[Row]]:
    """Algorithms timed with two or more batches values (placement out preferred)."""
    out = {}
    for algo in dict.fromkeys(r.algo for r in rows):
        rs = [r for r in rows if r.algo == algo and r.timed and r.batches != "-"]
        places = {r.placement for r in rs}
        place = "out" if "out" in places else "in"
        rs = [r for r in rs if r.placement == place]
        if len({r.batches for r in rs}) >= 2:
            out[algo] = rs
    return out


def _batches_key(b: str) -> tuple[int, int]:
    return (1, 0) if b == "auto" else (0, int(b))


def plot_batches(rows: list[Row], meta: dict[str, Any], path: Path) -> Path | None:
    sweeps = batch_sweeps(rows)
    if not sweeps:
        return None
    fig, axes = plt.subplots(1, len(sweeps), figsize=(7.5 * len(sweeps), 6.2), squeeze=False)
    cmap = plt.get_cmap("viridis")
    for ax, (algo, rs) in zip(axes[0], sweeps.items(), strict=True):
        place = rs[0].placement
        values = sorted({r.batches for r in rs}, key=_batches_key)
        numeric = [v for v in values if v != "auto"]
        sizes = sorted({r.size_bytes for r in rs})
        for v in values:
            line = sorted((r for r in rs if r.batches == v), key=lambda r: r.size_bytes)
            if v == "auto":
                style: dict[str, Any] = dict(color="black", linestyle=":", marker="x",
                                             label="auto")
            else:
                i = numeric.index(v)
                color = cmap(0.1 + 0.8 * i / max(1, len(numeric) - 1))
                style = dict(color=color, linestyle="-", marker="o",
                             label=f"{v} batch" + ("" if v == "1" else "es"))
            ax.plot([r.size_bytes for r in line], [r.busbw_gbs for r in line], markersize=4,
                    linewidth=1.8, **style)
        base = sorted((r for r in rows if r.timed and r.algo == r.baseline and r.algo != algo
                       and r.placement == place), key=lambda r: r.size_bytes)
        if base:
            ax.plot([r.size_bytes for r in base], [r.busbw_gbs for r in base], color="#888888",
                    linestyle="--", linewidth=1.5, label=series_label(base[0].algo, "-", place, ""))
            sizes = sorted(set(sizes) | {r.size_bytes for r in base})
        size_axis(ax, sizes)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"{series_label(algo, '-', place, '')}: mini-batches", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=9, loc="upper left")
    title(fig, rows, meta, "batch sweep", bands=False)
    fig.tight_layout(rect=(0, 0, 1, 0.91))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_results(rows: list[Row], meta: dict[str, Any], prefix: str | Path) -> list[Path]:
    """Write the figures of ``rows`` next to ``prefix``, each collective's apart; returns the
    files written."""
    written: list[Path | None] = []
    for coll in dict.fromkeys(r.collective for r in rows):
        part = [r for r in rows if r.collective == coll]
        base = collective_prefix(prefix, coll)
        written += [plot_main(part, meta, Path(base + ".png")),
                    plot_batches(part, meta, Path(base + "_batches.png")),
                    plot_overlap(part, meta, Path(base + "_overlap.png")),
                    plot_makespan(part, meta, Path(base + "_makespan.png"))]
    return [p for p in written if p is not None]


def collective_prefix(prefix: str | Path, collective: str) -> str:
    """``prefix``, with ``_<collective>`` added for reduce_scatter and allgather unless the
    file name already starts with it."""
    prefix = str(prefix)
    if collective == ALLREDUCE or Path(prefix).name.startswith(collective):
        return prefix
    return f"{prefix}_{collective}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mpiring.bench.plot",
        description="Plot saved mpiring.bench results (CSV written by python -m mpiring.bench), "
                    "also the CSV of a run that was cut short: its finished rows are drawn.")
    parser.add_argument("csv", nargs="+", help="result CSV file(s)")
    parser.add_argument("-o", "--output", metavar="PREFIX",
                        help="output file prefix (default: the CSV path without .csv; only "
                             "with one CSV)")
    args = parser.parse_args(argv)
    if args.output and len(args.csv) > 1:
        parser.error("-o/--output takes one CSV")
    status = 0
    for name in args.csv:
        path = Path(name)
        try:
            rows, dropped = read_csv_counted(path)
        except (OSError, ValueError) as err:
            print(f"{path}: {err}", file=sys.stderr)
            status = 1
            continue
        if dropped:  # a run killed while writing its last row
            print(f"{path}: skipped {dropped} incomplete row(s) (the run was cut short)",
                  file=sys.stderr)
        meta: dict[str, Any] = {}
        sidecar = path.with_name(path.name.removesuffix(".csv") + ".json")
        if sidecar.exists():
            try:
                meta = read_json(sidecar)[1]
            except (OSError, ValueError, KeyError):
                meta = {}
        prefix = args.output or str(path.with_name(path.name.removesuffix(".csv")))
        written = plot_results(rows, meta, prefix)
        if not written:
            print(f"{path}: no timed rows to plot", file=sys.stderr)
            status = 1
        for p in written:
            print(p)
    return status


if __name__ == "__main__":
    sys.exit(main())
