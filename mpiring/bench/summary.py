"""The text around a sweep: the banner's lines (what runs, where, how it is timed and checked)
and the closing summary per algorithm (nccl-tests' "Avg bus bandwidth", best speed-up,
slowdowns and overlap efficiency beside GEMMs), then per --overlap shape and size the algorithm
with the smallest makespan. Pure formatting of a :class:`~mpiring.bench.sweep.Sweep`'s options
and its rows."""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from .. import algorithms
from . import rivals
from .algorithms import AUTO, VARIANTS, is_batched, picks_per_size
from .baseline import note as baseline_note
from .cli import BenchOptions
from .collectives import ALLREDUCE, size_line
from .data import describe_rule
from .metadata import cpu_line, rank_lines, short_commit
from .nccl_names import nccl_type
from .results import MAKESPAN_COLUMNS, SPREAD_LIMIT, Row
from .sizes import format_size

if TYPE_CHECKING:
    from .sweep import Sweep


NOISY_RULE = (f"~ (noisy): the slowest repetition took more than {SPREAD_LIMIT:g}x the fastest "
              "(max_us / min_us), so the median may not repeat from run to run")

REPORTED = {0: "rank 0's median time per iteration (-a 0)",
            1: "median time per iteration, averaged over ranks (-a 1)",
            2: "median time per iteration of the fastest rank (-a 2)",
            3: "median time per iteration of the slowest rank (-a 3)"}


def banner_lines(sw: Sweep, meta: dict[str, Any]) -> list[tuple[str, str]]:
    """``(key, value)`` lines of the banner; a line with an empty key is printed as it is
    (the per-rank lines, in nccl-tests' form)."""
    opts = sw.opts
    lo, hi = sw.sizes[0][0], sw.sizes[-1][0]
    step = (f"+{format_size(opts.stepbytes)}" if opts.stepbytes
            else f"x{opts.stepfactor or 2:g}")
    lines = [
        ("code", code_line(meta)),
        ("ranks", f"{sw.world.size} on {', '.join(meta.get('hosts') or [])}"),
        *(("", line) for line in rank_lines(meta.get("ranks") or [])),
        *((("cpus", cpu_line(meta["cpus"])),) if meta.get("cpus") else ()),
        ("memory", sw.space.describe()),
    ]
    if sw.mode == "gpu":
        names = meta.get("gpu_names") or ["?"]
        lines.append(("gpus", ", ".join(names)))
        versions = [f"{k} {meta[k]}" for k in ("cuda_runtime", "cuda_driver", "cupy", "nccl")
                    if meta.get(k)]
        lines.append(("cuda", ", ".join(versions)))
    lines += [
        ("mpi", f"{meta.get('mpi_library')} (mpi4py {meta.get('mpi4py')})"),
        ("sizes", f"{format_size(lo)} .. {format_size(hi)} {step} ({len(sw.sizes)} sizes)"),
        *(("collective", size_line(c)) for c in sw.collectives),
        ("data", f"{opts.dtype} ({nccl_type(opts.dtype)}) {opts.op}"),
        ("algorithms", ", ".join(sw.algos) + _baseline_text(sw)),
        *_through_lines(sw),
        *_rival_lines(sw),
        *(("variant", f"{name}: {VARIANTS[name].summary}") for name in sw.algos
          if name in VARIANTS),
        *((("left out", _left_out_line(sw)),) if sw.left_out else ()),
        *((("tuning", tuning_line(sw)),) if _tuned(sw) else ()),
        ("batches", ", ".join(str(b) for b in opts.batches)
         + ("" if any(is_batched(a) for a in sw.algos) else " (unused)")),
        ("placement", ", ".join(opts.placements)),
        ("timing", _timing_line(opts)),
        ("reported", f"{REPORTED[opts.average]}; {_agreement_text(sw)}"),
        ("check", _check_line(sw) if opts.check else "off (-c 0): results not verified"),
        ("SMs", _sm_line(sw)),
    ]
    if sw.overlap_line:
        lines.append(("overlap", sw.overlap_line))
        lines.append(("makespan", "T_gemm, T_ar: the GEMMs, the calls alone; T_both: both from "
                                  "one start until both are done; efficiency = (T_gemm + T_ar - "
                                  "T_both) / min(T_gemm, T_ar); slowdown = time beside the other "
                                  "/ time alone (mpiring/bench/overlap.py)"))
    return lines


