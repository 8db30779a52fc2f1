"""``mpiexec -n 4 python -m mpiring.bench`` (or ``mpiring-bench``): parse the options, check
what the run needs, run the sweep writing each row as it completes, then the JSON and figures.

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
    from .argtypes import _rank
    from .cli import parse_args
    from .files import missing_dependencies
    from .peers.env import multicast_off

    overridden = multicast_off()  # NVLink multicast off, before anything initialises NCCL/torch
    opts = parse_args(argv)  # exits on a bad option, alike on every rank
    if overridden and _rank() == 0:
        print("mpiring.bench: " + "; ".join(overridden), file=sys.stderr)
    problem = missing_dependencies(opts.plot)  # before the sweep, not after an hour of it
    if problem:
        if _rank() == 0:
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
    from . import metadata, runner, summary
    from .command import Interrupted, InterruptGuard, exit_status

    sw = runner.setup(opts, world, reporter)
    # No try/finally around close(): it is collective, and after an exception on one rank the
    # others may be inside another collective; the command's wrapper aborts the job then.
    settings = {k: v for k, v in vars(sw.opts).items() if k != "argv"}
    meta = metadata.collect(world, mode=sw.mode, space=sw.space.describe(),
                            settings=settings, argv=list(opts.argv))
    meta["benchmark"] = ",".join(sw.collectives)
    meta["baseline"] = sw.baseline  # the row every speed-up is against ("" for none)
    meta["sm_budget"] = sw.comm.sm_budget  # SMs mpiring's kernels may hold (None: no budget)
    if sw.peers is not None:
        meta["peers"] = {n: sw.peers.notes.get(n) or f"skipped: {sw.skipped.get(n, '?')}"
                         for n in sw.algos if n in sw.peers.notes or n in sw.skipped}
    if sw.left_out:
        meta["left_out"] = list(sw.left_out)  # node-scoped rows: the communicator spans nodes
    if sw.overlap_line:
        meta["overlap"] = sw.overlap_line
        meta["overlap_shapes"] = {s.name: s.label for s in sw.overlap.shapes}
    files = _open_files(opts, sw, meta, _stamp(world))
    sw.sink = files.add if files is not None else None
    reporter.banner(f"mpiring {', '.join(sw.collectives)} benchmark",
                    summary.banner_lines(sw, meta), sw.note)
    started = time.perf_counter()

    def save(signal_name: str) -> None:  # the watcher thread, as soon as a signal arrives
        if files is not None:
            files.finish(interrupted=signal_name,
                         elapsed_s=round(time.perf_counter() - started, 3))

    try:
        with InterruptGuard(save):
            rows = runner.run_sweep(sw)
    except (KeyboardInterrupt, Interrupted) as err:
        reporter.stop()
        name = "SIGTERM" if isinstance(err, Interrupted) else "SIGINT"
        if files is not None:
            save(name)
            files.close()
            reporter.note(f"interrupted by {name} after {len(files.rows)} rows: they are in "
                          f"{files.csv_path} and {files.json_path} (marked incomplete)",
                          style="bold yellow")
        raise
    elapsed = time.perf_counter() - started
    sw.close()

    status = exit_status(rows)
    # Rank 0 writes; the others wait so the run ends when the files exist.
    written: list[Path] = []
    problem = ""
    if files is not None:
        try:
            written.append(files.csv_path)
            written.append(files.finish(elapsed_s=round(elapsed, 3)))
            files.close()
            if opts.plot:
                from .plot import plot_results

                written += plot_results(rows, meta, files.base)
        except Exception as err:  # noqa: BLE001 - report, keep the exit status meaningful
            problem = f"could not write results: {type(err).__name__}: {err}"
    problem = world.bcast(problem, root=0)

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
