"""``mpiexec -n 4 python -m mpiring.bench`` (or ``mpiring-bench``): parse the options, check
what the run needs, run the sweep writing each row as it completes, then the JSON and figures.
Ctrl-C or SIGTERM stops the run between two points on every rank (:mod:`.command`), the files
marked incomplete.

Run ``python -m mpiring.bench --help`` for the options.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any


def _stamp(world: Any) -> str:
    """One time stamp for the whole run (rank 0's, broadcast)."""
    return str(world.bcast(time.strftime("%Y%m%d-%H%M%S") if world.rank == 0 else None, root=0))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status (see ``--help``)."""
    from .argtypes import launch_rank
    from .cli import parse_args
    from .files import missing_dependencies
    from .rivals.env import multicast_off

    overridden = multicast_off()  # NVLink multicast off, before anything initialises NCCL/torch
    opts = parse_args(argv)  # exits on a bad option, alike on every rank
    if overridden and launch_rank() == 0:
        print("mpiring.bench: " + "; ".join(overridden), file=sys.stderr)
    problem = missing_dependencies(opts.plot)  # before the sweep, not after an hour of it
    if problem:
        if launch_rank() == 0:
            print(f"mpiring.bench: {problem}", file=sys.stderr)
        return 3

    from .command import run_on_world

    return run_on_world("mpiring.bench", opts.progress,
                        lambda world, reporter: _run(opts, world, reporter),
                        plain=opts.output_format == "nccl-tests")


def _open_files(opts: Any, sw: Any, meta: dict[str, Any], stamp: str) -> Any:
    """Collective: rank 0 creates the CSV before the first point (a directory it cannot
    write stops the run now, on every rank); returns its :class:`ResultFiles`, or None
    on other ranks."""
    from .command import BenchError
    from .files import ResultFiles

    files, problem = None, ""
    if sw.world.rank == 0:
        host = str(meta["hostname"]).split(".")[0]
        files = ResultFiles(Path(opts.output_dir) / f"{opts.name}_{host}_{stamp}", meta)
        try:
            files.open()
        except OSError as err:
            problem = (f"cannot write results into {opts.output_dir}: {err}; choose another "
                       "--output-dir")
    problem = sw.world.bcast(problem, root=0)
    if problem:
        sw.close()
        raise BenchError(problem)
    return files


def _run(opts: Any, world: Any, reporter: Any) -> int:
    from mpi4py import MPI

    from . import metadata, runner, summary
    from .algorithms import VARIANTS
    from .command import InterruptGuard, interrupt_status

    sw = runner.setup(opts, world, reporter)
    # No try/finally around close(): it is collective, and after an exception on one rank the
    # others may be inside another collective; the command's wrapper aborts the job then.
    settings = {k: v for k, v in vars(sw.opts).items() if k != "argv"}
    meta = metadata.collect(world, mode=sw.mode, space=sw.space.describe(),
                            settings=settings, argv=list(opts.argv))
    meta["benchmark"] = ",".join(sw.collectives)
    meta["baseline"] = sw.baseline  # the row every speed-up is against ("" for none)
    meta["sm_budget"] = sw.comm.sm_budget  # SMs mpiring's kernels may hold (None: no budget)
    meta["noisy_rule"] = summary.NOISY_RULE
    if sw.rivals is not None:
        meta["rivals"] = {n: sw.rivals.notes.get(n) or f"skipped: {sw.skipped.get(n, '?')}"
                          for n in sw.algos if n in sw.rivals.notes or n in sw.skipped}
    if sw.left_out:
        meta["left_out"] = list(sw.left_out)  # node-scoped rows: the communicator spans nodes
    if sw.variants:  # rows calling an algorithm through a second communicator: which, and how made
        meta["variants"] = {n: {"algorithm": VARIANTS[n].algorithm, **VARIANTS[n].settings}
                            for n in sw.variants}
    if sw.overlap_line:
        meta["overlap"] = sw.overlap_line
        meta["overlap_shapes"] = {s.name: s.label for s in sw.overlap.shapes}
    files = _open_files(opts, sw, meta, _stamp(world))
    sw.sink = files.add if files is not None else None
    reporter.banner(f"mpiring {', '.join(sw.collectives)} benchmark",
                    summary.banner_lines(sw, meta), sw.note)
    if meta.get("oversubscribed"):
        reporter.note(summary.oversubscribed_note(meta), style="bold yellow")
    started = time.perf_counter()

    def elapsed_s() -> float:
        return round(time.perf_counter() - started, 3)

    def on_signal(name: str) -> None:  # the watcher thread, as soon as a signal arrives
        if files is not None:
            files.finish(interrupted=name, elapsed_s=elapsed_s())
            sys.stderr.write(f"mpiring.bench: {name}: stopping before the next point; the rows "
                             f"so far are in {files.json_path} (a second signal ends the job at once)\n")
            sys.stderr.flush()

    def on_overdue(name: str, why: str) -> None:  # the watcher thread: end the job
        if files is not None:
            files.finish(interrupted=name, elapsed_s=elapsed_s())
        else:
            time.sleep(2.0)  # rank 0 aborts first, its files saved
        sys.stderr.write(f"mpiring.bench: rank {world.rank}: {name}: {why}: ending the job "
                         "(MPI_Abort)\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(interrupt_status(name))

    guard = InterruptGuard(on_signal, on_overdue)
    sw.stop = lambda: guard.agreed(world)
    with guard:  # from here a signal stops the run between two points, on every rank
        runner.run_sweep(sw)  # the rows are in sw.rows
        elapsed = time.perf_counter() - started
        sw.close()
        if sw.stopped:
            return _stopped(sw, files, reporter, elapsed)
        return _finish(opts, sw, meta, files, reporter, elapsed)


def _stopped(sw: Any, files: Any, reporter: Any, elapsed: float) -> int:
    """The end of a run a signal stopped: the files marked incomplete, the summary of the rows
    so far; 128 + the signal's number."""
    from . import summary
    from .command import interrupt_status

    if files is not None:
        files.finish(interrupted=sw.stopped, elapsed_s=round(elapsed, 3))
        files.close()
    for line in summary.summary_lines(sw.rows, sw.baseline):
        reporter.print(f"# {line}", markup=False)
    where = "" if files is None else ": they are in " + ", ".join(map(str, files.paths))
    reporter.note(f"interrupted by {sw.stopped} after {len(sw.rows)} rows in {elapsed:.1f} s"
                  f"{where} (marked incomplete; no figures)", style="bold yellow")
    return interrupt_status(sw.stopped)


def _finish(opts: Any, sw: Any, meta: dict[str, Any], files: Any, reporter: Any,
            elapsed: float) -> int:
    """The end of a complete run: rank 0 writes the JSON and the figures, the others wait so
    the run ends when the files exist; the summary; the exit status."""
    from . import summary
    from .command import exit_status

    rows = sw.rows
    status = exit_status(rows)
    written: list[Path] = []
    problem = ""
    if files is not None:
        try:
            written += [files.csv_path, files.jsonl_path]
            written.append(files.finish(elapsed_s=round(elapsed, 3)))
            files.close()
            if opts.plot:
                from .plot import plot_results

                written += plot_results(rows, meta, files.base)
        except Exception as err:  # noqa: BLE001 - report, keep the exit status meaningful
            problem = f"could not write results: {type(err).__name__}: {err}"
    problem = sw.world.bcast(problem, root=0)

    for line in summary.summary_lines(rows, sw.baseline):
        reporter.print(f"# {line}", markup=False)
    reporter.print(f"# {len(rows)} rows in {elapsed:.1f} s"
                   + ("" if written else "; no files written"))
    for path in written:
        reporter.print(f"# wrote {path}", soft_wrap=True, markup=False)
    if problem:
        reporter.error(f"mpiring.bench: {problem}")
        status = max(status, 3)
    if status == 1:
        reporter.error("mpiring.bench: correctness check FAILED (rows with #wrong > 0)")
    elif status == 2:
        reporter.error("mpiring.bench: some points raised errors (rows marked ERROR)")
    return status


if __name__ == "__main__":
    sys.exit(main())