def code_line(meta: dict[str, Any]) -> str:
    """The code that measures: ``mpiring 0.2.0, commit 1a2b3c4d5e6f-dirty``."""
    commit = str(meta.get("commit") or "unknown")
    return f"mpiring {meta.get('mpiring') or '?'}, commit {short_commit(commit)}"


def oversubscribed_note(meta: dict[str, Any]) -> str:
    """The warning above the table where a host runs more ranks than it has CPUs."""
    load = meta.get("cpus") or {}
    hosts = [f"{h} runs {v['ranks']} ranks on {v['cpus']} CPUs" for h, v in load.items()
             if v.get("oversubscribed")]
    if not hosts:
        return ""
    return (f"more ranks than CPUs ({'; '.join(hosts)}): ranks take turns on the cores and times "
            "swing from run to run; rows whose repetitions disagree are marked ~. Run at most one "
            "rank per CPU for figures that repeat")


def noisy_line(rows: list[Row]) -> str:
    """How many timed rows are marked ~, and what that means ("" for none)."""
    timed = [r for r in rows if r.timed]
    noisy = [r for r in timed if r.noisy]
    if not noisy:
        return ""
    return f"{len(noisy)} of {len(timed)} timed rows marked {NOISY_RULE}"


def agreement_timed(sw: Sweep) -> bool:
    """Whether mpiring's timed calls keep the per-call agreement check: as the communicator runs
    it (on unless ``MPIRING_CHECK=0``), unless ``--no-time-agreement`` turns it off."""
    return bool(sw.opts.time_agreement and getattr(sw.comm, "check", True))


def _agreement_text(sw: Sweep) -> str:
    """The banner's words on the agreement check in mpiring's timed calls."""
    if agreement_timed(sw):
        return ("mpiring's rows timed as the communicator runs them: per-call agreement check "
                "on (--no-time-agreement: off)")
    if not sw.opts.time_agreement:
        return "mpiring's per-call agreement check off in timed loops (the checked calls keep it)"
    return "mpiring's per-call agreement check off in timed loops (the communicator's: MPIRING_CHECK)"


def _baseline_text(sw: Sweep) -> str:
    """What the speed-ups are against, for the banner's algorithms line."""
    if not sw.baseline:
        return ""
    if sw.baseline in sw.skipped:
        return f" (speed-up vs {sw.baseline}, which cannot run here: no speed-ups)"
    why = baseline_note(sw.baseline, bool(sw.opts.baseline), sw.mode == "gpu", sw.collectives,
                        sw.skipped, sw.algos)
    return f" (speed-up vs {sw.baseline}" + (f"; {why})" if why else ")")


def _through_lines(sw: Sweep) -> list[tuple[str, str]]:
    """Per baseline row of mpiring's table in the sweep (``nccl``, ``nccl-ring``, ``mpi``): that
    its time is the library's call through ``mpiring.Communicator``, with mpiring's per-call
    work (the direct rows, rivals, make the call without it)."""
    work = ("argument checks, dispatch, the agreement check" if agreement_timed(sw)
            else "argument checks, dispatch; agreement check off")
    lines = []
    for name in sw.algos:
        if name not in algorithms.names(with_auto=False) or not algorithms.get(name).baseline:
            continue
        summary = algorithms.get(name).summary.replace("`", "")
        lines.append(("row", f"{name}: {summary} through mpiring.Communicator; its time includes "
                             f"mpiring's per-call work ({work})"))
    return lines


