"""``mpiring-tune`` (``python -m mpiring.bench.tune``): measure what ``algorithm="auto"`` may pick
on this machine, and write the tuning table it then uses here by itself. One rank per GPU, on
one node::

    mpiexec -n 2 mpiring-tune             # measure, write this user's table, print the path
    mpiexec -n 2 mpiring-tune --show      # which table auto uses here (measures nothing)
    mpiexec -n 2 mpiring-tune --overlap   # also: what hides best beside a GEMM
    mpiexec -n 4 mpiring-tune -o t.json; mpiexec -n 2 mpiring-tune --merge t.json  # one file, 2 and 4

Where the table goes: ``-o FILE``; else the ``--merge`` file; else
``<dir>/<gpu>-<ranks>x-<link>.json``, named for this machine's
:class:`~mpiring.auto.machine.MachineKey` (e.g. ``nvidia-h200-2x-nvlink.json``), where ``<dir>`` is
``$MPIRING_TUNING_DIR`` if set, else ``${XDG_CACHE_HOME:-~/.cache}/mpiring/tuning``. A
communicator on a node of the same key then uses it, unless ``MPIRING_TUNING_FILE`` names a table
that holds this machine (lookup order: :mod:`mpiring.auto.tuning`); ``comm.tuning.describe()``
says which table is in force. The ranks of a node must all find the same file (set-up checks it).

Every candidate of :func:`mpiring.algorithms.auto_candidates` that can run here is measured at
every size by the benchmark's own code (each point checked element by element, then timed;
float32 sum; the median of the slowest rank), twice: as eager calls (one Python call after the
other: what a training loop without graphs pays, bound by the host) and, on GPUs, replayed
from a CUDA graph (bound by the GPU; only the rows that can be captured: not the ring). At each
size the fastest wins (:func:`mpiring.auto.table.from_timings`; a size between two won by the
same other candidate, where that one is within :data:`~mpiring.auto.table.NOISE` of the
fastest, keeps it): the eager sweep gives the
table's ``eager`` entries, the graph sweep its ``graph`` entries, which auto uses while the
caller's stream is being captured. ``--overlap`` (GPUs) adds a third sweep beside a GEMM, the
smallest makespan winning, for the ``overlap`` entries (:mod:`mpiring.bench.tune_overlap`);
``--sm-budget N`` measures every sweep under that budget, for communicators of it (recorded in
``runs``: :mod:`mpiring.auto.tuning`). A candidate that rejects a size or cannot run (no NCCL) is no
candidate there. The file is labelled with the GPU model and link (:mod:`mpiring.auto.machine`).

On the host transport (``--host``, or a machine without GPUs) the only candidate is ``ring``
(``mpi`` is no candidate of auto), and there is no graph sweep, so the table says ``ring`` for
every size: that mode exists so the command can be tested without GPUs (``--overlap`` is
refused there). A machine whose GPUs CuPy cannot use is an error (:mod:`mpiring.bench.mode`).

``--show`` measures nothing: it prints which table auto uses here (``Communicator.tuning``).

Only rank 0 prints and writes. Exit status: 0 table written; 1 a correctness check failed
(nothing written); 2 some points raised errors (table from the others); 3 it could not go on.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import algorithms
from ..algorithms import auto_candidates
from ..auto.machine import MachineKey
from ..auto.table import TuningTable, load
from ..core.errors import InvalidArgumentError
from .argtypes import RankZeroParser, int_at_least, positive_float, size_arg
from .cli import BenchOptions
from .cli import parse_args as bench_defaults
from .sizes import GPU_DEFAULT, HOST_DEFAULT
from .tunefile import (
    DTYPE,
    OP,
    ladder_lines,
    make_table,
    merge_problem,
    sizes_text,
    table_json,
    table_lines,
    timings,
    write_table,
)

__all__ = ["DTYPE", "OP", "TuneOptions", "candidates", "destination_problem", "graph_candidates", "main",
           "make_table", "merge_problem", "parse_args", "table_json", "table_lines", "timings", "write_table"]

DESCRIPTION = f"""\
Measure the candidates of algorithm="auto" ({', '.join(auto_candidates())}) at every message
size, one rank per GPU, as eager calls and replayed from a CUDA graph, and write the table auto
reads: at each size the fastest (median of the slowest rank, float32 sum, every point checked
before it is timed), one set of entries per kind of call. With --overlap (GPUs only) also
beside a GEMM on another stream: the smallest makespan T_both (python -m mpiring.bench --overlap
gemm) at each size gives the entries auto uses for calls made with overlap=True.
{{where}}
On a machine without GPUs (or with --host) it tunes the host transport, whose only candidate
is ring: the table is all ring, for testing this command. A machine whose GPUs CuPy cannot use
is an error naming CuPy's error (see --host).
"""
WHERE = {False: "Use the file with MPIRING_TUNING_FILE=<file> (mpiring-tune writes\n"
                "where auto finds it by itself).",
         True: "The table goes to this user's tuning directory ($MPIRING_TUNING_DIR, else\n"
               "${XDG_CACHE_HOME:-~/.cache}/mpiring/tuning), named for the machine\n"
               "(<gpu>-<ranks>x-<link>.json), where auto finds it on this machine by itself."}

EPILOG = """\
examples (Open MPI; one rank per GPU):
  mpirun -n 4 {prog}
  mpirun -n 2 {prog} --merge mpiring-tuning-4.json -o mpiring-tuning.json
  mpirun -n 4 {prog} -b 64K -e 1G -f 4 --output /tmp/t.json
  mpirun -n 4 {prog} --overlap       # also what hides best beside a GEMM (overlap=True)
  mpirun -n 4 {prog} --show          # which table auto uses here; measures nothing

