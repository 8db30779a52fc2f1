"""The sweep: set-up, every point size after size (or, for nccl-tests' output, algorithm after
algorithm, so each of its tables streams), the rows.

Collective from end to end; every rank builds the same rows (they come from agreed
outcomes), and only rank 0 prints and writes files. Every row goes to ``Sweep.add``, which
marks a row whose repetitions spread too far (``noisy``) and hands it to the run's sink (rank
0's files, appended as each point completes).

Before every point the sweep asks ``Sweep.stop`` (when set; collective) whether to stop: an
interrupt then ends it between two points on every rank alike (``Sweep.stopped`` names the
signal), so no rank is left in a collective the others have left.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from mpi4py import MPI

from ..communicator import Communicator
from .algorithms import AUTO_REPRODUCIBLE, VARIANTS, default_sweep, implements, node_only, reference, runnable
from .arrays import make_space
from .baseline import arrange, fall_back
from .baseline import choose as choose_baseline
from .cli import BenchOptions, in_graph
from .collectives import ALLREDUCE, MPI_NAMES, element_counts
from .command import BenchError, exit_status
from .data import InputGenerator, point_seed, resolve_dtype
from .measure import Outcome, Point, PointMeasurer, SizeBuffers, StageFailed, TimingPolicy, agree
from .mode import ModeError, check_algorithms, choose
from .report import Reporter
from .results import Row
from .rivals import is_rival
from .rivals.points import measure_rival, start_rivals
from .rowmaker import make_row, reason, speedup
from .sizes import format_size, sweep
from .sweep import Sweep, target

__all__ = ["BenchError", "Sweep", "exit_status", "run_sweep", "setup"]

MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
GPU_SLACK = 1 << 30  # generation temporaries, NCCL's lazily allocated buffers, fragmentation
HOST_SLACK = 64 << 20


def _algorithms(wanted: Sequence[str] | None, gpu: bool, collective: str = ALLREDUCE,
                nodes: int = 1, reproducible: bool = False) -> tuple[list[str], str]:
    """(algorithms of ``collective`` to run in the mode's order, baseline first; the baseline's
    name), on a communicator over ``nodes`` nodes; ``reproducible`` (--reproducible) adds
    ``auto-reproducible``."""
    wanted = list(wanted) if wanted else list(default_sweep(gpu, collective, nodes))
    if reproducible:
        wanted.append(AUTO_REPRODUCIBLE)
    return ([a for a in runnable(gpu, collective, nodes) if a in wanted],
            reference(gpu, collective))


def _variants(wanted: Sequence[str] | None, reproducible: bool) -> list[str]:
    """The rows of ``algorithms.VARIANTS`` the sweep holds (asked for with ``--algo``, or
    ``auto-reproducible`` with --reproducible): each needs a communicator of its own."""
    asked = set(wanted or ()) | ({AUTO_REPRODUCIBLE} if reproducible else set())
    return [name for name in VARIANTS if name in asked]


def _communicator(opts: BenchOptions, gpu: bool, row: str = "") -> Any:
    """Collective: the bench's main communicator, or (``row``) the one of a row of
    ``algorithms.VARIANTS``: the same timeout, SM budget and overlap, with the variant's
    settings added (``auto-reproducible``: ``reproducible=True``)."""
    settings = dict(VARIANTS[row].settings) if row else {}
    return Communicator(MPI.COMM_WORLD, gpu=gpu, timeout=opts.timeout, sm_budget=opts.sm_budget,
                        overlap=opts.overlap is not None,  # --overlap: auto picks for it
                        **settings)


def check_collectives(wanted: Sequence[str] | None, gpu: bool, collectives: Sequence[str],
                      nodes: int, where: str) -> tuple[str, ...]:
    """Raise :class:`BenchError` (alike on every rank) for an ``--algo`` that implements none
    of ``collectives``, or that needs every rank on one node while the communicator spans
    ``nodes`` (``where`` describes them); returns the node-scoped rows the default sweep
    leaves out (none on one node)."""
    for algo in wanted or ():
        if not any(implements(algo, c) for c in collectives):
            raise BenchError(f"--algo {algo}: has no {' or '.join(collectives)}; for "
                             f"{', '.join(collectives)} choose from "
                             + ", ".join(dict.fromkeys(a for c in collectives
                                                       for a in runnable(gpu, c))))
    if nodes == 1:
        return ()
    scoped = tuple(dict.fromkeys(a for c in collectives for a in node_only(gpu, c)))
    asked = [a for a in wanted or () if a in scoped]
    if asked:
        choices = dict.fromkeys(a for c in collectives for a in runnable(gpu, c, nodes))
        raise BenchError(f"--algo {','.join(asked)}: {'it runs' if len(asked) == 1 else 'they run'}"
                         f" only where every rank is on one node (node memory: CUDA IPC, shared "
                         f"memory), and this communicator spans {where}; choose from "
                         f"{', '.join(choices)}")
    return () if wanted else scoped


def setup(opts: BenchOptions, world: Any, reporter: Reporter,
          algos_for: Callable[[bool], Sequence[str]] | None = None) -> Sweep:
    """Collective: GPU or host (:mod:`mpiring.bench.mode`), communicator, memory space, sizes;
    raises BenchError on every rank. ``algos_for(gpu)``, when given, replaces ``opts.algos``
    once the mode is known."""
    try:
        mode = choose(opts.memory, world)
        wanted = algos_for(mode.gpu) if algos_for else opts.algos
        check_algorithms(wanted, mode.gpu, tuple(dict.fromkeys(
            a for c in opts.collectives for a in runnable(mode.gpu, c))), mode.reason)
    except ModeError as err:
        raise BenchError(str(err)) from err
    gpu = mode.gpu
    if opts.timing == "graph" and not gpu:
        raise BenchError(f"-G/--graph needs GPUs: it captures the calls in a CUDA graph, but "
                         f"this run benchmarks host arrays ({mode.reason}); drop it to time "
                         "host arrays")
    if opts.overlap and not gpu:
        raise BenchError(f"--overlap {opts.overlap} needs GPUs: it runs a CuPy matmul beside "
                         f"the allreduce on each rank's GPU, but this run benchmarks host "
                         f"arrays ({mode.reason}); drop --overlap to benchmark the host transport")
    if opts.timing == "gpu" and not gpu:  # GPU time where it can be had: eager on the host
        opts = replace(opts, timing="eager")
    try:
        dtype = resolve_dtype(opts.dtype)
        lo, hi = opts.size_range(gpu)
        steps = sweep(lo, hi, opts.stepfactor, opts.stepbytes)
        sizes_of = {c: element_counts(steps, dtype.itemsize, world.size, c)
                    for c in opts.collectives}
        for c, sizes in sizes_of.items():
            if not sizes:
                per = "" if c == ALLREDUCE else f" per rank ({world.size} ranks, {c})"
                raise ValueError(f"no size between {lo} and {hi} bytes holds one "
                                 f"{opts.dtype}{per}")
    except ValueError as err:
        raise BenchError(str(err)) from err
    try:
        comm = _communicator(opts, gpu)
    except Exception as err:  # raised on every rank by the library's collective set-up
        raise BenchError(f"cannot create the mpiring communicator: {type(err).__name__}: "
                         f"{err}") from err
    variants: dict[str, Any] = {}
    for row in _variants(wanted, opts.reproducible):
        try:
            variants[row] = _communicator(opts, gpu, row)
        except Exception as err:  # raised on every rank alike, as above
            _close(comm, variants)
            raise BenchError(f"cannot create the communicator of {row} "
                             f"({_settings(row)}): {type(err).__name__}: {err}") from err
    try:
        space = agree(world, lambda: make_space(gpu, dtype, world.size))
    except StageFailed as err:
        _close(comm, variants)
        raise BenchError("cannot set up the benchmark buffers: " + "; ".join(err.errors)) from err
    topo = comm.topology
    try:
        left_out = check_collectives(wanted, gpu, opts.collectives, topo.nodes, topo.describe())
        baseline = choose_baseline(opts.baseline, gpu, opts.collectives, topo.nodes)
    except BenchError:
        _close(comm, variants)
        raise
    algos_of, baseline = arrange({c: _algorithms(wanted, gpu, c, topo.nodes, opts.reproducible)[0]
                                  for c in opts.collectives}, baseline, bool(opts.baseline))
    algos = list(dict.fromkeys(a for c in opts.collectives for a in algos_of[c]))
    reporter.set_baseline(baseline, overlap=opts.overlap_shapes, placements=opts.placements,
                          algos=algos)
    sw = Sweep(opts, world, comm, space, reporter, "gpu" if gpu else "host", algos, baseline,
               sizes_of[opts.collectives[0]], dtype, note=_note(mode.note, opts.collectives),
               algos_of=algos_of,
               sizes_of=sizes_of, left_out=left_out, nodes=topo.nodes, variants=variants)
    if any(is_rival(a) for a in algos):
        start_rivals(sw)
        _fall_back(sw)
    if opts.overlap:
        _set_up_overlap(sw)
    return sw


def _fall_back(sw: Sweep) -> None:
    """A default baseline that cannot run here (a direct row the rivals' start skipped) gives
    way to the table's row it wraps, where the sweep holds it (:func:`.baseline.fall_back`)."""
    algos_of, baseline = fall_back(sw.baseline, bool(sw.opts.baseline), sw.skipped, sw.algos_of)
    if baseline == sw.baseline:
        return
    sw.algos_of, sw.baseline = algos_of, baseline
    sw.algos = list(dict.fromkeys(a for c in sw.collectives for a in algos_of[c]))
    sw.reporter.set_baseline(baseline, overlap=sw.opts.overlap_shapes,
                             placements=sw.opts.placements, algos=sw.algos)


def _settings(row: str) -> str:
    """A variant's communicator settings, as its keyword arguments read: ``reproducible=True``."""
    return ", ".join(f"{k}={v!r}" for k, v in VARIANTS[row].settings.items())


def _close(comm: Any, variants: dict[str, Any]) -> None:
    """Collective: close the main communicator, then the variants' (set-up gave up)."""
    comm.close()
    for other in variants.values():
        other.close()


def _note(note: str, collectives: Sequence[str]) -> str:
    """The banner's host-run sentence, naming MPI's collectives this run compares with."""
    mpi = ", ".join(f"MPI.{MPI_NAMES[c]}" for c in collectives)
    return note.replace("MPI.Allreduce", mpi)


def _set_up_overlap(sw: Sweep) -> None:
    """Collective: the GEMM loads of --overlap's shapes, calibrated (mpiring.bench.loads)."""
    from .carveout import sms_left
    from .loads import set_up

    opts = sw.opts
    try:  # the GEMMs leave mpiring its budget, unless --gemm-sms says otherwise
        gemm_sms = opts.gemm_sms or sms_left(sw.comm.sm_budget)
        sw.overlap = set_up(sw.world, opts.overlap_shapes, opts.gemm_size, opts.train_gemm_size,
                            opts.seed + sw.rank, opts.reps, gemm_sms, opts.overlap_slowdowns)
    except StageFailed as err:
        sw.close()
        raise BenchError(f"cannot set up the GEMMs of --overlap {opts.overlap} (--gemm-size "
                         f"{opts.gemm_size}, --train-gemm-size {opts.train_gemm_size}): "
                         + "; ".join(err.errors)) from err
    except BenchError:
        sw.close()
        raise
    except ValueError as err:  # the budget leaves the GEMMs no SM: the same on every rank
        sw.close()
        raise BenchError(str(err)) from err
    sw.overlap_line = sw.overlap.describe()


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


def _rebuild(sw: Sweep) -> None:
    """Collective: replace a communicator that failed mid-call by a fresh one, and the
    variants' communicators alike (made as in :func:`setup`)."""
    gpu = sw.mode == "gpu"
    with contextlib.suppress(Exception):  # a failed communicator may not close cleanly
        sw.comm.close()
    sw.comm = _remake(sw.opts, gpu)
    for row, comm in sw.variants.items():
        with contextlib.suppress(Exception):
            comm.close()
        sw.variants[row] = _remake(sw.opts, gpu, row)


def _remake(opts: BenchOptions, gpu: bool, row: str = "") -> Any:
    """Collective: :func:`_communicator` again, after an error; BenchError if that fails."""
    try:
        return _communicator(opts, gpu, row)
    except Exception as err:
        whose = f" of {row}" if row else ""
        raise BenchError(f"cannot recreate the communicator{whose} after an error: {err}") from err


def runs_of(sw: Sweep) -> list[tuple[int, int, list[Point]]]:
    """The sweep's order: collective after collective; in each, ``(bytes, count, points)`` per
    size, every algorithm at each size; for nccl-tests' output, one algorithm (and batches
    value) through every size, then the next, so that each of its tables streams line by
    line."""
    out = []
    for c in sw.collectives:
        per_size = [(nbytes, count, sw.points_of(nbytes, count, c))
                    for nbytes, count in sw.sizes_of.get(c, sw.sizes)]
        if sw.opts.output_format != "nccl-tests":
            out += per_size
            continue
        groups = list(dict.fromkeys((p.algo, p.batches) for _, _, pts in per_size for p in pts))
        out += [(nbytes, count, [p for p in pts if (p.algo, p.batches) == group])
                for group in groups for nbytes, count, pts in per_size]
    return out


def run_sweep(sw: Sweep) -> list[Row]:
    """Collective: measure every point, or those before ``sw.stop`` said to stop; returns the
    rows (the same on every rank)."""
    opts, rep = sw.opts, sw.reporter
    policy = TimingPolicy(budget_s=opts.time_budget, reps=opts.reps, max_iters=opts.max_iters,
                          iters=opts.iters, warmup=opts.warmup, average=opts.average)
    runs = runs_of(sw)
    rep.start(sum(len(points) for _, _, points in runs))
    current = ALLREDUCE
    for nbytes, count, points in runs:
        if sw.should_stop():
            break
        if points and points[0].collective != current and opts.output_format != "nccl-tests":
            current = points[0].collective
            rep.note(f"{current}: size = the whole buffer, count = elements per rank",
                     style="bold")
        rep.working_on(f"{format_size(nbytes)}")
        live = [p for p in points if sw.gone(p) is None]
        if not live:
            _unmeasured(sw, points, "")
            continue
        fits, why = _fits(sw, count)
        if not fits:
            rep.note(f"{format_size(nbytes)}: skipped, {why}")
            _unmeasured(sw, points, why)
            continue
        _run_size(sw, policy, nbytes, count, points)  # rows in sweep order, unavailable ones too
        if len(live) > 1:
            rep.section()
    rep.stop()
    return sw.rows


def _unmeasured(sw: Sweep, points: list[Point], why: str) -> None:
    """The rows of points not measured: "unavailable" for algorithms that cannot run here,
    "skipped" (``why``) for the others."""
    for p in points:
        gone = sw.gone(p)
        sw.add(make_row(sw, p, Outcome("unavailable", "-", gone) if gone is not None
                        else Outcome("skipped", "-", why)))
    sw.reporter.advance(len(points))


def _run_size(sw: Sweep, policy: TimingPolicy, nbytes: int, count: int,
              points: list[Point]) -> None:
    opts, rep, space = sw.opts, sw.reporter, sw.space
    seed = point_seed(opts.seed, nbytes, opts.dtype, opts.op)
    gen = InputGenerator(space.xp, opts.op, sw.dtype, sw.world.size, seed)
    collective = points[0].collective
    try:
        bufs = agree(sw.world, lambda: SizeBuffers(space, gen, count, sw.rank,
                                                   cache=sw.mode == "host",
                                                   collective=collective))
    except StageFailed as err:
        why = f"could not allocate or fill buffers: {err.errors[0]}"
        rep.note(f"{format_size(nbytes)}: skipped, {why}")
        _unmeasured(sw, points, why)
        agree(sw.world, space.release)
        return
    # Straight-line, no try/finally: the release below is collective, and an unexpected
    # exception on one rank ends the job (see __main__) rather than a collective clean-up.
    for i, p in enumerate(points):
        if i and sw.should_stop():  # (the sweep asked before the first)
            break
        gone = sw.gone(p)
        if gone is not None:
            sw.add(make_row(sw, p, Outcome("unavailable", "-", gone)))
            rep.advance()
            continue
        rep.working_on(f"{format_size(nbytes)} {p.algo} batches={p.batches_label} "
                       f"{p.placement}")
        comm, algorithm = target(sw, p.algo)
        measurer = PointMeasurer(sw.world, comm, space, policy, check=opts.check,
                                 time_agreement=opts.time_agreement,
                                 mpi_op=MPI_OPS[opts.op], in_place=MPI.IN_PLACE,
                                 overlap=sw.overlap, graph=in_graph(opts, p.algo),
                                 graph_launches=opts.graph_launches, blocking=opts.blocking,
                                 algorithm=algorithm)
        out = measure_rival(sw, measurer, p, bufs) if is_rival(p.algo) else measurer.measure(p, bufs)
        row = make_row(sw, p, out)
        row.speedup = speedup(sw, row)
        sw.add(row)
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
    if out.status == "unavailable":  # for the whole run (a variant's: the collective's)
        why = reason(out.note)
        sw.give_up(p, why)  # its later points are not tried
        rep.note(f"{p.algo}: unavailable ({why})", style="dim")
        return
    if out.status == "inapplicable" and p.algo not in sw.inapplicable:
        sw.inapplicable.add(p.algo)  # noted once; its rows say n/a
        rep.note(f"{p.algo}: n/a from {format_size(p.nbytes)} ({reason(out.note)})",
                 style="dim")
    if out.overlap is not None and out.overlap.notes:
        rep.note(f"{format_size(p.nbytes)} {p.algo}: {out.overlap.notes}")
    rep.row(row)
    if out.status in ("fail", "error"):
        for extra in out.errors[1:6]:
            rep.note(f"  {extra}", style="red")
        if len(out.errors) > 6:
            rep.note(f"  ... and {len(out.errors) - 6} more", style="red")
