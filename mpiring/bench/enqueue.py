"""``python -m mpiring.bench.enqueue``: the host time of one eager call, algorithm by algorithm.

    mpirun -n 1 python -m mpiring.bench.enqueue              # 1 KiB float32, every algorithm
    mpirun -n 2 python -m mpiring.bench.enqueue -b 64K --profile oneshot

What the calling thread spends to issue one ``comm.Allreduce`` (GPU calls return once
enqueued; the GPU is not waited for inside a round), with the agreement check as by default
(``gpu``: on the GPU for oneshot, twoshot and oneshot-ll, on the host for the others), on the
host for every call (``host``, shown for the rows that would check on the GPU) and off,
next to the cheapest thing the same thread can enqueue on the same array (``cupy.copyto``
for GPU arrays, ``np.copyto`` for host arrays). Every (algorithm, check) case is measured
in each of ``--rounds`` interleaved rounds of ``--calls`` calls, after warm-up calls, and the
median round is reported with the range: machine noise moves all cases alike. With more
than one rank each call also waits for the slowest rank (the agreement check, the host
ring), so the figures are the slowest rank's pace, not only this rank's host work.
``--profile ALGO`` prints a cProfile of that algorithm's calls (check off) on rank 0.

This is the host-side microbenchmark of issue 13's per-call work; the benchmark proper
(``python -m mpiring.bench``) measures call times, GPU included.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np
from mpi4py import MPI

from .. import algorithms
from ..buffers import Memory
from ..communicator import Communicator
from ..errors import MpiringError
from .argtypes import RankZeroParser, int_at_least, size_arg
from .mode import AUTO, GPU, HOST, ModeError, choose
from .sizes import format_size


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = RankZeroParser(prog="python -m mpiring.bench.enqueue", description=__doc__.split("\n\n")[2],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", "--size", type=size_arg, default=1024, help="message size (default 1K)")
    p.add_argument("--calls", type=int_at_least(1), default=2000, help="calls per round (default 2000)")
    p.add_argument("--rounds", type=int_at_least(1), default=9, help="interleaved rounds (default 9)")
    p.add_argument("--algo", default=None,
                   help="comma-separated algorithms (default: every one that serves the memory)")
    p.add_argument("--profile", default=None, metavar="ALGO", help="cProfile this algorithm's calls")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--gpu", dest="mode", action="store_const", const=GPU, default=AUTO)
    where.add_argument("--host", dest="mode", action="store_const", const=HOST)
    return p.parse_args(argv)


def per_call_us(rounds: int, calls: int, cases: list[Callable[[], None]], sync: Callable[[], None],
                world: MPI.Intracomm) -> list[list[float]]:
    """Microseconds per call of each case, one list entry per round; rounds interleave the cases."""
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(rounds):
        for i, case in enumerate(cases):
            for _ in range(max(1, calls // 20)):  # warm: caches, pools, first-shape plans
                case()
            sync()
            world.Barrier()
            start = time.perf_counter()
            for _ in range(calls):
                case()
            times[i].append((time.perf_counter() - start) / calls * 1e6)
            sync()
    return times


def main(argv: Sequence[str] | None = None, world: MPI.Intracomm | None = None) -> int:
    args = parse_args(argv)
    world = world if world is not None else MPI.COMM_WORLD
    try:
        gpu = choose(args.mode, world).gpu
    except ModeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    memory = Memory.CUDA if gpu else Memory.HOST
    names = [n.strip() for n in args.algo.split(",")] if args.algo else list(algorithms.names(memory))
    try:
        for name in names + ([args.profile] if args.profile else []):
            algorithms.check_name(name)
    except MpiringError as err:  # the same arguments, so the same verdict, on every rank
        print(f"error: {err}", file=sys.stderr)
        return 2
    count = max(1, args.size // 4)
    if gpu:
        import cupy

        x, out = cupy.ones(count, dtype=cupy.float32), cupy.empty(count, dtype=cupy.float32)
        sync: Callable[[], None] = cupy.cuda.Device().synchronize
        copy = ("cupy.copyto", lambda: cupy.copyto(out, x))
    else:
        x, out = np.ones(count, dtype=np.float32), np.empty(count, dtype=np.float32)
        sync = lambda: None  # noqa: E731 - host calls complete before they return
        copy = ("np.copyto", lambda: np.copyto(out, x))
    # The check as it runs by default (on the GPU for the rows whose kernels check there, on the
    # host for the others), every call on the host (check="host"), and off.
    comms = {check: Communicator(world, gpu=gpu, check=check) for check in ("gpu", "host", False)}
    try:
        labels, cases = [copy[0]], [copy[1]]
        for check, comm in comms.items():
            for name in names:
                try:  # a refusal (size limit, memory kind) is the same on every rank
                    comm.Allreduce(x, out, algorithm=name)
                except MpiringError as err:
                    if check == "gpu" and world.rank == 0:
                        print(f"# {name}: n/a ({err})")
                    continue
                if check == "host" and not algorithms.get(name).gpu_check:
                    continue  # the same as the default for rows checked on the host anyway
                labels.append(f"{name} (check {check or 'off'})")
                cases.append(_call(comm, name, x, out))
        times = per_call_us(args.rounds, args.calls, cases, sync, world)
        if world.rank == 0:
            print(f"# host time per eager call: {format_size(count * 4)} float32 sum, {world.size} "
                  f"rank(s), {'GPU' if gpu else 'host'} arrays, median of {args.rounds} rounds of "
                  f"{args.calls} calls (range)")
            for label, t in zip(labels, times, strict=True):
                print(f"  {label:28s} {statistics.median(t):8.1f} us  ({min(t):.1f}-{max(t):.1f})")
        if args.profile:
            profile(comms[False], args.profile, x, out, args.calls, sync, world)
    finally:
        for comm in comms.values():
            comm.close()
    return 0


def _call(comm: Communicator, name: str, x, out) -> Callable[[], None]:
    return lambda: comm.Allreduce(x, out, algorithm=name)


def profile(comm: Communicator, name: str, x, out, calls: int, sync: Callable[[], None],
            world: MPI.Intracomm) -> None:
    """cProfile of ``calls`` calls of ``name`` (check off), printed by rank 0."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        comm.Allreduce(x, out, algorithm=name)
    prof.disable()
    sync()
    if world.rank == 0:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(20)
        print(f"# cProfile of {calls} calls of {name} (check off), by own time")
        print(text.getvalue().rstrip())


if __name__ == "__main__":
    sys.exit(main())
