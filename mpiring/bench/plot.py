"""Figures of a benchmark run (matplotlib, Agg backend; no display needed).

  <prefix>.png          bus bandwidth vs size (the S-curve), latency vs size and speed-up
                        over the baseline vs size, one line per algorithm; shaded bands span
                        the min..max repetition
  <prefix>_batches.png  bus bandwidth vs size per batches value, for every algorithm run
                        with several (e.g. --batches 1,2,4,8)
  <prefix>_overlap.png  with --overlap gemm: the GEMM's slowdown and the allreduce's slowdown
                        vs size, one line per algorithm

A run of several collectives (``--collective``) draws each in its own files; those of
reduce_scatter and allgather end in ``_<collective>`` (``<prefix>_allgather.png``), unless
the prefix already starts with the collective's name (the default ``--name``).

Re-plot saved results: ``python -m mpiring.bench.plot results/run.csv [-o PREFIX]`` (the
run's .json next to the CSV, if present, supplies the title).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

from .algorithms import AUTO, default_sweep  # noqa: E402
from .collectives import ALLREDUCE, MPI_NAMES, factor_text  # noqa: E402
from .results import Row, read_csv_counted, read_json  # noqa: E402
from .sizes import format_size  # noqa: E402
from .stats import busbw  # noqa: E402

# algorithm: (legend name, colour, marker); others get a colour of the fallback cycle.
STYLES = {
    "nccl": ("NCCL allreduce", "#2ca02c", "s"),
    "nccl-ring": ("NCCL send/recv ring", "#ff7f0e", "^"),
    "ring": ("mpiring ring", "#1f77b4", "o"),
    "oneshot": ("mpiring one-shot", "#9467bd", "v"),
    "twoshot": ("mpiring two-shot", "#8c564b", "D"),
    "ring-events": ("mpiring ring (events)", "#17becf", "P"),
    "auto": ("mpiring auto", "#d62728", "x"),
    "mpi": ("MPI.Allreduce", "#7f7f7f", "D"),
    "torch": ("torch.distributed all_reduce", "#e377c2", "<"),
    "torch-symm-1shot": ("torch symm-mem one-shot", "#bcbd22", ">"),
    "torch-symm-2shot": ("torch symm-mem two-shot", "#6b6b00", "h"),
    "nccl-symm": ("NCCL symmetric window", "#004d00", "*"),
}
BASELINE_NAMES = {"nccl": "NCCL ", "mpi": "MPI."}  # + MPI's name of the collective
_FALLBACK = ("#e377c2", "#17becf", "#bcbd22", "#000000")
ORDER = {a: i for i, a in enumerate(dict.fromkeys(default_sweep(True) + default_sweep(False)))}


def _style(algo: str) -> tuple[str, str, str]:
    if algo in STYLES:
        return STYLES[algo]
    return algo, _FALLBACK[sum(map(ord, algo)) % len(_FALLBACK)], "o"


def line_style(algo: str, placement: str, label: str) -> dict[str, Any]:
    """Matplotlib keywords of one algorithm's line: in-place dashed, auto dotted on top."""
    _, color, marker = _style(algo)
    dashes = {("out", False): "-", ("in", False): "--", ("out", True): ":", ("in", True): "-."}
    return dict(color=color, marker=marker, markersize=4, label=label,
                linewidth=2.2 if algo in ("ring", AUTO) else 1.6,
                zorder=3 if algo in ("ring", AUTO) else 2,
                linestyle=dashes[(placement, algo == AUTO)])


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


def _label(algo: str, batches: str, placement: str, mode: str,
           collective: str = ALLREDUCE) -> str:
    text = _style(algo)[0]
    if collective != ALLREDUCE and algo in BASELINE_NAMES:  # not "NCCL allreduce"
        text = f"{BASELINE_NAMES[algo]}{MPI_NAMES[collective]}"
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
        out.append((_label(algo, b, place, mode, rs[0].collective), algo, place, chosen))
    return out


