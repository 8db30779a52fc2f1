"""Command-line options of ``python -m mpiring.bench``, with nccl-tests' letters and meanings
where the two overlap (``-b -e -f -i -n -w -c -d -o -a -G``, and ``-g 1 -t 1 -z 0``, the only
values of those that fit one process per GPU), so nccl-tests command lines carry over.
Options of its own are long (``--algo``, ``--batches``, ...).

``--help`` lists the flags, one short line each; the manual, ``docs/bench.md``, says what each
does and how the bench checks and times. Parsing is pure and identical on every rank; only
rank 0 prints help and errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from .algorithms import AUTO_REPRODUCIBLE, all_names, graph_capturable, picks_per_size
from .argtypes import (
    RankZeroParser,
    batches_list,
    choices_list,
    dtype_arg,
    int_at_least,
    int_in,
    nonneg_int,
    op_arg,
    positive_float,
    positive_int,
    size_arg,
)
from .collectives import ALL, ALLREDUCE, NAMES
from .nccl_names import OPS
from .sizes import GPU_DEFAULT, HOST_DEFAULT, parse_size
from .stats import AVERAGES, SLOWEST

PLACEMENTS = ("out", "in")
OVERLAPS = ("gemm", "train")  # workload shapes of --overlap (mpiring.bench.overlap)
DEFAULT_GEMM_SIZE = 8192  # float16: about 1.1 TFLOP, 1-2 ms on an H100/H200
DEFAULT_TRAIN_GEMM_SIZE = 4096  # bfloat16 (torch) or float16: about 0.2 ms on an H200
MIN_GEMM_SIZE = 1024
DEFAULT_OUTPUT_DIR = "mpiring-results"
FORMATS = ("table", "nccl-tests")

MANUAL = "docs/bench.md"  # the manual, in mpiring's repository: every flag, the method, the files

DESCRIPTION = """\
Allreduce benchmark of mpiring beside NCCL, other libraries' rows and MPI, in the manner of
nccl-tests (also reduce-scatter and all-gather: --collective). Every point is checked element
by element, then timed. Without GPUs, or with --host, it measures the host transport."""

EPILOG = f"""\
examples:
  mpiexec -n 4 python -m mpiring.bench
  mpiexec -n 4 python -m mpiring.bench -b 8 -e 128M -f 2 -g 1 --nccl-tests
  mpiexec -n 4 python -m mpiring.bench --overlap gemm,train -b 1M -e 1G -f 4
  python -m mpiring.bench.plot {DEFAULT_OUTPUT_DIR}/allreduce_*.csv   # re-plot

files: <output-dir>/<name>_<host>_<date>.csv and .jsonl (a row as each point completes),
.json (rows and metadata; marked incomplete when interrupted), .png figures.
exit status: 0 passed, 1 a check failed, 2 a point raised, 3 the run could not go on,
130/143 interrupted (SIGINT/SIGTERM).
The manual (what each flag does, how points are checked and timed, the files, the table):
{MANUAL} in mpiring's repository."""


def only(value: int, flag: str, why: str) -> Callable[[str], int]:
    """An argparse type for a flag of nccl-tests' that the bench takes with one value only:
    ``value`` is accepted, anything else is refused with ``why``."""
    def parse(text: str) -> int:
        try:
            given = int(text)
        except ValueError:
            given = None
        if given != value:
            raise argparse.ArgumentTypeError(f"{flag} {text}: only {value} here: {why}")
        return given
    return parse


NGPUS_WHY = ("mpiring runs one process per GPU, so launch as many ranks as GPUs instead "
             "(mpiexec -n <GPUs> python -m mpiring.bench)")
NTHREADS_WHY = ("each rank is one thread of one process; for more GPUs launch more ranks "
                "(mpiexec -n <GPUs>)")



def blocking_arg(text: str) -> int:
    """nccl-tests' -z: 0 (calls back to back) or 1 (the CPU waits for each call to complete)."""
    if text not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"-z/--blocking {text}: 0 (calls issued back to back) "
                                         "or 1 (the CPU waits for each call before the next)")
    return int(text)