def _rival_lines(sw: Sweep) -> list[tuple[str, str]]:
    """Per rival of the sweep: what its row times and with what, or why it is skipped."""
    lines = []
    for name in sw.algos:
        if not rivals.is_rival(name):
            continue
        if name in sw.skipped:
            lines.append(("skipped", f"{name}: {sw.skipped[name]}"))
            continue
        note = sw.rivals.notes.get(name, "") if sw.rivals is not None else ""
        lines.append(("rival", f"{name}: {rivals.get(name).summary}" + (f" [{note}]" if note else "")))
    return lines


def _tuned(sw: Sweep) -> bool:
    """Whether the banner names the tuning table: for ``auto``, and on GPUs for a variant of it
    too (``auto-reproducible`` picks from the same table among the rows that keep rank order;
    on the host it runs mpi-twoshot, no table's choice)."""
    return AUTO in sw.algos or (sw.mode == "gpu" and any(map(picks_per_size, sw.algos)))


def tuning_line(sw: Sweep) -> str:
    """The banner's "tuning" line: which tuning table auto uses in this run
    (``Communicator.tuning``) and, under ``--overlap``, from which size its overlap entries serve."""
    tuning = getattr(sw.comm, "tuning", None)
    if tuning is None:
        return "unknown"
    if not getattr(sw.comm, "overlap", False):
        return tuning.describe()
    table, size = tuning.table, sw.world.size
    if not table.has_overlap(size):
        return tuning.describe() + "; it has no overlap entries: auto picks what is fastest alone"
    start = table.overlap_from.get(size)
    below = f" from {format_size(start)} (below, what is fastest alone)" if start else ""
    return tuning.describe() + f"; auto picks from its overlap entries (--overlap){below}"


def _left_out_line(sw: Sweep) -> str:
    """Why node-scoped rows are not in the default sweep (the communicator spans nodes)."""
    verb = "it needs" if len(sw.left_out) == 1 else "they need"
    return (f"{', '.join(sw.left_out)} (not in the default sweep: {verb} every rank on one node, "
            f"and this communicator spans {sw.nodes} nodes)")


def _timing_line(opts: BenchOptions) -> str:
    iters = (f"{opts.iters} iterations" if opts.iters
             else f"{opts.time_budget:g} s per point (max {opts.max_iters} iterations)")
    warm = f"{opts.warmup} warm-up" if opts.warmup is not None else "auto warm-up"
    launches = f"{opts.graph_launches} times" if opts.graph_launches > 1 else "once"
    graph = {"eager": "",
             "graph": f"; each repetition's calls captured in one CUDA graph, replayed "
                      f"{launches} (-G {opts.graph_launches})",
             "gpu": "; calls replayed from one CUDA graph where the row can be captured (GPU time)",
             }[opts.timing]
    if opts.blocking:
        graph += "; the CPU waits for each call to complete (-z 1)"
    return f"{iters}, {warm}, {opts.reps} repetitions{graph}"


def _check_line(sw: Sweep) -> str:
    from .data import value_rule

    rule = value_rule(sw.opts.op, sw.dtype, sw.world.size)
    calls = sw.opts.check
    return (f"every element of {calls} call{'s' if calls > 1 else ''} per point, exact "
            f"(#wrong: wrong elements over all ranks); inputs are {describe_rule(rule)}")


