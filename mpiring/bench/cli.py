"""Command-line options of ``python -m mpiring.bench``, with nccl-tests' letters and meanings
where the two overlap (``-b -e -f -i -n -w -c -d -o -a -G``), so nccl-tests command lines
carry over. Options of its own are long (``--algo``, ``--batches``, ...).

Parsing is pure and identical on every rank; only rank 0 prints help and errors.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from .algorithms import AUTO, all_names, default_sweep
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
BASELINE_EXAMPLES = ("nccl", "nccl-symm", "torch", "torch-symm-1shot", "torch-symm-2shot")
OVERLAPS = ("gemm", "train")  # workload shapes of --overlap (mpiring.bench.overlap)
DEFAULT_GEMM_SIZE = 8192  # float16: about 1.1 TFLOP, 1-2 ms on an H100/H200
DEFAULT_TRAIN_GEMM_SIZE = 4096  # bfloat16 (torch) or float16: about 0.2 ms on an H200
MIN_GEMM_SIZE = 1024
DEFAULT_OUTPUT_DIR = "mpiring-results"
FORMATS = ("table", "nccl-tests")

DESCRIPTION = """\
Allreduce benchmark of mpiring next to its baselines, in the manner of nccl-tests; with
--collective also Reduce_scatter_block and Allgather (see "collectives" below).

With GPUs it times NCCL's allreduce ("nccl", the reference of the speed-ups), a ring of NCCL
send/recv ("nccl-ring"), and mpiring's algorithms on CuPy arrays: the copy-engine ring
("ring"), the one-kernel "oneshot" (small messages; n/a above its size limit), the
reduce-scatter + all-gather kernel "twoshot", and "auto" (what mpiring picks per size; the
table shows the pick as auto:<name>). With --host, or on a machine without GPUs, it times
mpiring's host pipeline ("ring") against MPI.Allreduce ("mpi"). A machine whose GPUs CuPy
cannot use (a broken install) is an error, not a host run: its message quotes CuPy's error.

Peers: with GPUs the sweep also measures other libraries' allreduce, after the NCCL reference
and before mpiring's rows, each where its package is installed (else its rows are skipped with
a one-line reason): "torch" (torch.distributed.all_reduce, NCCL process group), "torch-symm-1shot"
and "torch-symm-2shot" (torch.ops.symm_mem's one-shot / two-shot all-reduce; sum of float32 or
bfloat16; one node) and "nccl-symm" (ncclAllReduce in an NCCL_WIN_COLL_SYMMETRIC window, through
nccl4py; one node). Their data starts in the bench's ordinary buffers, like mpiring's rows: the
copies into symmetric memory (and out of it, where needed), and torch's copy send -> recv out of
place, are timed. NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1).
--baseline NAME takes the speed-ups against another row than nccl (e.g. torch).

Every point is checked before it is timed: per-rank integer inputs whose sum is exact, the
output poisoned (NaN / a sentinel) before the call, and every element compared with the
exact result, which each rank computes on its own; #wrong counts the wrong elements over
all ranks. A point that fails is not timed. Times are per iteration: a barrier, then k
back-to-back calls timed together (CUDA events on the current stream, or MPI.Wtime),
repeated --reps times; the table shows the median (and min/max/std) over repetitions, of
the slowest rank by default (-a). algbw = bytes / time, busbw = algbw * 2(n-1)/n, as in
nccl-tests.

