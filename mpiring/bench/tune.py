"""``python -m mpiring.bench.tune``: measure what ``algorithm="auto"`` may pick, on this machine, and
write the tuning table it reads.

    mpirun -n 4 python -m mpiring.bench.tune                          # writes mpiring-tuning-4.json
    mpirun -n 2 python -m mpiring.bench.tune --merge mpiring-tuning-4.json   # adds the 2-rank table
    MPIRING_TUNING_FILE=$PWD/mpiring-tuning-4.json python train.py

Every candidate of :func:`mpiring.algorithms.auto_candidates` that can run here is measured at
every size by the benchmark's own code (each point checked element by element, then timed;
float32 sum; the median of the slowest rank), and at each size the fastest wins
(:func:`mpiring.algorithms.auto.from_timings`). Candidates are compared by GPU time: their calls are
replayed from a CUDA graph, except the ring's, which cannot be captured and runs eagerly
(it wins only at sizes where its GPU time dwarfs its host work). Eager small calls are all
bound by Python's launch overhead, so timing them eagerly would pick by noise. A candidate
that rejects a size (one-shot above its limit) or cannot run at all (no NCCL) is simply no
candidate there.

On the host transport (``--host``, or a machine without GPUs) the only candidate is ``ring``
(``mpi`` is no candidate of auto), so the table says ``ring`` for every size: that mode exists
so the command can be tested without GPUs. A machine whose GPUs CuPy cannot use is an error,
as in the benchmark (:mod:`mpiring.bench.mode`).

Only rank 0 prints and writes. Exit status: 0 table written; 1 a correctness check failed
(nothing written: fix the algorithm first); 2 some points raised errors (table written from
the others); 3 the run could not go on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..algorithms import auto_candidates
from ..algorithms.auto import Entry, TuningTable, from_timings, load, to_json
from ..errors import InvalidArgumentError
from .argtypes import RankZeroParser, int_at_least, positive_float, size_arg
from .cli import Options as BenchOptions
from .cli import parse_args as bench_defaults
from .sizes import GPU_DEFAULT, HOST_DEFAULT, format_size

DTYPE, OP = "float32", "sum"

DESCRIPTION = f"""\
Measure the candidates of algorithm="auto" ({', '.join(auto_candidates())}) at every message
size, one rank per GPU, and write the table auto reads: at each size the fastest (median of
the slowest rank, float32 sum, every point checked before it is timed). Use the file with
MPIRING_TUNING_FILE=<file>. On a machine without GPUs (or with --host) it tunes the host
transport, whose only candidate is ring: the table is all ring, for testing this command.
A machine whose GPUs CuPy cannot use is an error naming CuPy's error (see --host).
"""

EPILOG = """\
examples (Open MPI; one rank per GPU):
  mpirun -n 4 python -m mpiring.bench.tune
  mpirun -n 2 python -m mpiring.bench.tune --merge mpiring-tuning-4.json -o mpiring-tuning.json
  mpirun -n 4 python -m mpiring.bench.tune -b 64K -e 1G -f 4 --output /tmp/t.json

