"""Command-line options of ``python -m mpiring.bench`` (nccl-tests' letters where they exist).

Parsing is pure and identical on every rank; only rank 0 prints help and errors.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any

from .algorithms import all_names, default_sweep
from .data import DTYPE_NAMES
from .sizes import GPU_DEFAULT, HOST_DEFAULT, parse_size

OPS = ("sum", "prod", "max", "min")
PLACEMENTS = ("out", "in")
OVERLAPS = ("gemm",)
DEFAULT_GEMM_SIZE = 8192  # float16: about 1.1 TFLOP, 1-2 ms on an H100/H200
MIN_GEMM_SIZE = 1024

DESCRIPTION = """\
Allreduce benchmark of mpiring next to its baselines, in the manner of nccl-tests.

With GPUs it times NCCL's allreduce ("nccl", the reference of the speed-ups), a ring of NCCL
send/recv ("nccl-ring"), and mpiring's algorithms on CuPy arrays: the copy-engine ring
("ring"), the one-kernel "oneshot" (small messages; n/a above its size limit), the
reduce-scatter + all-gather kernel "twoshot", and "auto" (what mpiring picks per size; the
table shows the pick as auto:<name>). Without GPUs (or with --host) it times mpiring's host
pipeline ("ring") against MPI.Allreduce ("mpi").

Every point is checked before it is timed: per-rank integer inputs whose sum is exact, the
output poisoned (NaN / a sentinel) before the call, and every element compared with the
exact result, which each rank computes on its own. A point that fails is reported FAIL and
not timed. Times are per iteration: a barrier, then k back-to-back calls timed together
(CUDA events on the current stream, or MPI.Wtime), repeated --reps times; the table shows
the median (and min/max/std) of the slowest rank. algbw = bytes / time,
busbw = algbw * 2(n-1)/n, as in nccl-tests.

--overlap gemm (GPUs) also measures, at every point, a large float16 matmul on its own stream
running at the same time as the allreduce loop, and reports how much each slows the other
down (see mpiring/bench/overlap.py for the method).
"""

EPILOG = """\
examples:
  mpiexec -n 4 python -m mpiring.bench
  mpiexec -n 4 python -m mpiring.bench -b 1M -e 1G --batches 1,2,4,8 --placement out,in
  srun -n 4 python -m mpiring.bench -d bfloat16 --algo ring,nccl --name h200
  mpiexec -n 4 python -m mpiring.bench --overlap gemm -b 1M -e 1G -f 4
  python -m mpiring.bench.plot results/allreduce_*.csv      # re-plot saved results

Files: <output-dir>/<name>_<host>_<date>.csv (one row per algo x size x batches x
placement), .json (same rows plus metadata), .png (busbw, latency and speed-up vs size),
_batches.png (busbw per batches value, when several are given) and _overlap.png (GEMM and
allreduce slowdown vs size, with --overlap gemm).

Output: rank 0 prints; under mpiexec/srun its output is a pipe, so colours and the live
progress bar are off unless --progress on (or TTY_COMPATIBLE=1 TTY_INTERACTIVE=1).

exit status: 0 all points passed (or were skipped, unavailable or n/a: an algorithm that
rejects a size, such as oneshot above its limit), 1 a correctness check failed, 2 a point
raised an error, 3 the run could not go on.
"""


@dataclass(frozen=True)
class Options:
    minbytes: int | None
    maxbytes: int | None
    stepfactor: float | None
    stepbytes: int | None
    algos: tuple[str, ...] | None  # None: every algorithm of the mode
    batches: tuple[int | str, ...]
    dtype: str
    op: str
    placements: tuple[str, ...]
    iters: int | None
    warmup: int | None
    reps: int
    time_budget: float
    max_iters: int
    check: bool
    host: bool
    output_dir: str
    name: str
    plot: bool
    seed: int
    timeout: float | None
    time_agreement: bool
    progress: str
    argv: tuple[str, ...]
    overlap: str | None = None  # "gemm": also measure the allreduce beside a matmul
    # "eager": Python calls back to back; "graph": k calls replayed from one CUDA graph
    # (nccl-tests' -G); "gpu": graph where the algorithm can be captured (the table says), eager otherwise.
    timing: str = "eager"
    gemm_size: int = DEFAULT_GEMM_SIZE

    def size_range(self, gpu: bool) -> tuple[int, int]:
        lo, hi = GPU_DEFAULT if gpu else HOST_DEFAULT
        return (self.minbytes if self.minbytes is not None else parse_size(lo),
                self.maxbytes if self.maxbytes is not None else parse_size(hi))


def _rank() -> int:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        return mpi.COMM_WORLD.Get_rank()
    for var in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


class RankZeroParser(argparse.ArgumentParser):
    """An argument parser that prints on rank 0 only (every rank parses the same argv)."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if _rank() == 0:
            super()._print_message(message, file)


