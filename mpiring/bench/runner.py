"""The sweep: set-up, one size after another, every point of a size, the rows.

Collective from end to end; every rank builds the same rows (they come from agreed
outcomes), and only rank 0 prints and writes files.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mpi4py import MPI

from ..communicator import Communicator
from ..errors import MpiringError
from .algorithms import AUTO, default_sweep, is_batched, reference, runnable
from .arrays import make_space
from .cli import Options
from .data import InputGenerator, point_seed, resolve_dtype
from .measure import (
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
from .summary import in_graph

MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
GPU_SLACK = 1 << 30  # generation temporaries, NCCL's lazily allocated buffers, fragmentation
HOST_SLACK = 64 << 20
HOST_MODE_NOTE = "no GPU: benchmarking the host transport against MPI.Allreduce"
FORCED_HOST_NOTE = "--host: benchmarking the host transport against MPI.Allreduce"


class BenchError(Exception):
    """A problem every rank sees alike: the run stops cleanly (exit status 3)."""


def run_collectively(prog: str, world: Any, reporter: Reporter, body: Callable[[], int]) -> int:
    """Run ``body`` (a collective command's work) and return its exit status. A
    :class:`BenchError`, raised alike on every rank, ends it with status 3 and its message; any
    other exception on one rank aborts the whole job, since the others may be waiting for it
    in a collective call that would never return."""
    try:
        return body()
    except BenchError as err:
        reporter.stop()
        reporter.error(f"{prog}: {err}")
        return 3
    except BaseException as err:
        reporter.stop()
        sys.stderr.write(f"{prog}: rank {world.rank}: unexpected {type(err).__name__}, "
                         "aborting the job\n")
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(3)
        return 3


def run_on_world(prog: str, progress: str, body: Callable[[Any, Reporter], int]) -> int:
    """A command's main: ``body(world, reporter)`` on a duplicate of ``MPI.COMM_WORLD``, with
    rank 0 reporting, under :func:`run_collectively`'s error rules."""
    world = MPI.COMM_WORLD.Dup()
    reporter = Reporter(world.rank == 0, progress)
    try:
        return run_collectively(prog, world, reporter, lambda: body(world, reporter))
    finally:
        if not MPI.Is_finalized():
            world.Free()


def exit_status(rows: list[Row]) -> int:
    """1 if a check failed, else 2 if a point raised an error, else 0 (points skipped,
    unavailable or n/a are no failure)."""
    if any(r.status == "fail" for r in rows):
        return 1
    if any(r.status == "error" for r in rows):
        return 2
    return 0


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
    overlap: Any = None  # an overlap.OverlapMeasurer with --overlap gemm
    overlap_line: str = ""  # what the overlap load is, for the banner
    rows: list[Row] = field(default_factory=list)
    inapplicable: set[str] = field(default_factory=set)  # algorithms already noted n/a

    @property
    def rank(self) -> int:
        return self.world.rank

    def points_of(self, nbytes: int, count: int) -> list[Point]:
        pts = []
        for algo in self.algos:
            for b in (self.opts.batches if is_batched(algo) else (None,)):
                for place in self.opts.placements:
                    pts.append(Point(nbytes, count, self.opts.dtype, self.opts.op, algo, b,
                                     place))
        return pts


def _algorithms(wanted: Sequence[str] | None, gpu: bool) -> tuple[list[str], str, dict[str, str]]:
    """(algorithms to run, baseline first; baseline name; unavailable ones with why)."""
    can = runnable(gpu)
    wanted = list(wanted) if wanted else list(default_sweep(gpu))
    unavailable = {}
    for a in wanted:
        if a not in can:
            kind = "host" if gpu else "GPU"
            unavailable[a] = (f"{a} reduces {kind} arrays; this run benchmarks "
                              f"{'GPU' if gpu else 'host'} arrays ({', '.join(can)})")
    run = [a for a in can if a in wanted]  # the mode's order: baseline first
    return run, reference(gpu), unavailable


def setup(opts: Options, world: Any, reporter: Reporter,
          algos_for: Callable[[bool], Sequence[str]] | None = None) -> Sweep:
    """Collective: communicator, memory space, sizes; raises BenchError on every rank.
    ``algos_for(gpu)``, when given, replaces ``opts.algos`` once the mode is known."""
    try:
        comm = Communicator(MPI.COMM_WORLD, gpu=False if opts.host else None,
                            timeout=opts.timeout)
    except Exception as err:  # raised on every rank by the library's collective set-up
        raise BenchError(f"cannot create the mpiring communicator: {type(err).__name__}: "
                         f"{err}") from err
    gpu = comm.gpu
    if opts.timing != "eager" and not gpu:
        comm.close()
        raise BenchError("--graph needs GPUs: it captures the calls in a CUDA graph; drop --graph "
                         "to time host arrays")
    if opts.overlap and not gpu:
        comm.close()
        why = "--host was given" if opts.host else "no GPU was found (CuPy and a CUDA GPU)"
        raise BenchError(f"--overlap {opts.overlap} needs GPUs: it runs a CuPy matmul beside "
                         f"the allreduce on each rank's GPU, but {why}; drop --overlap to "
                         "benchmark the host transport")
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
    algos, baseline, unavailable = _algorithms(algos_for(gpu) if algos_for else opts.algos, gpu)
    baseline = baseline if baseline in algos else ""
    reporter.set_baseline(baseline, overlap=bool(opts.overlap))
    sw = Sweep(opts, world, comm, space, reporter, "gpu" if gpu else "host", algos, baseline,
               unavailable, sizes, dtype)
    if opts.overlap:
        _set_up_overlap(sw)
    return sw


def _set_up_overlap(sw: Sweep) -> None:
    """Collective: the GEMM load of --overlap gemm, and its time alone (slowest rank's)."""
    from .overlap import MIN_GEMM_S, GemmLoad, OverlapMeasurer

    opts = sw.opts
    try:
        load = agree(sw.world, lambda: GemmLoad(opts.gemm_size, seed=opts.seed + sw.rank))
        gemm_s = max(agree(sw.world, load.calibrate, share=True))
    except StageFailed as err:
        sw.comm.close()
        raise BenchError(f"cannot set up the GEMM of --overlap gemm (--gemm-size "
                         f"{opts.gemm_size}): " + "; ".join(err.errors)) from err
    if gemm_s < MIN_GEMM_S:
        sw.comm.close()
        raise BenchError(f"a {opts.gemm_size}x{opts.gemm_size} GEMM takes {gemm_s * 1e6:.1f} us, "
                         f"under {MIN_GEMM_S * 1e6:.0f} us: launches, not the GPU, would set its "
                         "pace; use a larger --gemm-size (e.g. 8192)")
    sw.overlap = OverlapMeasurer(sw.world, load, opts.reps, gemm_s)
    sw.overlap_line = load.describe(gemm_s)


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


def _resolved(comm: Any, count: int, dtype: Any) -> str:
    """The algorithm ``auto`` runs for ``count`` elements, where the communicator can say
    (``Communicator.resolve``); "?" if asking failed."""
    resolve = getattr(comm, "resolve", None)
    if resolve is None:
        return ""
    try:
        return str(resolve(count, dtype, algorithm=AUTO))
    except (MpiringError, ValueError, TypeError):
        return "?"


def _batches_used(sw: Sweep, p: Point) -> int | None:
    """The mini-batches the point's calls ran with; None where the algorithm has none, or
    refuses the point (an n/a row: one-shot above its limit, the ring inside a graph)."""
    try:
        return sw.comm.batches_for(p.count, sw.dtype, gpu=sw.mode == "gpu", algorithm=p.algo,
                                   batches=p.call_batches)
    except MpiringError:
        return None


def _row(sw: Sweep, p: Point, out: Outcome) -> Row:
    row = Row(size_bytes=p.nbytes, count=p.count, dtype=p.dtype, op=p.op, algo=p.algo,
              batches=p.batches_label, placement=p.placement, nranks=sw.world.size,
              status=out.status, check=out.check, note=out.note, baseline=sw.baseline,
              batches_used=_batches_used(sw, p))
    if p.algo == AUTO:
        row.resolved = _resolved(sw.comm, p.count, sw.dtype)
    ov = out.overlap
    if ov is not None:
        us = {k: None if v is None else v * 1e6 for k, v in (
            ("gemm_alone_us", ov.gemm_alone_s), ("gemm_overlap_us", ov.gemm_with_s),
            ("ar_alone_us", ov.ar_alone_s), ("ar_overlap_us", ov.ar_with_s))}
        for name, value in us.items():
            setattr(row, name, value)
        row.gemm_slowdown, row.ar_slowdown = ov.gemm_slowdown, ov.ar_slowdown
        if ov.note:
            row.note = "; ".join(n for n in (row.note, ov.note) if n)
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
                                 mpi_op=MPI_OPS[opts.op], in_place=MPI.IN_PLACE,
                                 overlap=sw.overlap, graph=in_graph(opts, p.algo))
        out = measurer.measure(p, bufs)
        row = _row(sw, p, out)
        row.speedup = _speedup(sw, row)
        sw.rows.append(row)
        _show(sw, p, out, row)
        rep.advance()
        if out.needs_rebuild:
            rep.note("rebuilding the communicator after the error", style="red")
            _rebuild(sw)
    del bufs
    agree(sw.world, space.release)


