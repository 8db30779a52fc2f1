"""The row of a measured point: its outcome in figures (times in microseconds, bandwidths,
the speed-up over the run's baseline), auto's pick and the mini-batches the calls ran with.

``sw`` is the run's :class:`~mpiring.bench.sweep.Sweep` (its communicators, rows so far,
world size); only its attributes are read. A row's communicator and the algorithm its calls
name come from :func:`~mpiring.bench.sweep.target`: ``auto-reproducible``'s pick is what
``auto`` resolves to on its communicator made with ``reproducible=True``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..algorithms import SmWork
from ..core.errors import MpiringError
from . import rivals
from .algorithms import AUTO, VARIANTS
from .capture import capture_guard
from .cli import in_graph
from .collectives import ALLREDUCE, kind, reported_count
from .measure import Outcome, Point
from .overlap import OverlapResult, sm_hold
from .results import MAKESPAN_COLUMNS, Row
from .stats import algbw, busbw
from .sweep import target


def resolved_pick(comm: Any, count: int, dtype: Any, collective: str = ALLREDUCE) -> str:
    """The algorithm ``auto`` runs for ``count`` elements (the whole buffer), where the
    communicator can say (``Communicator.resolve``); "?" if asking failed."""
    resolve = getattr(comm, "resolve", None)
    if resolve is None:
        return ""
    try:
        if collective == ALLREDUCE:
            return str(resolve(count, dtype, algorithm=AUTO))
        return str(resolve(count, dtype, algorithm=AUTO, collective=kind(collective)))
    except (MpiringError, ValueError, TypeError):
        return "?"


@contextlib.contextmanager
def _capturing(sw: Any) -> Iterator[None]:
    """Inside an empty CUDA graph capture where the row's calls are timed from a graph: auto
    then names the row it captured (it picks only capturable ones), not its eager pick."""
    cp = getattr(getattr(sw, "space", None), "cp", None)
    if cp is None or not in_graph(sw.opts, AUTO):
        yield
        return
    stream = cp.cuda.Stream(non_blocking=True)
    with stream, capture_guard():
        stream.begin_capture()
        try:
            yield
        finally:
            stream.end_capture()


def batches_used(sw: Any, p: Point) -> int | None:
    """The mini-batches the point's calls ran with; None where the algorithm has none, or
    refuses the point (an n/a row: one-shot above its limit, the ring inside a graph)."""
    if rivals.is_rival(p.algo):  # another library's row: no mini-batches
        return None
    comm, algo = target(sw, p.algo)
    try:
        if p.collective != ALLREDUCE and algo == AUTO:  # auto's pick for this collective
            algo = comm.resolve(p.count, sw.dtype, algorithm=AUTO, gpu=sw.mode == "gpu",
                                collective=kind(p.collective))
        return comm.batches_for(p.count, sw.dtype, gpu=sw.mode == "gpu", algorithm=algo,
                                batches=p.call_batches)
    except MpiringError:
        return None


RAN = ("ok", "fail")  # outcomes of calls that ran (timed, or with wrong results)


def stated_sm_work(sw: Any, p: Point, comm: Any, algorithm: str) -> SmWork | None:
    """What ``algorithm``'s row states of the point's allreduce on ``comm``
    (``Communicator.sm_work``): the SMs and blocks of its largest grid and its folds' traffic
    per byte; None for another library's row, a row that states nothing, or where asking failed."""
    ask = getattr(comm, "sm_work", None)
    if ask is None or rivals.is_rival(p.algo) or algorithm == AUTO:
        return None
    try:
        return ask(p.count, sw.dtype, gpu=sw.mode == "gpu", algorithm=algorithm, batches=p.call_batches)
    except MpiringError:
        return None


def make_row(sw: Any, p: Point, out: Outcome) -> Row:
    """The row of point ``p`` from its agreed outcome (the same on every rank)."""
    n = sw.world.size
    row = Row(size_bytes=p.nbytes, count=reported_count(p.collective, p.count, n), dtype=p.dtype,
              op=p.op, algo=p.algo, batches=p.batches_label, placement=p.placement, nranks=n,
              status=out.status, check=out.check, collective=p.collective, wrong=out.wrong,
              note=out.note, baseline=sw.baseline, batches_used=batches_used(sw, p),
              replayed=out.replayed)
    comm, algorithm = target(sw, p.algo)
    refused = p.algo in VARIANTS and out.status == "unavailable"  # its communicator said no
    if algorithm == AUTO and not refused:  # auto's pick, on the row's communicator
        with _capturing(sw):
            row.resolved = resolved_pick(comm, p.count, sw.dtype, p.collective)
    if p.collective == ALLREDUCE and out.status in RAN:
        picked = row.resolved if row.resolved not in ("", "?") else algorithm  # auto: its pick
        work = stated_sm_work(sw, p, comm, picked)
        if work is not None:
            row.stated_sms, row.stated_blocks, row.fold_traffic = work.sms, work.blocks, work.fold_traffic
    if out.overlap is not None:
        overlap_figures(row, out.overlap)
        picked = row.resolved if row.resolved not in ("", "?") else algorithm  # auto: its pick
        row.ar_sms, row.ar_sms_source = sm_hold(comm, picked)
    s = out.stats
    if s is not None:
        row.time_us, row.mean_us = s.median * 1e6, s.mean * 1e6
        row.min_us, row.max_us, row.std_us = s.min * 1e6, s.max * 1e6, s.std * 1e6
        row.algbw_gbs = algbw(p.nbytes, s.median)
        row.busbw_gbs = busbw(p.nbytes, s.median, n, p.collective)
        row.iters, row.warmup, row.reps = out.iters, out.warmup, out.reps
        row.slowest_rank = out.slowest_rank
    return row


def _us(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e6


def overlap_figures(row: Row, ov: OverlapResult) -> None:
    """Copy a point's --overlap figures into its row (microseconds), notes appended."""
    row.gemm_alone_us, row.gemm_overlap_us = _us(ov.gemm_alone_s), _us(ov.gemm_with_s)
    row.ar_alone_us, row.ar_overlap_us = _us(ov.ar_alone_s), _us(ov.ar_with_s)
    row.gemm_slowdown, row.ar_slowdown = ov.gemm_slowdown, ov.ar_slowdown
    for shape, m in ov.makespans.items():
        cols = MAKESPAN_COLUMNS[shape]
        for name, value in zip(cols, (m.gemms or None, m.calls or None, _us(m.t_gemm_s),
                                      _us(m.t_ar_s), _us(m.t_both_s), m.efficiency), strict=True):
            setattr(row, name, value)
    if ov.notes:
        row.note = "; ".join(n for n in (row.note, ov.notes) if n)


def speedup(sw: Any, row: Row) -> float | None:
    """Baseline median time / this median time, at the same collective, size and placement
    (the baseline runs first at every size)."""
    if not row.timed or row.time_us is None or not sw.baseline:
        return None
    for r in reversed(sw.rows):
        if (r.algo == sw.baseline and r.size_bytes == row.size_bytes
                and r.placement == row.placement and r.collective == row.collective
                and r.timed and r.time_us is not None):
            return float(r.time_us / row.time_us)
    return 1.0 if row.algo == sw.baseline else None


def reason(note: str) -> str:
    """An outcome's note without its "rank N: ErrorType: " prefix."""
    parts = note.split(": ", 2)
    return parts[-1] if len(parts) == 3 and parts[0].startswith("rank ") else note