@dataclass(frozen=True)
class BenchOptions:
    minbytes: int | None
    maxbytes: int | None
    stepfactor: float | None
    stepbytes: int | None
    algos: tuple[str, ...] | None  # None: every algorithm of the mode
    batches: tuple[int | str, ...]
    dtype: str  # numpy's name
    op: str
    placements: tuple[str, ...]
    iters: int | None
    warmup: int | None
    reps: int
    time_budget: float
    max_iters: int
    check: int  # checked calls per point (nccl-tests' -c); 0: no check
    host: bool
    output_dir: str
    name: str
    plot: bool
    seed: int
    timeout: float | None
    # mpiring's per-call agreement check in the timed calls too (default, as the communicator
    # runs; --no-time-agreement: off there, the checked calls keep it)
    time_agreement: bool
    progress: str
    argv: tuple[str, ...]
    collectives: tuple[str, ...] = (ALLREDUCE,)  # collectives.NAMES, in the order they run
    overlap: str | None = None  # "gemm", "train" or "gemm,train": the allreduce beside matmuls
    # "eager": Python calls back to back; "graph": k calls replayed from one CUDA graph
    # (nccl-tests' -G); "gpu": graph where the algorithm can be captured (the table says), eager otherwise.
    timing: str = "eager"
    gemm_size: int = DEFAULT_GEMM_SIZE
    train_gemm_size: int = DEFAULT_TRAIN_GEMM_SIZE
    gemm_sms: int = 0  # SMs the --overlap GEMMs are planned for (0: all, or what --sm-budget leaves)
    sm_budget: int | None = None  # --sm-budget: the communicator's (None: no budget)
    overlap_slowdowns: bool = True  # --overlap gemm also measures the slowdowns (the tuner: no)
    gpu: bool = False  # --gpu: GPUs required
    graph_launches: int = 1  # -G N: launches of the captured graph per timed repetition
    average: int = SLOWEST  # -a: how ranks' times combine (stats.AVERAGES)
    output_format: str = "table"  # or "nccl-tests"
    baseline: str | None = None  # --baseline: the row speed-ups are against (None: the mode's reference)
    blocking: bool = False  # -z 1: the CPU waits for each timed call to complete (eager timing)
    reproducible: bool = False  # --reproducible: the auto-reproducible row too (algorithms.VARIANTS)

    def size_range(self, gpu: bool) -> tuple[int, int]:
        lo, hi = GPU_DEFAULT if gpu else HOST_DEFAULT
        return (self.minbytes if self.minbytes is not None else parse_size(lo),
                self.maxbytes if self.maxbytes is not None else parse_size(hi))

    @property
    def overlap_shapes(self) -> tuple[str, ...]:
        """The workload shapes of --overlap, in OVERLAPS' order (none without it)."""
        return tuple(self.overlap.split(",")) if self.overlap else ()

    @property
    def memory(self) -> str:
        """What the run benchmarks: "gpu" (--gpu), "host" (--host) or "auto"."""
        return "gpu" if self.gpu else "host" if self.host else "auto"


def in_graph(opts: BenchOptions, algo: str) -> bool:
    """Whether ``algo``'s calls are timed from a CUDA graph: with --graph always (rows that
    cannot be captured are n/a there); with --gpu-time every row the table marks capturable
    (``auto`` too: it never picks an uncapturable row while capturing)."""
    return opts.timing == "graph" or (opts.timing == "gpu" and graph_capturable(algo))