--collective reduce_scatter / allgather measure Reduce_scatter_block / Allgather with the rows
that implement them (GPU: nccl, i.e. ncclReduceScatter / ncclAllGather, ring, ring-events,
auto; host: MPI's Reduce_scatter_block / Allgather as "mpi", and ring). As in nccl-tests, the
size is the whole buffer (the send buffer of reduce_scatter, the receive buffer of allgather),
each rank's block is size / n / itemsize elements (the count column), sizes are rounded down to
whole blocks, and busbw = algbw * (n-1)/n.

On a communicator that spans nodes (or MPIRING_VIRTUAL_NODES), rows that need every rank on
one node (ring, ring-events, oneshot, twoshot) are left out of the default sweep (the banner
names them), and asking for one with --algo is an error.

--overlap gemm,train (GPUs) also measures, at every point, the allreduce beside matmuls on
their own stream: per workload shape (gemm: large float16 GEMMs started with the allreduce;
train: smaller bfloat16 GEMMs, the allreduce issued after the first, as in a backward pass) the
GEMMs alone (T_gemm), the calls alone (T_ar), both from one start (the makespan T_both), the
overlap efficiency (T_gemm + T_ar - T_both) / min(T_gemm, T_ar) (1: the shorter one hidden,
0: no better than serial) and the SMs the allreduce holds; with gemm also how much each slows
the other down (see mpiring/bench/overlap.py for the method).
"""

EPILOG = f"""\
examples:
  mpiexec -n 4 python -m mpiring.bench
  mpiexec -n 4 python -m mpiring.bench -b 1M -e 1G --batches 1,2,4,8 --placement out,in
  srun -n 4 python -m mpiring.bench -d bfloat16 --algo ring,nccl --name h200
  mpiexec -n 4 python -m mpiring.bench --collective reduce_scatter,allgather -b 1M -e 1G
  mpiexec -n 4 python -m mpiring.bench --overlap gemm,train -b 1M -e 1G -f 4
  mpiexec -n 4 mpiring-bench -b 8 -e 128M -f 2 -G 1 -a 1 --algo nccl --nccl-tests
  python -m mpiring.bench.plot {DEFAULT_OUTPUT_DIR}/allreduce_*.csv   # re-plot saved results

nccl-tests' flags: -b -e -f -i -n -w as there; -c N checks N calls per point (0: no check);
-G N replays the timed calls from a CUDA graph N times; -d takes nccl-tests' type names
(half, float, double, bfloat16, int32, int64) or numpy's; -o sum|prod|max|min; -a 0|1|2|3
reports rank 0's time, the average, minimum or maximum over ranks (default 3, the slowest
rank; nccl-tests' default is 1). Renamed from earlier mpiring releases: -a (was the
algorithm list) is now the averaging mode: the algorithms are --algo. --nccl-tests prints
nccl-tests' columns (out-of-place and in-place side by side, #wrong, "# Avg bus bandwidth"),
one table per algorithm, so that scripts written for nccl-tests' output read it.

Files: <output-dir>/<name>_<host>_<date>.csv (one row per algo x size x batches x placement,
appended as each point completes), .json (same rows plus metadata; written at the end, or
when the run is interrupted by Ctrl-C or SIGTERM, e.g. at a Slurm time limit), .png
(busbw, latency and speed-up vs size), _batches.png (busbw per batches value, when several
are given), _overlap.png (the slowdowns, with --overlap gemm) and _makespan.png (makespan and
efficiency per workload shape, with --overlap). Default directory: ./{DEFAULT_OUTPUT_DIR}/.

Output: rank 0 prints. Colours and the live progress bar appear only when its output is a
terminal (--progress auto): under mpiexec/srun rank 0 writes into a pipe, and under Open MPI
into a pseudo-terminal that may end in a file, so they are off there unless --progress on.