def size_arg(text: str) -> int:
    """An argparse type: a message size such as 4096, 64K, 8G."""
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def int_at_least(lowest: int):
    """An argparse type: an integer no smaller than ``lowest``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lowest:
            raise argparse.ArgumentTypeError(f"must be at least {lowest}, got {value}")
        return value
    return parse


positive_int = int_at_least(1)
_nonneg_int = int_at_least(0)


def positive_float(text: str) -> float:
    """An argparse type: a number greater than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _choices(allowed: tuple[str, ...], what: str):
    def parse(text: str) -> tuple[str, ...]:
        items = [t.strip().lower() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"empty {what} list")
        for item in items:
            if item not in allowed:
                raise argparse.ArgumentTypeError(
                    f"unknown {what} {item!r}: choose from {', '.join(allowed)}")
        return tuple(dict.fromkeys(items))
    return parse


def _batches(text: str) -> tuple[int | str, ...]:
    out: list[int | str] = []
    for item in (t.strip().lower() for t in text.split(",")):
        if not item:
            continue
        if item == "auto":
            out.append("auto")
            continue
        try:
            value = int(item)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"batches {item!r} is neither a positive integer nor 'auto'") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"batches must be at least 1, got {value}")
        out.append(value)
    if not out:
        raise argparse.ArgumentTypeError("empty batches list")
    return tuple(dict.fromkeys(out))