def baseline_arg(text: str) -> str:
    """An argparse type: one name ``--algo`` accepts, other than ``auto`` and its variants
    (whose pick changes with the size, so ratios against it would compare with different
    rows)."""
    name = text.strip().lower()
    choices = [a for a in all_names() if not picks_per_size(a)]
    if name not in choices:
        raise argparse.ArgumentTypeError(f"unknown baseline {text!r}: choose from "
                                         f"{', '.join(choices)}")
    return name


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """--help's layout: each flag's short help beside it (a wider column than argparse's)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 30,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position, width)


def build_parser() -> argparse.ArgumentParser:
    """The options, one short line each; the manual (``docs/bench.md``) says the rest."""
    p = RankZeroParser(prog="python -m mpiring.bench", description=DESCRIPTION, epilog=EPILOG,
                       usage="mpiexec -n <ranks> %(prog)s [options]",
                       formatter_class=HelpFormatter)
    g = p.add_argument_group("sizes (1K = 1024 bytes)")
    g.add_argument("-b", "--minbytes", type=size_arg, metavar="SIZE",
                   help=f"smallest message (default {GPU_DEFAULT[0]})")
    g.add_argument("-e", "--maxbytes", type=size_arg, metavar="SIZE",
                   help=f"largest message (default {GPU_DEFAULT[1]}; host: {HOST_DEFAULT[1]})")
    g.add_argument("-f", "--stepfactor", type=float, metavar="F",
                   help="multiply the size by F per step (default 2)")
    g.add_argument("-i", "--stepbytes", type=size_arg, metavar="SIZE",
                   help="add SIZE per step instead")

    g = p.add_argument_group("what to run")
    g.add_argument("--algo", type=choices_list(all_names(), "algorithm"), metavar="LIST",
                   help="comma list of algorithms (default: all)")
    g.add_argument("--reproducible", action="store_true",
                   help=f"add {AUTO_REPRODUCIBLE}: auto, reproducible=True")
    g.add_argument("--baseline", type=baseline_arg, metavar="NAME",
                   help="speed-ups against it (default nccl-direct; host mpi-direct)")
    g.add_argument("--collective", type=choices_list(NAMES + (ALL,), "collective"),
                   default=(ALLREDUCE,), metavar="LIST",
                   help="allreduce (default), reduce_scatter, allgather or all")
    g.add_argument("--batches", type=batches_list, default=("auto",), metavar="LIST",
                   help="mini-batches of ring, nccl-ring (default auto)")
    g.add_argument("-d", "--dtype", "--datatype", type=dtype_arg, default="float32",
                   metavar="TYPE", help="float (default), half, double, bfloat16, int32, int64")
    g.add_argument("-o", "--op", type=op_arg, default="sum", metavar="OP",
                   help=f"{', '.join(OPS)} (default sum)")
    g.add_argument("--placement", type=choices_list(PLACEMENTS, "placement"), metavar="LIST",
                   help="out (default), in, or out,in")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--gpu", action="store_true", help="GPU arrays, or fail saying why")
    where.add_argument("--host", action="store_true",
                       help="host arrays, even where there are GPUs")

    g = p.add_argument_group("overlap with compute (GPUs)")
    g.add_argument("--overlap", type=choices_list(OVERLAPS, "overlap shape"), metavar="LIST",
                   help="gemm and/or train: matmuls beside every point")
    g.add_argument("--gemm-size", type=int_at_least(MIN_GEMM_SIZE), default=DEFAULT_GEMM_SIZE,
                   metavar="N", help=f"N x N float16 GEMMs of gemm (default {DEFAULT_GEMM_SIZE})")
    g.add_argument("--train-gemm-size", type=int_at_least(MIN_GEMM_SIZE),
                   default=DEFAULT_TRAIN_GEMM_SIZE, metavar="N",
                   help=f"N x N GEMMs of train (default {DEFAULT_TRAIN_GEMM_SIZE})")
    g.add_argument("--gemm-sms", type=int_at_least(0), default=0, metavar="N",
                   help="GEMMs planned for N SMs (default: those free)")
    g.add_argument("--sm-budget", type=int_at_least(1), default=None, metavar="N",
                   help="mpiring's kernels hold at most N SMs")

    g = p.add_argument_group("timing")
    g.add_argument("--time-budget", type=positive_float, default=0.15, metavar="S",
                   help="seconds of timed calls per point (default 0.15)")
    g.add_argument("-n", "--iters", type=positive_int, metavar="N",
                   help="timed calls per repetition, not the budget")
    g.add_argument("-w", "--warmup", "--warmup_iters", type=nonneg_int, metavar="N",
                   help="warm-up calls (default: about 10%% of the budget)")
    g.add_argument("--reps", type=positive_int, default=5, metavar="N",
                   help="timed repetitions per point (default 5)")
    g.add_argument("--max-iters", type=positive_int, default=1000, metavar="N",
                   help="cap on timed calls per repetition (default 1000)")
    g.add_argument("-a", "--average", type=int_in(AVERAGES, "-a/--average (the algorithms "
                   "are --algo)"), default=SLOWEST, metavar="0|1|2|3",
                   help="ranks' times: rank 0, mean, min, max (default 3)")
    agreement = g.add_mutually_exclusive_group()
    agreement.add_argument("--time-agreement", action="store_true", default=True,
                           help="agreement check on in timed calls (default)")
    agreement.add_argument("--no-time-agreement", action="store_false", dest="time_agreement",
                           help="agreement check off in mpiring's timed calls")
    g.add_argument("-G", "--cudagraph", type=nonneg_int, metavar="N", dest="graph_launches",
                   help="time N replays of a graph of the calls")
    g.add_argument("--graph", action="store_const", const=1, dest="graph_launches",
                   help="the same as -G 1")
    g.add_argument("--timeout", type=positive_float, metavar="S",
                   help="wait for a peer S s (default MPIRING_TIMEOUT, 300)")

    g = p.add_argument_group("nccl-tests' flags taken with one value")
    g.add_argument("-g", "--ngpus", type=only(1, "-g/--ngpus", NGPUS_WHY), default=1,
                   metavar="1", help="GPUs per process: 1 (a rank per GPU)")
    g.add_argument("-t", "--nthreads", type=only(1, "-t/--nthreads", NTHREADS_WHY), default=1,
                   metavar="1", help="threads per process: 1")
    g.add_argument("-z", "--blocking", type=blocking_arg, default=0, metavar="0|1",
                   help="1: wait for each timed call to complete (default 0: back to back)")

    g = p.add_argument_group("checking")
    g.add_argument("-c", "--check", type=nonneg_int, nargs="?", const=1, default=1, metavar="N",
                   help="check N calls per point (default 1)")
    g.add_argument("--no-check", action="store_const", const=0, dest="check",
                   help="no check (the same as -c 0)")
    g.add_argument("--seed", type=int, default=2024, help="seed of the inputs (default 2024)")

    g = p.add_argument_group("output")
    g.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, metavar="DIR",
                   help=f"where the files go (default ./{DEFAULT_OUTPUT_DIR}/)")
    g.add_argument("--name", metavar="PREFIX",
                   help="file name prefix (default: the collective)")
    g.add_argument("--no-plot", action="store_true", help="no figures (no matplotlib needed)")
    g.add_argument("--nccl-tests", action="store_const", const="nccl-tests", default="table",
                   dest="output_format", help="print nccl-tests' tables instead of mpiring's")
    g.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="colours and progress bar (auto: on a terminal)")
    return p


def parse_args(argv: list[str] | None = None) -> BenchOptions:
    """Parse ``argv`` (default ``sys.argv[1:]``); exits with status 2 on a bad option."""
    parser = build_parser()
    args_list = sys.argv[1:] if argv is None else list(argv)
    ns = parser.parse_args(args_list)
    if ns.stepfactor is not None and ns.stepbytes is not None:
        parser.error("give -f/--stepfactor or -i/--stepbytes, not both")
    if ns.stepfactor is not None and not ns.stepfactor > 1:
        parser.error(f"-f/--stepfactor must be greater than 1, got {ns.stepfactor}")
    if ns.stepbytes is not None and ns.stepbytes < 1:
        parser.error("-i/--stepbytes must be at least 1 byte")
    for flag, value in (("-b/--minbytes", ns.minbytes), ("-e/--maxbytes", ns.maxbytes)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1 byte")
    if ns.minbytes is not None and ns.maxbytes is not None and ns.maxbytes < ns.minbytes:
        parser.error("-e/--maxbytes is below -b/--minbytes")
    collectives = NAMES if ALL in ns.collective else ns.collective
    overlap = ",".join(s for s in OVERLAPS if s in ns.overlap) if ns.overlap else None
    if overlap and collectives != (ALLREDUCE,):
        parser.error(f"--overlap {overlap} measures the allreduce only: drop --collective "
                     f"{','.join(collectives)} or --overlap")
    name = ns.name if ns.name is not None else (
        collectives[0] if len(collectives) == 1 else "collectives")
    if not name or "/" in name:
        parser.error("--name must be a non-empty file name prefix without '/'")
    placements = ns.placement or (PLACEMENTS if ns.output_format == "nccl-tests" else ("out",))
    launches = ns.graph_launches or 0
    if ns.blocking and launches:
        parser.error("-z/--blocking 1 waits for each call, but -G/--graph replays the calls from "
                     "one graph: drop one of them")
    return BenchOptions(
        minbytes=ns.minbytes, maxbytes=ns.maxbytes, stepfactor=ns.stepfactor,
        stepbytes=ns.stepbytes, algos=ns.algo, batches=ns.batches, dtype=ns.dtype, op=ns.op,
        placements=placements, iters=ns.iters, warmup=ns.warmup, reps=ns.reps,
        time_budget=ns.time_budget, max_iters=ns.max_iters, check=ns.check, host=ns.host,
        output_dir=ns.output_dir, name=name, plot=not ns.no_plot, seed=ns.seed,
        timeout=ns.timeout, time_agreement=ns.time_agreement, progress=ns.progress,
        argv=tuple(args_list), overlap=overlap, gemm_size=ns.gemm_size,
        train_gemm_size=ns.train_gemm_size, gemm_sms=ns.gemm_sms, sm_budget=ns.sm_budget,
        timing="graph" if launches else "eager", gpu=ns.gpu, graph_launches=max(1, launches),
        average=ns.average, output_format=ns.output_format, collectives=collectives,
        baseline=ns.baseline, blocking=bool(ns.blocking), reproducible=ns.reproducible,
    )