exit status: 0 table written, 1 a correctness check failed (nothing written), 2 some
points raised errors (table written from the rest), 3 the run could not go on.
"""


@dataclass(frozen=True)
class TuneOptions:
    bench: BenchOptions  # what the measurement runs with
    output: str | None
    merge: str | None

    def destination(self, nranks: int) -> Path:
        """Where the table goes: ``--output``, else the ``--merge`` file, else
        ``mpiring-tuning-<nranks>.json`` here."""
        return Path(self.output or self.merge or f"mpiring-tuning-{nranks}.json")


def build_parser() -> argparse.ArgumentParser:
    p = RankZeroParser(prog="python -m mpiring.bench.tune", description=DESCRIPTION,
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", "--minbytes", type=size_arg, metavar="SIZE",
                   help=f"smallest message (default {GPU_DEFAULT[0]})")
    p.add_argument("-e", "--maxbytes", type=size_arg, metavar="SIZE",
                   help=f"largest message (default {GPU_DEFAULT[1]} on GPUs, {HOST_DEFAULT[1]} "
                        "on the host)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0, metavar="F",
                   help="multiply the size by F from one point to the next (default 2)")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="the table's file (default: the --merge file, else "
                        "mpiring-tuning-<ranks>.json in the current directory)")
    p.add_argument("--merge", metavar="FILE",
                   help="an existing table file: keep its tables for other rank counts, add or "
                        "replace this rank count's, write the result (to FILE unless --output)")
    p.add_argument("--host", action="store_true",
                   help="tune the host transport even where GPUs exist (the table is all "
                        "'ring': for testing)")
    p.add_argument("--time-budget", type=positive_float, default=0.15, metavar="S",
                   help="seconds of timed iterations per point (default 0.15)")
    p.add_argument("--reps", type=int_at_least(1), default=5, metavar="N",
                   help="timed repetitions per point; the median counts (default 5)")
    p.add_argument("--timeout", type=positive_float, metavar="S",
                   help="seconds mpiring waits for a peer before raising (default: "
                        "MPIRING_TIMEOUT or 300)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="colours and live progress bar (as in mpiring.bench)")
    return p


def parse_args(argv: Sequence[str] | None = None) -> TuneOptions:
    """Parse ``argv`` (default ``sys.argv[1:]``); exits with status 2 on a bad option."""
    parser = build_parser()
    args = list(sys.argv[1:] if argv is None else argv)
    ns = parser.parse_args(args)
    if not ns.stepfactor > 1:
        parser.error(f"-f/--stepfactor must be greater than 1, got {ns.stepfactor}")
    for flag, value in (("-b/--minbytes", ns.minbytes), ("-e/--maxbytes", ns.maxbytes)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1 byte")
    if ns.minbytes is not None and ns.maxbytes is not None and ns.maxbytes < ns.minbytes:
        parser.error("-e/--maxbytes is below -b/--minbytes")
    bench = replace(bench_defaults([]), minbytes=ns.minbytes, maxbytes=ns.maxbytes,
                    stepfactor=ns.stepfactor, algos=auto_candidates(), batches=("auto",),
                    dtype=DTYPE, op=OP, placements=("out",), check=1, host=ns.host,
                    plot=False, time_budget=ns.time_budget, reps=ns.reps, timeout=ns.timeout,
                    progress=ns.progress, argv=tuple(args), timing="eager" if ns.host else "gpu")
    return TuneOptions(bench, ns.output, ns.merge)


def candidates(gpu: bool) -> tuple[str, ...]:
    """Auto's candidates that can reduce GPU (or host) arrays."""
    from .algorithms import runnable

    return tuple(a for a in auto_candidates() if a in runnable(gpu))


def timings(rows: Sequence[Any], nranks: int) -> list[tuple[int, int, str, float]]:
    """``(ranks, bytes, algorithm, seconds)`` of every timed candidate point (bench rows)."""
    return [(nranks, r.size_bytes, r.algo, r.time_us * 1e-6) for r in rows
            if r.timed and r.algo in auto_candidates()]


def merge_problem(base: TuningTable | None, mode: str) -> str:
    """Why this run's table must not go into ``base`` (its other tables were measured on the
    other transport), or ""."""
    runs = (base.meta.get("runs") or {}) if base else {}
    other = sorted(k for k, run in runs.items() if isinstance(run, dict)
                   and run.get("mode") not in (None, mode))
    if not other:
        return ""
    return (f"the --merge file's tables for {', '.join(other)} ranks were measured on the "
            f"{'host' if mode == 'gpu' else 'GPU'} transport, this run on the {mode} one: "
            "keep them in separate files")


def make_table(times: Sequence[tuple[int, int, str, float]], nranks: int, run: dict[str, Any],
               base: TuningTable | None = None) -> TuningTable:
    """This run's table for ``nranks`` (from ``times``), over ``base``'s tables for other rank
    counts; ``run`` (machine, date, ...) is kept in the metadata under ``runs``."""
    built = from_timings(times)
    if nranks not in built:
        raise ValueError(f"no timings for {nranks} ranks")
    tables = dict(base.tables) if base else {}
    tables[nranks] = built[nranks]
    meta = dict(base.meta) if base else {}
    meta.update(dtype=DTYPE, op=OP)
    meta["runs"] = {**(meta.get("runs") or {}), str(nranks): run}
    return TuningTable(tables, str(run.get("machine", "")), str(run.get("measured", "")), meta)


def table_lines(entries: Sequence[Entry]) -> list[str]:
    """One line per entry: ``up to 256 KiB   oneshot``, ..., ``above 64 MiB    ring``."""
    lines, below = [], 0
    for max_bytes, algo in entries:
        if max_bytes is not None:
            span = f"up to {format_size(max_bytes)}"
            below = max_bytes
        else:
            span = f"above {format_size(below)}" if below else "every size"
        lines.append(f"{span:<18} {algo}")
    return lines


def table_json(table: TuningTable) -> str:
    """``table`` as JSON text: metadata indented, then one line per rank count's table."""
    doc = to_json(table)
    tables = doc.pop("tables")
    head = json.dumps(doc, indent=1)[:-2]  # without the closing "\n}"
    rows = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in tables.items())
    return f'{head},\n "tables": {{\n{rows}\n }}\n}}\n'