def _title(fig: Any, rows: list[Row], meta: dict[str, Any], what: str,
           bands: bool = True) -> None:
    r0 = rows[0]
    where = ", ".join(meta.get("gpu_names") or []) or ("host memory" if any(
        r.algo == "mpi" for r in rows) else "")
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


def _time_label(us: float, _pos: Any = None) -> str:
    """Latency tick labels: 10 us, 1 ms, 2 s."""
    if us >= 1e6:
        return f"{us / 1e6:g} s"
    if us >= 1e3:
        return f"{us / 1e3:g} ms"
    return f"{us:g} \u00b5s"


def _times_label(x: float, _pos: Any = None) -> str:
    """Ratio tick labels: 0.5x, 1x, 2x."""
    return f"{x:g}\u00d7"


def _band(r: Row, nranks: int) -> tuple[float, float]:
    lo = busbw(r.size_bytes, r.max_us * 1e-6, nranks, r.collective) if r.max_us else math.nan
    hi = busbw(r.size_bytes, r.min_us * 1e-6, nranks, r.collective) if r.min_us else math.nan
    return lo, hi


def _legend_below(fig: Any, ax: Any) -> float:
    """One legend under the panels (they share their lines); returns the room it takes."""
    handles, labels = ax.get_legend_handles_labels()
    ncol = min(4, max(1, len(labels)))
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    return 0.03 + 0.035 * math.ceil(len(labels) / ncol)


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
    ax_t.yaxis.set_major_formatter(FuncFormatter(_time_label))
    ax_t.set_ylabel(f"time per {coll}")
    ax_t.set_title("latency", fontsize=10)
    if speedups:
        ax_s = axes[2]
        ax_s.axhline(1.0, color="#888888", linewidth=1.2, linestyle="--")
        ax_s.set_yscale("log")
        for axis_ticks in (ax_s.yaxis.set_major_formatter, ax_s.yaxis.set_minor_formatter):
            axis_ticks(FuncFormatter(_times_label))
        ax_s.set_ylabel(f"speed-up vs {baseline} (its time / this time)")
        ax_s.set_title(f"speed-up over {_style(baseline)[0]} (above 1: faster)", fontsize=10)
    for ax in axes:
        size_axis(ax, sizes)
        ax.grid(True, which="major", alpha=0.3)
    room = _legend_below(fig, ax_t)
    _title(fig, rows, meta, "mpiring benchmark")
    fig.tight_layout(rect=(0, room, 1, 0.91))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


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
    what = meta.get("overlap") or "a large GEMM on its own stream"
    ax_g.set_title(f"GEMM slowdown: its time beside the allreduce loop / alone\n({what})",
                   fontsize=10)
    ax_a.set_title("allreduce slowdown: its time beside the GEMMs / alone", fontsize=10)
    for ax, who in ((ax_g, "GEMM"), (ax_a, "allreduce")):
        ax.axhline(1.0, color="#888888", linewidth=1.2, linestyle="--")
        ax.set_ylabel(f"{who} slowdown (1 = unaffected)")
        ax.yaxis.set_major_formatter(FuncFormatter(_times_label))
        size_axis(ax, sizes)
        ax.grid(True, which="major", alpha=0.3)
    room = _legend_below(fig, ax_g)
    _title(fig, rows, meta, "overlap with compute", bands=False)
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
                    linestyle="--", linewidth=1.5, label=_label(base[0].algo, "-", place, ""))
            sizes = sorted(set(sizes) | {r.size_bytes for r in base})
        size_axis(ax, sizes)
        ax.set_ylim(bottom=0)
        ax.set_ylabel("bus bandwidth (GB/s)")
        ax.set_title(f"{_label(algo, '-', place, '')}: mini-batches", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=9, loc="upper left")
    _title(fig, rows, meta, "batch sweep", bands=False)
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
                    plot_overlap(part, meta, Path(base + "_overlap.png"))]
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