exit status: 0 table written, 1 a correctness check failed (nothing written), 2 some
points raised errors (table written from the rest), 3 the run could not go on.
"""


@dataclass(frozen=True)
class TuneOptions:
    bench: BenchOptions  # what the measurement runs with (its eager sweep)
    output: str | None
    merge: str | None
    per_user: bool = False  # mpiring-tune: the default file is the user's for this machine
    show: bool = False
    prog: str = "mpiring.bench.tune"  # the module run (python -m <prog>), for messages and metadata
    overlap: bool = False  # --overlap: a third sweep beside a GEMM gives the overlap entries

    def destination(self, nranks: int, key: MachineKey | None = None) -> Path:
        """Where the table goes: ``--output``, else the ``--merge`` file, else (``per_user``) the
        user's table for ``key`` (and ``--sm-budget``), else ``mpiring-tuning-<nranks>.json``."""
        if self.output or self.merge:
            return Path(self.output or self.merge or "")
        if self.per_user and key is not None:
            from ..auto.tuning import user_path

            return user_path(key, sm_budget=self.bench.sm_budget)
        return Path(f"mpiring-tuning-{nranks}.json")

    def folder(self) -> Path:
        """The folder the table goes into (known before the machine is)."""
        if self.per_user and not (self.output or self.merge):
            from ..auto.tuning import user_dir

            return user_dir()
        return self.destination(0).resolve().parent


def build_parser(prog: str = "python -m mpiring.bench.tune",
                 per_user: bool = False) -> argparse.ArgumentParser:
    p = RankZeroParser(prog=prog, description=DESCRIPTION.format(where=WHERE[per_user]),
                       epilog=EPILOG.format(prog=prog),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", "--minbytes", type=size_arg, metavar="SIZE",
                   help=f"smallest message (default {GPU_DEFAULT[0]})")
    p.add_argument("-e", "--maxbytes", type=size_arg, metavar="SIZE",
                   help=f"largest message (default {GPU_DEFAULT[1]} on GPUs, {HOST_DEFAULT[1]} "
                        "on the host)")
    p.add_argument("-f", "--stepfactor", type=float, default=2.0, metavar="F",
                   help="multiply the size by F from one point to the next (default 2)")
    default = ("this user's table for this machine" if per_user
               else "mpiring-tuning-<ranks>.json in the current directory")
    p.add_argument("-o", "--output", metavar="FILE",
                   help=f"the table's file (default: the --merge file, else {default})")
    p.add_argument("--merge", metavar="FILE",
                   help="an existing table file: keep its tables for other rank counts, add or "
                        "replace this rank count's, write the result (to FILE unless --output)")
    p.add_argument("--host", action="store_true",
                   help="tune the host transport even where GPUs exist (the table is all "
                        "'ring': for testing)")
    p.add_argument("--sm-budget", type=int_at_least(1), default=None, metavar="N",
                   help="measure with mpiring's kernels held to N SMs, for Communicator(sm_budget=N)")
    p.add_argument("--show", action="store_true",
                   help="measure nothing: print which table auto uses on this machine")
    p.add_argument("--overlap", action="store_true",
                   help="GPUs: also time the candidates beside a GEMM (as mpiring.bench --overlap "
                        "gemm); the smallest makespan T_both gives auto's overlap=True entries")
    p.add_argument("--time-budget", type=positive_float, default=0.15, metavar="S",
                   help="seconds of timed iterations per point (default 0.15)")
    p.add_argument("--reps", type=int_at_least(1), default=5, metavar="N",
                   help="timed repetitions per point; the median counts (default 5)")
    p.add_argument("--timeout", type=positive_float, metavar="S",
                   help="seconds a wait of mpiring's may go without progress from its peer "
                        "before it raises (default: MPIRING_TIMEOUT or 300)")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="colours and live progress bar (as in mpiring.bench)")
    return p


