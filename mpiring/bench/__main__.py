"""``mpiexec -n 4 python -m mpiring.bench``: parse the options, run the sweep, write the files.

Run ``python -m mpiring.bench --help`` for the options.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any


def _stamp(world: Any) -> str:
    """One time stamp for the whole run (rank 0's, broadcast)."""
    return world.bcast(time.strftime("%Y%m%d-%H%M%S") if world.rank == 0 else None, root=0)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status (see ``--help``)."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before anything initialises NCCL
    from .cli import parse_args

    opts = parse_args(argv)  # exits on a bad option, alike on every rank

    from . import runner

    return runner.run_on_world("mpiring.bench", opts.progress,
                               lambda world, reporter: _run(opts, world, reporter))


def _run(opts: Any, world: Any, reporter: Any) -> int:
    from . import metadata, runner, summary
    from .results import write_csv, write_json

    sw = runner.setup(opts, world, reporter)
    # No try/finally around close(): it is collective, and after an exception on one rank the
    # others may be inside another collective; main() aborts the job then.
    settings = {k: v for k, v in vars(opts).items() if k != "argv"}
    meta = metadata.collect(world, mode=sw.mode, space=sw.space.describe(),
                            settings=settings, argv=list(opts.argv))
    if sw.overlap_line:
        meta["overlap"] = sw.overlap_line
    stamp = _stamp(world)
    title = "mpiring allreduce benchmark"
    note = ""
    if sw.mode == "host":
        note = runner.FORCED_HOST_NOTE if opts.host else runner.HOST_MODE_NOTE
    reporter.banner(title, summary.banner_lines(sw, meta), note)
    started = time.perf_counter()
    rows = runner.run_sweep(sw)
    elapsed = time.perf_counter() - started
    meta["elapsed_s"] = round(elapsed, 3)
    sw.comm.close()

    status = runner.exit_status(rows)
    # Rank 0 writes; the others wait so the run ends when the files exist.
    written: list[Path] = []
    problem = ""
    if world.rank == 0:
        try:
            out_dir = Path(opts.output_dir)
            out_dir.mkdir(parents=True, exist_ok=True)
            host = str(meta["hostname"]).split(".")[0]
            base = str(out_dir / f"{opts.name}_{host}_{stamp}")
            written.append(write_csv(base + ".csv", rows))
            written.append(write_json(base + ".json", rows, meta))
            if opts.plot:
                from .plot import plot_results

                written += plot_results(rows, meta, base)
        except Exception as err:  # noqa: BLE001 - report, keep the exit status meaningful
            problem = f"could not write results: {type(err).__name__}: {err}"
    problem = world.bcast(problem, root=0)

    for line in summary.summary_lines(rows, sw.baseline):
        reporter.print(f"# {line}")
    reporter.print(f"# {len(rows)} rows in {elapsed:.1f} s"
                   + ("" if written else "; no files written"))
    for path in written:
        reporter.print(f"# wrote {path}", soft_wrap=True)
    if problem:
        reporter.error(f"mpiring.bench: {problem}")
        status = max(status, 3)
    if status == 1:
        reporter.error("mpiring.bench: correctness check FAILED (rows marked FAIL)")
    elif status == 2:
        reporter.error("mpiring.bench: some points raised errors (rows marked ERROR)")
    return status


if __name__ == "__main__":
    sys.exit(main())
