"""The tuner's ``--overlap`` sweep: which candidate of auto hides best beside compute.

Training runs gradient allreduces beside matmuls, and what it pays is how long the two take
together, not the allreduce alone: an algorithm whose kernels take SMs from the GEMM can win
alone and lose beside it. With ``--overlap``, after its eager (and graph) sweeps the tuner
measures every eager candidate at every size once more with the benchmark's own overlap
machinery (``python -m mpiring.bench --overlap gemm``: :mod:`mpiring.bench.overlap`,
:mod:`mpiring.bench.overlap_run`, :mod:`mpiring.bench.loads`): per size a fixed amount of work,
``k`` calls and ``g`` GEMMs of N x N float16 on a second stream, fixed by the first candidate
measured there so that every candidate does the same work; ``T_both``, the makespan of both
from one start until both are done, is the slowest rank's median over the repetitions. At each
size the smallest ``T_both`` wins (:func:`mpiring.auto.table.from_timings`, the times
being makespans: :func:`mpiring.bench.tunefile.makespan_timings`), which gives the table's
``overlap`` entries; ``Communicator.allreduce(..., overlap=True)`` reads them.

The GEMM runs on GPUs only: on the host transport ``--overlap`` is refused before anything is
measured (:func:`require_gpus`). The tests drive the sweep on the host with the simulated
timeline of ``tests/mpi``, through :func:`require_gpus` and :func:`mpiring.bench.runner.setup`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .cli import BenchOptions
from .overlap import GEMM
from .sizes import format_size
from .tunefile import Timing, makespan_timings, sizes_text

SHAPE = GEMM  # the workload of --overlap: one GEMM stream, the allreduce starting with it
METRIC = ("T_both: the makespan of the point's calls and the GEMMs on another stream, from one "
          "start until both are done (the slowest rank's median; python -m mpiring.bench "
          "--overlap gemm); the smallest wins")


def bench_options(bench: BenchOptions) -> BenchOptions:
    """The benchmark options of the overlap sweep: the eager sweep's, beside ``--overlap gemm``
    (the GEMM's size the benchmark's default, ``--gemm-size``), measuring the makespan only
    (not the slowdowns, which would take as long again)."""
    return replace(bench, timing="eager", overlap=SHAPE, overlap_slowdowns=False)


def require_gpus(bench: BenchOptions, world: Any) -> None:
    """Collective: raise :class:`BenchError` on every rank unless this run tunes GPUs (the
    overlap sweep runs a CuPy GEMM beside each call); called before anything is measured, so a
    host run stops at once rather than after its eager sweep."""
    from .command import BenchError
    from .mode import ModeError, choose

    try:
        mode = choose(bench.memory, world)
    except ModeError as err:
        raise BenchError(str(err)) from err
    if not mode.gpu:
        raise BenchError(f"--overlap needs GPUs: it times each candidate beside a CuPy GEMM on "
                         f"each rank's GPU (python -m mpiring.bench --overlap gemm), but this run "
                         f"tunes the host transport ({mode.reason}): drop --overlap")


def finish(sweep: Any | None, nranks: int, reporter: Any,
           prog: str) -> tuple[list[Timing], dict[str, Any]]:
    """The overlap sweep's makespans, as the table's times (``sweep`` is the tuner's record of
    it: rows, sizes, candidates, metadata, workload; None: no overlap sweep, nothing), and what
    the table's ``runs`` entry says of it; reports the sizes at which no makespan was measured."""
    if sweep is None:
        return [], {}
    times = makespan_timings(sweep.rows, nranks)
    missing = unmeasured(sweep.rows, times)
    if missing:
        reporter.error(f"{prog}: no makespan measured at {', '.join(missing)} (see the notes "
                       f"above): the overlap entries skip {'it' if len(missing) == 1 else 'them'}")
    info = {"overlap sizes": sizes_text(sweep.sizes), "overlap candidates": list(sweep.algos),
            "overlap measured": sweep.meta.get("date"), "overlap workload": sweep.workload,
            "overlap metric": METRIC}
    return times, info


def unmeasured(rows: Sequence[Any], times: Sequence[Timing]) -> list[str]:
    """The sizes at which some candidate was timed but no makespan measured (each a gap in the
    overlap ladder: the next measured size's winner covers it), as text."""
    have = {nbytes for _, nbytes, _, _ in times}
    missing = sorted({r.size_bytes for r in rows if r.timed} - have)
    return [format_size(s) for s in missing]