def parse_args(argv: Sequence[str] | None = None, prog: str = "python -m mpiring.bench.tune",
               per_user: bool = False) -> TuneOptions:
    """Parse ``argv`` (default ``sys.argv[1:]``); exits with status 2 on a bad option."""
    parser = build_parser(prog, per_user)
    args = list(sys.argv[1:] if argv is None else argv)
    ns = parser.parse_args(args)
    if not ns.stepfactor > 1:
        parser.error(f"-f/--stepfactor must be greater than 1, got {ns.stepfactor}")
    for flag, value in (("-b/--minbytes", ns.minbytes), ("-e/--maxbytes", ns.maxbytes)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1 byte")
    if ns.minbytes is not None and ns.maxbytes is not None and ns.maxbytes < ns.minbytes:
        parser.error("-e/--maxbytes is below -b/--minbytes")
    if ns.overlap and ns.show:
        parser.error("--show measures nothing: drop --overlap (or --show)")
    bench = replace(bench_defaults([]), minbytes=ns.minbytes, maxbytes=ns.maxbytes,
                    stepfactor=ns.stepfactor, algos=auto_candidates(), batches=("auto",),
                    dtype=DTYPE, op=OP, placements=("out",), check=1, host=ns.host,
                    plot=False, time_budget=ns.time_budget, reps=ns.reps, timeout=ns.timeout,
                    progress=ns.progress, argv=tuple(args), timing="eager", sm_budget=ns.sm_budget,
                    time_agreement=True)  # timed as users call: the agreement check on (the default)
    return TuneOptions(bench, ns.output, ns.merge, per_user, ns.show, prog.split()[-1],
                       ns.overlap)


def candidates(gpu: bool) -> tuple[str, ...]:
    """Auto's candidates that can reduce GPU (or host) arrays."""
    from .algorithms import runnable

    return tuple(a for a in auto_candidates() if a in runnable(gpu))


def graph_candidates(gpu: bool) -> tuple[str, ...]:
    """Auto's GPU candidates that can be captured into a CUDA graph (the graph sweep's)."""
    return tuple(a for a in candidates(gpu) if algorithms.get(a).graph_capturable)


def destination_problem(opts: TuneOptions, nranks: int) -> tuple[str, TuningTable | None]:
    """Before measuring: a reason the table could not be written (or "") and the --merge
    file's tables. Makes the user's tuning directory if it is the destination."""
    base = None
    if opts.merge:
        if not Path(opts.merge).is_file():
            return (f"--merge {opts.merge}: no such file (drop --merge to write a new table)",
                    None)
        try:
            base = load(opts.merge)
        except (InvalidArgumentError, TypeError, ValueError, AttributeError) as err:
            return f"--merge {opts.merge}: not a tuning table: {err}", None
    folder = opts.folder()
    if opts.per_user and not (opts.output or opts.merge):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            return (f"cannot make the tuning directory {folder}: {err}: set MPIRING_TUNING_DIR "
                    "or choose --output"), base
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        return f"cannot write into {folder} (missing or not writable): choose --output", base
    return "", base


# -- the collective command ----------------------------------------------------------------


def main(argv: Sequence[str] | None = None, prog: str = "mpiring-tune", per_user: bool = True) -> int:
    """Tune on every rank of ``MPI.COMM_WORLD``; returns the exit status (see ``--help``). By
    default the table goes to this user's place for this machine (``per_user``)."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before anything initialises NCCL
    opts = parse_args(argv, prog, per_user)  # exits on a bad option, alike on every rank

    from .command import run_on_world

    body = _show if opts.show else _run
    return run_on_world(opts.prog, opts.bench.progress,
                        lambda world, reporter: body(opts, world, reporter))


@dataclass
class _Sweep:
    """What one sweep measured, and where."""

    rows: list[Any]
    key: MachineKey
    mode: str
    meta: dict[str, Any]
    sizes: list[int]
    algos: list[str]
    workload: str = ""  # the overlap sweep's GEMM, in words


def _sweep(opts: TuneOptions, world: Any, reporter: Any, timing: str,
           algos_for: Callable[[bool], Sequence[str]], base: TuningTable | None) -> _Sweep:
    """Collective: one sweep of the candidates (``timing``: eager, graph or overlap: eager
    calls beside a GEMM), checked against the --merge file before anything is measured."""
    from . import metadata, runner, summary, tune_overlap
    from .command import BenchError

    bench = (tune_overlap.bench_options(opts.bench) if timing == "overlap"
             else replace(opts.bench, timing=timing))
    sw = runner.setup(bench, world, reporter, algos_for=algos_for)
    key = sw.comm.tuning.key
    problem = ("a tuning table serves the ranks of one node, and this run spans several: run it "
               "on one node" if key is None else merge_problem(base, sw.mode, key))
    if problem:
        sw.comm.close()
        raise BenchError(problem)
    assert key is not None
    meta = metadata.collect(world, mode=sw.mode, space=sw.space.describe(), settings={},
                            argv=list(opts.bench.argv), prog=opts.prog)
    kind = {"graph": "CUDA graph replays", "overlap": "eager calls beside a GEMM (makespan)"
            }.get(timing, "eager calls")
    note = ("" if sw.mode == "gpu" else f"{sw.note}; 'ring' is auto's only candidate on the "
            "host, so the table is all ring (for testing this command)")
    reporter.banner(f"mpiring tuning: auto's candidates, {kind} ({key.describe()})",
                    summary.banner_lines(sw, meta), note)
    rows = runner.run_sweep(sw)
    sw.comm.close()
    for line in summary.summary_lines(rows, sw.baseline):
        reporter.print(f"# {line}")
    return _Sweep(rows, key, sw.mode, meta, [s for s, _ in sw.sizes], list(sw.algos),
                  sw.overlap_line)


def _run(opts: TuneOptions, world: Any, reporter: Any) -> int:
    from . import tune_overlap
    from .command import BenchError, exit_status

    problem, base = destination_problem(opts, world.size) if world.rank == 0 else ("", None)
    problem, base = world.bcast((problem, base), root=0)
    if problem:
        raise BenchError(problem)
    if opts.overlap:
        tune_overlap.require_gpus(opts.bench, world)
    sweeps = {"eager": _sweep(opts, world, reporter, "eager", candidates, base)}
    if sweeps["eager"].mode == "gpu" and exit_status(sweeps["eager"].rows) != 1:
        sweeps["graph"] = _sweep(opts, world, reporter, "graph", graph_candidates, base)
    if opts.overlap and exit_status([r for s in sweeps.values() for r in s.rows]) != 1:
        sweeps["overlap"] = _sweep(opts, world, reporter, "overlap", candidates, base)
    status = exit_status([r for s in sweeps.values() for r in s.rows])
    if status == 1:
        reporter.error(f"{opts.prog}: a correctness check FAILED (rows marked FAIL): no table "
                       "written; fix the algorithm before tuning")
        return 1
    eager = sweeps["eager"]
    times = timings(eager.rows, world.size)
    if not times:
        raise BenchError("no candidate was timed at any size: no table to write")
    meta = eager.meta
    run = {"machine": _machine(meta, world.size), "measured": meta["date"], "mode": eager.mode,
           "key": list(eager.key), "sizes": sizes_text(eager.sizes), "candidates": eager.algos,
           "mpiring": meta.get("mpiring"), "commit": meta.get("commit"), "nccl": meta.get("nccl"),
           "command": meta["command"],
           "sm_budget": opts.bench.sm_budget}  # SMs mpiring's kernels were held to (None: none)
    graph_times: list[Any] = []
    if "graph" in sweeps:
        graph = sweeps["graph"]
        graph_times = timings(graph.rows, world.size)
        run.update({"graph sizes": sizes_text(graph.sizes), "graph candidates": graph.algos,
                    "graph measured": graph.meta["date"]})
    overlap_times, info = tune_overlap.finish(sweeps.get("overlap"), world.size, reporter,
                                              opts.prog)
    run.update(info)
    status = status or (2 if "overlap" in sweeps and not overlap_times else 0)
    table = make_table(times, world.size, run, base, graph_times=graph_times, key=eager.key,
                       overlap_times=overlap_times)
    _write_and_show(opts.destination(world.size, eager.key), table, eager.key, opts, world,
                    reporter)
    if status == 2:
        reporter.error(f"{opts.prog}: some points raised errors (rows marked ERROR) or no "
                       "makespan was measured; the table was built from the others")
    return status


def _write_and_show(path: Path, table: TuningTable, key: MachineKey, opts: TuneOptions,
                    world: Any, reporter: Any) -> None:
    """Collective: rank 0 writes the file and prints this rank count's table."""
    from ..auto.tuning import TUNING_FILE, user_path
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
    reporter.print(f"# auto's table for {key.describe()} ({DTYPE} {OP}, {table.machine}):")
    for line in ladder_lines(table, world.size):
        reporter.print(f"#   {line}")
    counts = ", ".join(map(str, sorted(table.tables)))
    if path.resolve() == user_path(key, sm_budget=opts.bench.sm_budget).resolve():
        reporter.print(f"# wrote {path} (tables for {counts} ranks): "
                       f"{use_of(path, key, opts.bench.sm_budget)}", soft_wrap=True)
    else:
        reporter.print(f"# wrote {path} (tables for {counts} ranks); use it with "
                       f"{TUNING_FILE}={path.resolve()}", soft_wrap=True)


def use_of(path: Path, key: MachineKey, sm_budget: int | None) -> str:
    """Whether auto will use the table just written to ``path`` on this machine, asked of the
    lookup a communicator makes (:func:`mpiring.auto.tuning.find`; ``--show`` prints its answer),
    so that what the tuner says is what ``--show`` then shows."""
    from ..auto import tuning

    if key.ranks == 1:
        return ("auto will not use it: a communicator of one rank reads no tuning table (it "
                "has a rule of its own; --show names it). The file records what was measured; "
                "tune on 2 or more ranks for a table auto uses")
    try:
        choice = tuning.find(key, given=tuning.explicit(), sm_budget=sm_budget)
    except InvalidArgumentError as err:
        return f"auto cannot use it: {err}"
    if choice.path is not None and Path(choice.path).resolve() == path.resolve():
        return f"auto uses it on this machine ({key.describe()}) from now on"
    return f"auto will not use it here; it uses {choice.describe()}"


def _show(opts: TuneOptions, world: Any, reporter: Any) -> int:
    """Collective: create a communicator and print which table auto uses (measures nothing)."""
    from mpi4py import MPI

    from ..communicator import Communicator
    from .command import BenchError

    try:
        comm = Communicator(MPI.COMM_WORLD, gpu=False if opts.bench.host else None,
                            timeout=opts.bench.timeout, sm_budget=opts.bench.sm_budget)
    except Exception as err:  # raised on every rank by the library's collective set-up
        raise BenchError(f"cannot create the mpiring communicator: {type(err).__name__}: "
                         f"{err}") from err
    with comm:
        choice = comm.tuning
    reporter.print(f"# auto: {choice.describe()}", soft_wrap=True)
    if choice.source is not None and choice.key is not None:
        for line in ladder_lines(choice.table, choice.key.ranks):
            reporter.print(f"#   {line}")
    return 0


def _machine(meta: dict[str, Any], nranks: int) -> str:
    host = str(meta.get("hostname", "?")).split(".")[0]
    gpus = meta.get("gpu_names") or []
    return f"{host}: {nranks} x {', '.join(gpus)}" if gpus else f"{host}: host transport"


if __name__ == "__main__":
    sys.exit(main())