def write_table(path: Path, table: TuningTable) -> Path:
    """Write ``table`` as JSON, replacing ``path`` in one step (a reader never sees half)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(table_json(table))
    os.replace(tmp, path)
    return path


def destination_problem(opts: TuneOptions, nranks: int) -> tuple[str, TuningTable | None]:
    """Before measuring: a reason the table could not be written (or "") and the --merge
    file's tables."""
    base = None
    if opts.merge:
        if not Path(opts.merge).is_file():
            return (f"--merge {opts.merge}: no such file (drop --merge to write a new table)",
                    None)
        try:
            base = load(opts.merge)
        except (InvalidArgumentError, TypeError, ValueError, AttributeError) as err:
            return f"--merge {opts.merge}: not a tuning table: {err}", None
    folder = opts.destination(nranks).resolve().parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        return f"cannot write into {folder} (missing or not writable): choose --output", base
    return "", base


# -- the collective command ----------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Tune on every rank of ``MPI.COMM_WORLD``; returns the exit status (see ``--help``)."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before anything initialises NCCL
    opts = parse_args(argv)  # exits on a bad option, alike on every rank

    from .command import run_on_world

    return run_on_world("mpiring.bench.tune", opts.bench.progress,
                        lambda world, reporter: _run(opts, world, reporter))


def _run(opts: TuneOptions, world: Any, reporter: Any) -> int:
    from . import metadata, runner, summary
    from .command import BenchError, exit_status

    problem, base = destination_problem(opts, world.size) if world.rank == 0 else ("", None)
    problem, base = world.bcast((problem, base), root=0)
    if problem:
        raise BenchError(problem)
    sw = runner.setup(opts.bench, world, reporter, algos_for=candidates)
    problem = merge_problem(base, sw.mode)
    if problem:
        sw.comm.close()
        raise BenchError(problem)
    meta = metadata.collect(world, mode=sw.mode, space=sw.space.describe(), settings={},
                            argv=list(opts.bench.argv), prog="mpiring.bench.tune")
    note = ("" if sw.mode == "gpu" else f"{sw.note}; 'ring' is auto's only candidate on the "
            "host, so the table is all ring (for testing this command)")
    reporter.banner("mpiring tuning: auto's candidates", summary.banner_lines(sw, meta), note)
    rows = runner.run_sweep(sw)
    sw.comm.close()
    for line in summary.summary_lines(rows, sw.baseline):
        reporter.print(f"# {line}")

    status = exit_status(rows)
    if status == 1:
        reporter.error("mpiring.bench.tune: a correctness check FAILED (rows marked FAIL): no table "
                       "written; fix the algorithm before tuning")
        return 1
    times = timings(rows, world.size)
    if not times:
        raise BenchError("no candidate was timed at any size: no table to write")
    run = {"machine": _machine(meta, world.size), "measured": meta["date"], "mode": sw.mode,
           "sizes": f"{format_size(sw.sizes[0][0])} .. {format_size(sw.sizes[-1][0])}",
           "candidates": list(sw.algos), "mpiring": meta.get("mpiring"),
           "nccl": meta.get("nccl"), "command": meta["command"]}
    table = make_table(times, world.size, run, base)
    _write_and_show(opts.destination(world.size), table, world, reporter)
    if status == 2:
        reporter.error("mpiring.bench.tune: some points raised errors (rows marked ERROR); the table "
                       "was built from the others")
    return status


def _write_and_show(path: Path, table: TuningTable, world: Any, reporter: Any) -> None:
    """Collective: rank 0 writes the file and prints this rank count's table."""
    from .command import BenchError

    problem = ""
    if world.rank == 0:
        try:
            write_table(path, table)
        except OSError as err:
            problem = f"could not write {path}: {err}"
    problem = world.bcast(problem, root=0)
    if problem:
        raise BenchError(problem)
    reporter.print(f"# auto's table for {world.size} ranks ({DTYPE} {OP}, {table.machine}):")
    for line in table_lines(table.tables[world.size]):
        reporter.print(f"#   {line}")
    reporter.print(f"# wrote {path} (tables for {', '.join(map(str, sorted(table.tables)))} "
                   f"ranks); use it with MPIRING_TUNING_FILE={path.resolve()}", soft_wrap=True)


def _machine(meta: dict[str, Any], nranks: int) -> str:
    host = str(meta.get("hostname", "?")).split(".")[0]
    gpus = meta.get("gpu_names") or []
    return f"{host}: {nranks} x {', '.join(gpus)}" if gpus else f"{host}: host transport"


if __name__ == "__main__":
    sys.exit(main())