def _show(sw: Sweep, p: Point, out: Outcome, row: Row) -> None:
    """Print a measured point: its row, and notes on what it taught about the algorithm."""
    rep = sw.reporter
    if out.status == "unavailable":  # for the whole run: its later points are not tried
        sw.unavailable[p.algo] = _reason(out.note)
        rep.note(f"{p.algo}: unavailable ({sw.unavailable[p.algo]})", style="dim")
        return
    if out.status == "inapplicable" and p.algo not in sw.inapplicable:
        sw.inapplicable.add(p.algo)  # noted once; its rows say n/a
        rep.note(f"{p.algo}: n/a from {format_size(p.nbytes)} ({_reason(out.note)})",
                 style="dim")
    if out.overlap is not None and out.overlap.note:
        rep.note(f"{format_size(p.nbytes)} {p.algo}: {out.overlap.note}")
    rep.row(row)
    if out.status in ("fail", "error"):
        for extra in out.errors[1:6]:
            rep.print(f"#   {extra}", style="red")
        if len(out.errors) > 6:
            rep.print(f"#   ... and {len(out.errors) - 6} more", style="red")


def _reason(note: str) -> str:
    """An outcome's note without its "rank N: ErrorType: " prefix."""
    parts = note.split(": ", 2)
    return parts[-1] if len(parts) == 3 and parts[0].startswith("rank ") else note
