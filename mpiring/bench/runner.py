"""The sweep: set-up, one size after another, every point of a size, the rows.

Collective from end to end; every rank builds the same rows (they come from agreed
outcomes), and only rank 0 prints and writes files.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any

from mpi4py import MPI

from ..communicator import Communicator
from .arrays import make_space
from .cli import GPU_ALGOS, HOST_ALGOS, Options
from .data import InputGenerator, describe_rule, point_seed, resolve_dtype
from .measure import (
    BATCHED,
    Outcome,
    Point,
    PointMeasurer,
    SizeBuffers,
    StageFailed,
    TimingPolicy,
    agree,
)
from .report import Reporter
from .results import Row
from .sizes import element_counts, format_size, sweep
from .stats import algbw, busbw

MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
GPU_SLACK = 1 << 30  # generation temporaries, NCCL's lazily allocated buffers, fragmentation
HOST_SLACK = 64 << 20
HOST_MODE_NOTE = "no GPU: benchmarking the host transport against MPI.Allreduce"
FORCED_HOST_NOTE = "--host: benchmarking the host transport against MPI.Allreduce"


class BenchError(Exception):
    """A problem every rank sees alike: the run stops cleanly (exit status 3)."""


@dataclass
class Sweep:
    """Everything one run needs; built by :func:`setup`."""

    opts: Options
    world: Any
    comm: Any
    space: Any
    reporter: Reporter
    mode: str  # "gpu" or "host"
    algos: list[str]
    baseline: str
    unavailable: dict[str, str]  # algorithm -> why
    sizes: list[tuple[int, int]]
    dtype: Any
    rows: list[Row] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    @property
    def rank(self) -> int:
        return self.world.rank

    def points_of(self, nbytes: int, count: int) -> list[Point]:
        pts = []
        for algo in self.algos:
            for b in (self.opts.batches if algo in BATCHED else (None,)):
                for place in self.opts.placements:
                    pts.append(Point(nbytes, count, self.opts.dtype, self.opts.op, algo, b,
                                     place))
        return pts


def _algorithms(opts: Options, gpu: bool) -> tuple[list[str], str, dict[str, str]]:
    """(algorithms to run, baseline first; baseline name; unavailable ones with why)."""
    mode_algos = GPU_ALGOS if gpu else HOST_ALGOS
    wanted = list(opts.algos) if opts.algos else list(mode_algos)
    unavailable = {}
    for a in wanted:
        if a not in mode_algos:
            kind = "host" if gpu else "GPU"
            unavailable[a] = (f"{a} reduces {kind} arrays; this run benchmarks "
                              f"{'GPU' if gpu else 'host'} arrays ({', '.join(mode_algos)})")
    run = [a for a in mode_algos if a in wanted]  # the mode's order: baseline first
    baseline = mode_algos[0]
    return run, baseline, unavailable


def setup(opts: Options, world: Any, reporter: Reporter) -> Sweep:
    """Collective: communicator, memory space, sizes; raises BenchError on every rank."""
    try:
        comm = Communicator(MPI.COMM_WORLD, gpu=False if opts.host else None,
                            timeout=opts.timeout)
    except Exception as err:  # raised on every rank by the library's collective set-up
        raise BenchError(f"cannot create the mpiring communicator: {type(err).__name__}: "
                         f"{err}") from err
    gpu = comm.gpu
    try:
        dtype = resolve_dtype(opts.dtype)
        lo, hi = opts.size_range(gpu)
        sizes = element_counts(sweep(lo, hi, opts.stepfactor, opts.stepbytes), dtype.itemsize)
        if not sizes:
            raise ValueError(f"no size between {lo} and {hi} bytes holds one {opts.dtype}")
    except ValueError as err:
        comm.close()
        raise BenchError(str(err)) from err
    try:
        space = agree(world, lambda: make_space(gpu, dtype, world.size))
    except StageFailed as err:
        comm.close()
        raise BenchError("cannot set up the benchmark buffers: " + "; ".join(err.errors)) from err
    algos, baseline, unavailable = _algorithms(opts, gpu)
    reporter.set_baseline(baseline if baseline in algos else "")
    return Sweep(opts, world, comm, space, reporter, "gpu" if gpu else "host", algos,
                 baseline if baseline in algos else "", unavailable, sizes, dtype)


def _fits(sw: Sweep, count: int) -> tuple[bool, str]:
    """Collective: whether every rank has memory for this size (all ranks agree)."""
    nbytes = count * sw.dtype.itemsize
    # two buffers, plus (host) the cached int32 input and expected result
    extra = GPU_SLACK if sw.mode == "gpu" else 8 * count + HOST_SLACK
    need = 2 * nbytes + extra
    free = sw.space.free_bytes()
    frees = sw.world.allgather(free)
    short = [(r, f) for r, f in enumerate(frees) if f is not None and f < need]
    if not short:
        return True, ""
    r, f = min(short, key=lambda x: x[1])
    where = "GPU memory" if sw.mode == "gpu" else "host memory"
    return False, (f"needs {format_size(need)} of {where} per rank, rank {r} has "
                   f"{format_size(f)} free")


def _row(sw: Sweep, p: Point, out: Outcome) -> Row:
    row = Row(size_bytes=p.nbytes, count=p.count, dtype=p.dtype, op=p.op, algo=p.algo,
              batches=p.batches_label, placement=p.placement, nranks=sw.world.size,
              status=out.status, check=out.check, note=out.note, baseline=sw.baseline,
              batches_used=sw.comm.batches_for(p.count, sw.dtype, gpu=sw.mode == "gpu",
                                               algorithm=p.algo, batches=p.call_batches))
    s = out.stats
    if s is not None:
        row.time_us, row.mean_us = s.median * 1e6, s.mean * 1e6
        row.min_us, row.max_us, row.std_us = s.min * 1e6, s.max * 1e6, s.std * 1e6
        row.algbw_gbs = algbw(p.nbytes, s.median)
        row.busbw_gbs = busbw(p.nbytes, s.median, sw.world.size)
        row.iters, row.warmup, row.reps = out.iters, out.warmup, out.reps
        row.slowest_rank = out.slowest_rank
    return row


def _speedup(sw: Sweep, row: Row) -> float | None:
    """Baseline median time / this median time, at the same size and placement (the baseline
    runs first at every size)."""
    if not row.timed or not sw.baseline:
        return None
    for r in reversed(sw.rows):
        if (r.algo == sw.baseline and r.size_bytes == row.size_bytes
                and r.placement == row.placement and r.timed):
            return r.time_us / row.time_us
    return 1.0 if row.algo == sw.baseline else None


def _rebuild(sw: Sweep) -> None:
    """Collective: replace a communicator that failed mid-call by a fresh one."""
    with contextlib.suppress(Exception):  # a failed communicator may not close cleanly
        sw.comm.close()
    try:
        sw.comm = Communicator(MPI.COMM_WORLD, gpu=sw.mode == "gpu", timeout=sw.opts.timeout)
    except Exception as err:
        raise BenchError(f"cannot recreate the communicator after an error: {err}") from err


def run_sweep(sw: Sweep) -> list[Row]:
    """Collective: measure every point; returns the rows (the same on every rank)."""
    opts, rep = sw.opts, sw.reporter
    policy = TimingPolicy(budget_s=opts.time_budget, reps=opts.reps, max_iters=opts.max_iters,
                          iters=opts.iters, warmup=opts.warmup)
    points_per_size = [sw.points_of(nbytes, count) for nbytes, count in sw.sizes]
    rep.start(sum(len(p) for p in points_per_size))
    for algo, why in sw.unavailable.items():
        rep.note(f"{algo}: unavailable ({why})", style="dim")
        for nbytes, count in sw.sizes:
            for place in opts.placements:
                sw.rows.append(Row(nbytes, count, opts.dtype, opts.op, algo, "-", place,
                                   sw.world.size, "unavailable", "-", note=why,
                                   baseline=sw.baseline))
    for (nbytes, count), points in zip(sw.sizes, points_per_size, strict=True):
        rep.working_on(f"{format_size(nbytes)}")
        live = [p for p in points if p.algo not in sw.unavailable]
        skipped = [p for p in points if p.algo in sw.unavailable]
        for p in skipped:
            sw.rows.append(_row(sw, p, Outcome("unavailable", "-", sw.unavailable[p.algo])))
        rep.advance(len(skipped))
        if not live:
            continue
        fits, why = _fits(sw, count)
        if not fits:
            rep.note(f"{format_size(nbytes)}: skipped, {why}")
            for p in live:
                sw.rows.append(_row(sw, p, Outcome("skipped", "-", why)))
            rep.advance(len(live))
            continue
        _run_size(sw, policy, nbytes, count, live)
        if len(live) > 1:
            rep.section()
    rep.stop()
    return sw.rows


def _run_size(sw: Sweep, policy: TimingPolicy, nbytes: int, count: int,
              points: list[Point]) -> None:
    opts, rep, space = sw.opts, sw.reporter, sw.space
    seed = point_seed(opts.seed, nbytes, opts.dtype, opts.op)
    gen = InputGenerator(space.xp, opts.op, sw.dtype, sw.world.size, seed)
    try:
        bufs = agree(sw.world, lambda: SizeBuffers(space, gen, count, sw.rank,
                                                   cache=sw.mode == "host"))
    except StageFailed as err:
        why = f"could not allocate or fill buffers: {err.errors[0]}"
        rep.note(f"{format_size(nbytes)}: skipped, {why}")
        for p in points:
            sw.rows.append(_row(sw, p, Outcome("skipped", "-", why)))
        rep.advance(len(points))
        agree(sw.world, space.release)
        return
    # Straight-line, no try/finally: the release below is collective, and an unexpected
    # exception on one rank ends the job (see __main__) rather than a collective clean-up.
    for p in points:
        if p.algo in sw.unavailable:
            sw.rows.append(_row(sw, p, Outcome("unavailable", "-", sw.unavailable[p.algo])))
            rep.advance()
            continue
        rep.working_on(f"{format_size(nbytes)} {p.algo} batches={p.batches_label} "
                       f"{p.placement}")
        measurer = PointMeasurer(sw.world, sw.comm, space, policy, check=opts.check,
                                 time_agreement=opts.time_agreement,
                                 mpi_op=MPI_OPS[opts.op], in_place=MPI.IN_PLACE)
        out = measurer.measure(p, bufs)
        if out.status == "unavailable":
            sw.unavailable[p.algo] = out.note.split(": ", 1)[-1]
            rep.note(f"{p.algo}: unavailable ({sw.unavailable[p.algo]})", style="dim")
        row = _row(sw, p, out)
        row.speedup = _speedup(sw, row)
        sw.rows.append(row)
        if out.status != "unavailable":
            rep.row(row)
            for extra in out.errors[1:6]:
                rep.print(f"#   {extra}", style="red")
            if len(out.errors) > 6:
                rep.print(f"#   ... and {len(out.errors) - 6} more", style="red")
        rep.advance()
        if out.needs_rebuild:
            rep.note("rebuilding the communicator after the error", style="red")
            _rebuild(sw)
    del bufs
    agree(sw.world, space.release)


def banner_lines(sw: Sweep, meta: dict[str, Any]) -> list[tuple[str, str]]:
    opts = sw.opts
    lo, hi = sw.sizes[0][0], sw.sizes[-1][0]
    step = (f"+{format_size(opts.stepbytes)}" if opts.stepbytes
            else f"x{opts.stepfactor or 2:g}")
    lines = [
        ("ranks", f"{sw.world.size} on {meta.get('hostname')}"),
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
        ("data", f"{opts.dtype} {opts.op}"),
        ("algorithms", ", ".join(sw.algos) + (f" (speed-up vs {sw.baseline})"
                                              if sw.baseline else "")),
        ("batches", ", ".join(str(b) for b in opts.batches)
         + ("" if any(a in BATCHED for a in sw.algos) else " (unused)")),
        ("placement", ", ".join(opts.placements)),
        ("timing", _timing_line(opts)),
        ("reported", "median time per iteration of the slowest rank; mpiring's per-call "
                     f"agreement {'on' if opts.time_agreement else 'off'} in timed loops"),
        ("check", _check_line(sw) if opts.check else "off (--no-check): results not verified"),
    ]
    return lines


def _timing_line(opts: Options) -> str:
    iters = (f"{opts.iters} iterations" if opts.iters
             else f"{opts.time_budget:g} s per point (max {opts.max_iters} iterations)")
    warm = f"{opts.warmup} warm-up" if opts.warmup is not None else "auto warm-up"
    return f"{iters}, {warm}, {opts.reps} repetitions"


def _check_line(sw: Sweep) -> str:
    from .data import value_rule

    rule = value_rule(sw.opts.op, sw.dtype, sw.world.size)
    return f"every element, exact; inputs are {describe_rule(rule)}"


def summary_lines(rows: list[Row], baseline: str) -> list[str]:
    """Per algorithm: points, failures, average and peak bus bandwidth (nccl-tests' 'Avg bus
    bandwidth'), and the largest speed-up over the baseline."""
    lines = []
    keys = list(dict.fromkeys((r.algo, r.batches, r.placement) for r in rows))
    for algo, batches, place in keys:
        group = [r for r in rows if (r.algo, r.batches, r.placement) == (algo, batches, place)]
        timed = [r for r in group if r.timed]
        fails = sum(r.status == "fail" for r in group)
        errors = sum(r.status == "error" for r in group)
        if not timed and not fails and not errors:
            continue
        label = f"{algo}" + (f" batches={batches}" if batches != "-" else "") + f" {place}"
        parts = [f"{len(timed)}/{len(group)} timed"]
        if timed:
            bws = [r.busbw_gbs for r in timed if r.busbw_gbs is not None]
            parts.append(f"avg busbw {sum(bws) / len(bws):.2f} GB/s")
            peak = max(timed, key=lambda r: r.busbw_gbs or 0.0)
            parts.append(f"peak {peak.busbw_gbs:.2f} GB/s at {format_size(peak.size_bytes)}")
            sp = [r for r in timed if r.speedup is not None and math.isfinite(r.speedup)]
            if sp and algo != baseline:
                best = max(sp, key=lambda r: r.speedup)
                parts.append(f"best {best.speedup:.2f}x vs {baseline} at "
                             f"{format_size(best.size_bytes)}")
        if fails:
            parts.append(f"{fails} FAILED check")
        if errors:
            parts.append(f"{errors} errors")
        lines.append(f"{label}: " + ", ".join(parts))
    return lines