def summary_lines(rows: list[Row], baseline: str) -> list[str]:
    """Per algorithm: points, failures, average and peak bus bandwidth (nccl-tests' 'Avg bus
    bandwidth'), the largest speed-up over the baseline, and with --overlap the slowdowns."""
    lines = []
    keys = list(dict.fromkeys((r.collective, r.algo, r.batches, r.placement) for r in rows))
    several = len({r.collective for r in rows}) > 1
    for coll, algo, batches, place in keys:
        group = [r for r in rows
                 if (r.collective, r.algo, r.batches, r.placement) == (coll, algo, batches, place)]
        timed = [r for r in group if r.timed]
        fails = sum(r.status == "fail" for r in group)
        errors = sum(r.status == "error" for r in group)
        na = sum(r.status == "inapplicable" for r in group)
        if not timed and not fails and not errors and not na:
            continue
        label = f"{algo}" + (f" batches={batches}" if batches != "-" else "") + f" {place}"
        if several or coll != ALLREDUCE:
            label = f"{coll} {label}"
        parts = [f"{len(timed)}/{len(group)} timed"]
        if timed:
            bws = [r.busbw_gbs for r in timed if r.busbw_gbs is not None]
            parts.append(f"avg busbw {sum(bws) / len(bws):.2f} GB/s")
            peak = max(timed, key=lambda r: r.busbw_gbs or 0.0)
            parts.append(f"peak {peak.busbw_gbs:.2f} GB/s at {format_size(peak.size_bytes)}")
            sp = [r for r in timed if r.speedup is not None and math.isfinite(r.speedup)]
            if sp and algo != baseline:
                best = max(sp, key=lambda r: r.speedup or 0.0)
                parts.append(f"best {best.speedup:.2f}x vs {baseline} at "
                             f"{format_size(best.size_bytes)}")
            gemm = _finite(r.gemm_slowdown for r in timed)
            if gemm:
                parts.append(f"GEMM slowdown {_spread(gemm)}")
            ar = _finite(r.ar_slowdown for r in timed)
            if ar:
                parts.append(f"allreduce slowdown {_spread(ar)}")
            for shape, cols in MAKESPAN_COLUMNS.items():
                eff = _finite(getattr(r, cols.eff) for r in timed)
                if eff:
                    parts.append(f"{shape} overlap efficiency {_spread(eff, '')}")
        if na:
            parts.append(f"{na} n/a")
        if fails:
            parts.append(f"{fails} FAILED check")
        if errors:
            parts.append(f"{errors} errors")
        lines.append(f"{label}: " + ", ".join(parts))
    noisy = noisy_line(rows)
    return lines + makespan_lines(rows) + ([noisy] if noisy else [])


def _who(row: Row) -> str:
    """A row's algorithm as the makespan lines name it: auto's pick, batches, in place."""
    text = f"{row.algo}:{row.resolved}" if row.resolved else row.algo
    if row.batches not in ("-", "auto"):
        text += f" batches={row.batches}"
    return text + (" in-place" if row.placement == "in" else "")


def makespan_lines(rows: list[Row]) -> list[str]:
    """Per --overlap shape and size: the algorithm with the smallest makespan (T_both), with its
    efficiency and the two times alone, and the runner-up."""
    lines = []
    for shape, cols in MAKESPAN_COLUMNS.items():
        done = [r for r in rows if r.timed and getattr(r, cols.t_both) is not None]
        for size in sorted({r.size_bytes for r in done}):
            ranked = sorted((r for r in done if r.size_bytes == size),
                            key=lambda r: getattr(r, cols.t_both))
            best = ranked[0]
            eff = getattr(best, cols.eff)
            text = (f"smallest makespan, {shape} at {format_size(size)}: {_who(best)} "
                    f"{_ms(getattr(best, cols.t_both))} (efficiency "
                    f"{'-' if eff is None else f'{eff:.2f}'}; T_gemm {_ms(getattr(best, cols.t_gemm))}"
                    f", T_ar {_ms(getattr(best, cols.t_ar))})")
            if len(ranked) > 1:
                text += f"; next {_who(ranked[1])} {_ms(getattr(ranked[1], cols.t_both))}"
            lines.append(text)
    return lines


def _ms(us: float | None) -> str:
    return "-" if us is None or not math.isfinite(us) else f"{us / 1e3:.3g} ms"


def _finite(values: Any) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _spread(values: list[float], unit: str = "x") -> str:
    """Median and range over sizes: "median 1.04x (1.01x to 1.10x)"."""
    return (f"median {statistics.median(values):.2f}{unit} ({min(values):.2f}{unit} to "
            f"{max(values):.2f}{unit})")


def _sm_line(sw: Any) -> str:
    """How many SMs mpiring's kernels may hold (``--sm-budget``; NCCL's are NCCL's)."""
    budget = getattr(sw.comm, "sm_budget", None)
    if budget is None:
        return "mpiring's kernels: no budget (each launches the grid it wants)"
    return f"mpiring's kernels hold at most {budget} SMs (--sm-budget; NCCL's kernels are not bounded by it)"