exit status: 0 all points passed (or were skipped, unavailable or n/a: an algorithm that
rejects a size, such as oneshot above its limit), 1 a correctness check failed, 2 a point
raised an error, 3 the run could not go on; 130/143 interrupted by SIGINT/SIGTERM.
"""


@dataclass(frozen=True)
class Options:
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


def baseline_arg(text: str) -> str:
    """An argparse type: one name ``--algo`` accepts, other than ``auto`` (whose pick changes
    with the size, so ratios against it would compare with different rows)."""
    name = text.strip().lower()
    choices = [a for a in all_names() if a != AUTO]
    if name not in choices:
        raise argparse.ArgumentTypeError(f"unknown baseline {text!r}: choose from "
                                         f"{', '.join(choices)}")
    return name


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
    g.add_argument("--algo", type=choices_list(all_names(), "algorithm"), metavar="LIST",
                   help="comma list of algorithms (default: all of the mode; GPU: "
                        f"{','.join(default_sweep(True))}; host: "
                        f"{','.join(default_sweep(False))}); one that cannot reduce the run's "
                        "memory (nccl on the host) is an error. Was -a in earlier releases")
    g.add_argument("--baseline", type=baseline_arg, metavar="NAME",
                   help="the row the speed-up column is against, measured first at every size "
                        "(and run even when --algo leaves it out): an algorithm or a peer, e.g. "
                        f"{', '.join(BASELINE_EXAMPLES)} (default: nccl on GPUs, mpi on the host)")
    g.add_argument("--collective", type=choices_list(NAMES + (ALL,), "collective"),
                   default=(ALLREDUCE,), metavar="LIST",
                   help="comma list of collectives to measure, one after the other: allreduce "
                        "(default), reduce_scatter (Reduce_scatter_block), allgather, or all; for "
                        "the last two the size is the whole buffer (nccl-tests' meaning)")
    g.add_argument("--batches", type=batches_list, default=("auto",), metavar="LIST",
                   help="comma list of mini-batch counts for ring and nccl-ring, numbers "
                        "and/or 'auto' (default auto: mpiring picks by size); nccl and mpi "
                        "ignore batches and run once per size")
    g.add_argument("-d", "--dtype", "--datatype", type=dtype_arg, default="float32",
                   metavar="TYPE", help="element type, nccl-tests' name or numpy's: half/float16, "
                   "float/float32 (default), double/float64, bfloat16 (GPUs: needs torch), "
                   "int32, int64")
    g.add_argument("-o", "--op", type=op_arg, default="sum", metavar="OP",
                   help=f"reduction: {', '.join(OPS)} (default sum); nccl-tests' avg is refused "
                        "with an explanation (the API's op='avg' is the sum plus one division pass)")
    g.add_argument("--placement", type=choices_list(PLACEMENTS, "placement"), metavar="LIST",
                   help="out (separate send and receive buffers), in (MPI.IN_PLACE), or out,in "
                        "for both (default out; out,in with --nccl-tests)")
    where = g.add_mutually_exclusive_group()
    where.add_argument("--gpu", action="store_true",
                       help="benchmark GPU arrays, and fail (quoting CuPy's error) where a rank "
                            "cannot (default: GPUs when visible, see --host)")
    where.add_argument("--host", action="store_true",
                       help="benchmark host arrays (mpiring's host pipeline vs MPI.Allreduce) "
                            "even where GPUs exist; the default only does so on machines "
                            "without GPUs")

    g = p.add_argument_group("overlap with compute (GPUs only)")
    g.add_argument("--overlap", type=choices_list(OVERLAPS, "overlap shape"), metavar="LIST",
                   help="comma list of workload shapes to run beside the allreduce at every "
                        "point: gemm (large float16 matmuls started with it; also both "
                        "slowdowns: GEMM time with / alone, allreduce time with / alone), "
                        "train (smaller bfloat16 matmuls, the allreduce issued after the first, "
                        "as a backward pass issues a gradient bucket). Each reports T_gemm, "
                        "T_ar, the makespan T_both, the overlap efficiency and the SMs held")
    g.add_argument("--gemm-size", type=int_at_least(MIN_GEMM_SIZE), default=DEFAULT_GEMM_SIZE,
                   metavar="N", help=f"the matmul of --overlap gemm: N x N by N x N, float16 "
                   f"(default {DEFAULT_GEMM_SIZE}: 1-2 ms on an H200; the run stops if one "
                   "takes under 100 us, where launches rather than the GPU would set its pace)")
    g.add_argument("--train-gemm-size", type=int_at_least(MIN_GEMM_SIZE),
                   default=DEFAULT_TRAIN_GEMM_SIZE, metavar="N",
                   help=f"the matmuls of --overlap train: N x N by N x N, bfloat16 through "
                        f"torch (float16 through CuPy where torch cannot run, and the banner "
                        f"says so; default {DEFAULT_TRAIN_GEMM_SIZE})")
    g.add_argument("--gemm-sms", type=int_at_least(0), default=0, metavar="N",
                   help="plan the --overlap GEMMs for N SMs (cublasSetSmCountTarget: the SMs the "
                        "allreduce gets beside compute are the compute's to leave free; see "
                        "mpiring/bench/carveout.py); default 0: every SM, or what --sm-budget "
                        "leaves")
    g.add_argument("--sm-budget", type=int_at_least(1), default=None, metavar="N",
                   help="mpiring's kernels hold at most N SMs (Communicator(sm_budget=N)); with "
                        "--overlap and no --gemm-sms, the GEMMs are planned for the other SMs")

    g = p.add_argument_group("timing")
    g.add_argument("--time-budget", type=positive_float, default=0.15, metavar="S",
                   help="seconds of timed iterations per point; the iteration count is "
                        "derived from the warm-up time (default 0.15)")
    g.add_argument("-n", "--iters", type=positive_int, metavar="N",
                   help="timed iterations per repetition, instead of the time budget")
    g.add_argument("-w", "--warmup", "--warmup_iters", type=nonneg_int, metavar="N",
                   help="warm-up iterations (default: about 10%% of the budget, 2 to 50)")
    g.add_argument("--reps", type=positive_int, default=5, metavar="N",
                   help="timed repetitions per point, for mean/std/min/max/median (default 5)")
    g.add_argument("--max-iters", type=positive_int, default=1000, metavar="N",
                   help="cap on timed iterations per repetition (default 1000)")
    g.add_argument("-a", "--average", type=int_in(AVERAGES, "-a/--average (the algorithms "
                   "are --algo)"), default=SLOWEST, metavar="0|1|2|3",
                   help="how ranks' times combine, as nccl-tests' -a: 0 rank 0's, 1 the "
                        "average, 2 the minimum, 3 the maximum, i.e. the slowest rank "
                        "(default 3; nccl-tests' default is 1)")
    g.add_argument("--time-agreement", action="store_true",
                   help="keep mpiring's per-call argument agreement (one small MPI_Allreduce "
                        "per call) in timed loops; by default it runs only for the checked "
                        "call, so the nccl row compares with nccl-tests")
    g.add_argument("-G", "--cudagraph", type=nonneg_int, metavar="N", dest="graph_launches",
                   help="GPUs: capture each repetition's calls in one CUDA graph and time N "
                        "replays of it (nccl-tests' -G); 0: eager calls (default). Rows that "
                        "cannot be captured (ring) show n/a")
    g.add_argument("--graph", action="store_const", const=1, dest="graph_launches",
                   help="the same as -G 1")
    g.add_argument("--timeout", type=positive_float, metavar="S",
                   help="seconds mpiring waits for a peer before raising (default: "
                        "MPIRING_TIMEOUT or 300)")

    g = p.add_argument_group("checking")
    g.add_argument("-c", "--check", type=nonneg_int, nargs="?", const=1, default=1, metavar="N",
                   help="check N calls per point, every element, before timing it (nccl-tests' "
                        "-c; default 1; --check alone: 1; 0 or --no-check: no check)")
    g.add_argument("--no-check", action="store_const", const=0, dest="check",
                   help="do not check results (the same as -c 0)")
    g.add_argument("--seed", type=int, default=2024,
                   help="seed of the generated inputs (default 2024)")

    g = p.add_argument_group("output")
    g.add_argument("--output-dir", default=DEFAULT_OUTPUT_DIR, metavar="DIR",
                   help=f"where the CSV, JSON and PNG files go (default ./{DEFAULT_OUTPUT_DIR}/; "
                        "the repository's results/ only when asked: --output-dir results)")
    g.add_argument("--name", metavar="PREFIX",
                   help="file name prefix (default: the collective, e.g. allreduce; "
                        "'collectives' when several are measured)")
    g.add_argument("--no-plot", action="store_true",
                   help="write no PNG figures (and need no matplotlib)")
    g.add_argument("--nccl-tests", action="store_const", const="nccl-tests", default="table",
                   dest="output_format",
                   help="print nccl-tests' table instead of mpiring's: size, count, type, redop, "
                        "root, then time, algbw, busbw, #wrong out-of-place and in-place side "
                        "by side, one table per algorithm, each ending in '# Avg bus bandwidth'")
    g.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="colours and live progress bar: auto (only when the output is a "
                        "terminal), on (force, e.g. under mpiexec), off (plain text)")
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
    return Options(
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
        baseline=ns.baseline,
    )