def build_parser() -> argparse.ArgumentParser:
    p = RankZeroParser(prog="python -m mpiring.bench", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("sizes (binary units: 1K = 1024 bytes)")
    g.add_argument("-b", "--minbytes", type=size_arg, metavar="SIZE",
                   help=f"smallest message (default {GPU_DEFAULT[0]})")
    g.add_argument("-e", "--maxbytes", type=size_arg, metavar="SIZE",
                   help=f"largest message (default {GPU_DEFAULT[1]} on GPUs, "
                        f"{HOST_DEFAULT[1]} on the host)")
    g.add_argument("-f", "--stepfactor", type=float, metavar="F",
                   help="multiply the size by F from one point to the next (default 2)")
    g.add_argument("-i", "--stepbytes", type=size_arg, metavar="SIZE",
                   help="add SIZE from one point to the next instead of multiplying")

    g = p.add_argument_group("what to run")
    g.add_argument("-a", "--algo", type=_choices(all_names(), "algorithm"), metavar="LIST",
                   help="comma list of algorithms (default: all of the mode; GPU: "
                        f"{','.join(default_sweep(True))}; host: "
                        f"{','.join(default_sweep(False))}); an unavailable one is reported "
                        "and skipped")
    g.add_argument("--batches", type=_batches, default=("auto",), metavar="LIST",
                   help="comma list of mini-batch counts for ring and nccl-ring, numbers "
                        "and/or 'auto' (default auto: mpiring picks by size); nccl and mpi "
                        "ignore batches and run once per size")
    g.add_argument("-d", "--dtype", choices=DTYPE_NAMES, default="float32",
                   help="element type (default float32; bfloat16 on GPUs needs torch)")
    g.add_argument("-o", "--op", choices=OPS, default="sum", help="reduction (default sum)")
    g.add_argument("--placement", type=_choices(PLACEMENTS, "placement"), default=("out",),
                   metavar="LIST", help="out (separate send and receive buffers), in "
                   "(MPI.IN_PLACE), or out,in for both (default out)")
    g.add_argument("--host", action="store_true",
                   help="benchmark host arrays (mpiring's host pipeline vs MPI.Allreduce) "
                        "even where GPUs exist")

    g = p.add_argument_group("overlap with compute (GPUs only)")
    g.add_argument("--overlap", choices=OVERLAPS,
                   help="gemm: at every point also time a large float16 matmul on its own "
                        "stream, alone and while the allreduce loop runs, and report both "
                        "slowdowns (GEMM time with / alone, allreduce time with / alone)")
    g.add_argument("--gemm-size", type=int_at_least(MIN_GEMM_SIZE), default=DEFAULT_GEMM_SIZE,
                   metavar="N", help=f"the matmul of --overlap: N x N by N x N, float16 "
                   f"(default {DEFAULT_GEMM_SIZE}: 1-2 ms on an H200; the run stops if one "
                   "takes under 100 us, where launches rather than the GPU would set its pace)")

    g = p.add_argument_group("timing")
    g.add_argument("--time-budget", type=positive_float, default=0.15, metavar="S",
                   help="seconds of timed iterations per point; the iteration count is "
                        "derived from the warm-up time (default 0.15)")
    g.add_argument("-n", "--iters", type=positive_int, metavar="N",
                   help="timed iterations per repetition, instead of the time budget")
    g.add_argument("-w", "--warmup", type=_nonneg_int, metavar="N",
                   help="warm-up iterations (default: about 10%% of the budget, 2 to 50)")
    g.add_argument("--reps", type=positive_int, default=5, metavar="N",
                   help="timed repetitions per point, for mean/std/min/max/median (default 5)")
    g.add_argument("--max-iters", type=positive_int, default=1000, metavar="N",
                   help="cap on timed iterations per repetition (default 1000)")
    g.add_argument("--time-agreement", action="store_true",
                   help="keep mpiring's per-call argument agreement (one small MPI_Allreduce "
                        "per call) in timed loops; by default it runs only for the checked "
                        "call, so the nccl row compares with nccl-tests")
    g.add_argument("--graph", action="store_true",
                   help="GPUs: capture the k timed calls in one CUDA graph and time its replay "
                        "(like nccl-tests -G): the GPU's time without Python launch overhead; "
                        "algorithms that cannot be captured (ring) show n/a")
    g.add_argument("--timeout", type=positive_float, metavar="S",
                   help="seconds mpiring waits for a peer before raising (default: "
                        "MPIRING_TIMEOUT or 300)")

    g = p.add_argument_group("checking")
    g.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="verify every element of each point before timing it (default on)")
    g.add_argument("--seed", type=int, default=2024,
                   help="seed of the generated inputs (default 2024)")

    g = p.add_argument_group("output")
    g.add_argument("--output-dir", default="results", metavar="DIR",
                   help="where the CSV, JSON and PNG files go (default results/)")
    g.add_argument("--name", default="allreduce", metavar="PREFIX",
                   help="file name prefix (default allreduce)")
    g.add_argument("--no-plot", action="store_true", help="write no PNG figures")
    g.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="colours and live progress bar: auto (when the output is a "
                        "terminal), on (force, e.g. under mpiexec), off")
    return p


def parse_args(argv: list[str] | None = None) -> Options:
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
    if not ns.name or "/" in ns.name:
        parser.error("--name must be a non-empty file name prefix without '/'")
    return Options(
        minbytes=ns.minbytes, maxbytes=ns.maxbytes, stepfactor=ns.stepfactor,
        stepbytes=ns.stepbytes, algos=ns.algo, batches=ns.batches, dtype=ns.dtype, op=ns.op,
        placements=ns.placement, iters=ns.iters, warmup=ns.warmup, reps=ns.reps,
        time_budget=ns.time_budget, max_iters=ns.max_iters, check=ns.check, host=ns.host,
        output_dir=ns.output_dir, name=ns.name, plot=not ns.no_plot, seed=ns.seed,
        timeout=ns.timeout, time_agreement=ns.time_agreement, progress=ns.progress,
        argv=tuple(args_list), overlap=ns.overlap, gemm_size=ns.gemm_size,
        timing="graph" if ns.graph else "eager",
    )
