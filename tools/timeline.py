"""``python -m tools.timeline``: where a ring call's time goes, alone and beside a GEMM.

Every rank traces ``--calls`` ring allreduces of ``-b`` bytes (float32 sum, out of place) with
:func:`mpiring.trace.ring_timeline` and reports the medians over its calls: the call, the copies
into the next rank's slots, the folds (on a GPU their time on the SMs, *including any wait for
SMs to run them*), the slowest fold, and the waits of each queue: for a full slot (the previous
rank's data) and for a free one (the next rank's fold). First alone, then, on GPUs, beside
square float16 GEMMs running back to back on another stream (``--gemm N``; 0: none), planned
for ``--gemm-sms`` SMs (0: all; default: what the communicator's ``--sm-budget`` leaves). A fold
that waits for SMs behind the GEMM shows as folds far above their time alone, and as the next
rank's waits for free slots; a copy engine that is slow shows in the copies.

The output buffer is poisoned (NaN) before each set of calls and checked element by element
after it. Tracing records two events per step, so these are not timings: ``python -m
mpiring.bench --overlap gemm`` measures the makespan. Rank 0 prints; ``--json`` also writes each
rank's medians and every span.

    mpirun -n 2 python -m tools.timeline -b 64M --calls 20 [--gemm 8192] [--json FILE]

(from the repository root: the tools are not part of the installed package).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from mpiring.bench.argtypes import RankZeroParser, int_at_least, nonneg_int, size_arg
from mpiring.trace import RingTimeline, ring_timeline

ALONE, BESIDE = "alone", "beside GEMM"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = RankZeroParser(prog="python -m tools.timeline",
                       description=(__doc__ or "").split("\n")[0].split(": ", 1)[-1])
    p.add_argument("-b", "--bytes", type=size_arg, default=64 << 20, metavar="SIZE",
                   help="bytes per call (float32; default 64M)")
    p.add_argument("--calls", type=int_at_least(1), default=20, help="traced calls per setting")
    p.add_argument("--gemm", type=nonneg_int, default=8192, metavar="N",
                   help="GPUs: N x N float16 GEMMs beside the second set of calls (0: none)")
    p.add_argument("--gemm-sms", type=nonneg_int, default=None, metavar="N",
                   help="plan the GEMMs for N SMs (cublasSetSmCountTarget; 0: all; default: "
                        "those --sm-budget leaves, as mpiring.bench --overlap does)")
    p.add_argument("--sm-budget", type=int_at_least(1), default=None, metavar="N",
                   help="the communicator's sm_budget")
    p.add_argument("--host", action="store_true", help="host arrays even where GPUs exist")
    p.add_argument("--timeout", type=float, default=60.0, help="the communicator's timeout (s)")
    p.add_argument("--json", metavar="FILE", help="also write the medians and every span here")
    args = p.parse_args(argv)
    if args.bytes < 4 or args.bytes % 4:
        p.error(f"-b {args.bytes}: a float32 call needs a positive multiple of 4 bytes")
    return args


def traced(comm: Any, xp: Any, x: Any, expected: Any, calls: int) -> RingTimeline:
    """``calls`` ring calls on ``x``, traced; the output checked, every element."""
    out = xp.full_like(x, xp.nan)
    with ring_timeline(comm) as timeline:
        for _ in range(calls):
            comm.Allreduce(x, out, algorithm="ring")
    wrong = int(xp.count_nonzero(out != expected))
    if wrong:
        raise RuntimeError(f"rank {comm.rank}: {wrong} of {out.size} elements of the ring's result are wrong")
    return timeline


def beside_gemms(comm: Any, x: Any, expected: Any, args: argparse.Namespace,
                 alone_call_s: float) -> RingTimeline:
    """The traced calls while GEMMs run back to back on another stream (enough to outlast them)."""
    import cupy

    from mpiring.bench.carveout import sms_left
    from mpiring.bench.loads import CupyGemm

    sms = args.gemm_sms if args.gemm_sms is not None else sms_left(comm.sm_budget)
    load = CupyGemm(args.gemm, sms=sms)
    stream = cupy.cuda.Stream(non_blocking=True)
    marks = [cupy.cuda.Event() for _ in range(2)]
    with stream:
        load.gemm()  # warm-up (cuBLAS's workspace)
        marks[0].record()
        for _ in range(5):
            load.gemm()
        marks[1].record()
    stream.synchronize()
    gemm_s = cupy.cuda.get_elapsed_time(*marks) / 1e3 / 5
    with stream:
        for _ in range(math.ceil(2 * args.calls * alone_call_s / gemm_s) + 4):
            load.gemm()  # queued first: the calls arrive while they run
    try:
        return traced(comm, cupy, x, expected, args.calls)
    finally:
        stream.synchronize()


def run(args: argparse.Namespace, world: Any) -> dict[str, RingTimeline]:
    """This rank's timelines, per setting."""
    from mpiring.communicator import Communicator

    with Communicator(world, gpu=False if args.host else None, sm_budget=args.sm_budget,
                      timeout=args.timeout) as comm:
        xp: Any = np
        if comm.gpu:
            import cupy

            xp = cupy
        count = args.bytes // 4
        base = xp.arange(count, dtype=xp.float32) % 7  # small integers: every sum is exact
        x = base + comm.rank
        expected = base * comm.size + comm.size * (comm.size - 1) // 2
        out = {ALONE: traced(comm, xp, x, expected, args.calls)}
        if comm.gpu and args.gemm:
            out[BESIDE] = beside_gemms(comm, x, expected, args, out[ALONE].summary().call)
        return out


def main(argv: Sequence[str] | None = None, world: Any = None) -> int:
    args = parse_args(argv)
    if world is None:
        from mpi4py import MPI

        world = MPI.COMM_WORLD
    try:
        mine: dict[str, Any] = {k: {"median": asdict(t.summary()), "calls": [[asdict(s) for s in c]
                                                                             for c in t.calls]}
                                for k, t in run(args, world).items()}
        error = ""
    except Exception as err:  # noqa: BLE001 - reported by rank 0 for every rank, then exit 1
        mine, error = {}, f"{type(err).__name__}: {err}"
    ranks = world.gather((mine, error), root=0)
    status = report(args, world.size, ranks) if world.rank == 0 else 0
    return int(world.bcast(status, root=0))


def report(args: argparse.Namespace, size: int, ranks: list[tuple[dict[str, Any], str]]) -> int:
    """Rank 0: print every rank's medians (and write ``--json``); 1 if a rank failed."""
    from mpiring.trace import CallSummary

    print(f"# ring timeline: {args.calls} calls of {args.bytes} bytes (float32 sum) per setting, "
          f"{size} ranks; medians over the calls")
    failed = [f"rank {r}: {e}" for r, (_, e) in enumerate(ranks) if e]
    for setting in (ALONE, BESIDE):
        for r, (timelines, _) in enumerate(ranks):
            if setting in timelines:
                print(f"{setting:12s} rank {r}: {CallSummary(**timelines[setting]['median']).line()}")
    if args.gemm and not failed and not any(BESIDE in t for t, _ in ranks):
        print("# no GEMM setting: host arrays (the GEMMs run on GPUs only)")
    for line in failed:
        print(f"# FAILED {line}", file=sys.stderr)
    if args.json:
        from mpiring.bench.metadata import provenance

        with open(args.json, "w") as f:
            json.dump({**provenance(), "bytes": args.bytes, "calls": args.calls, "gemm": args.gemm,
                       "gemm_sms": args.gemm_sms, "sm_budget": args.sm_budget,
                       "ranks": [t for t, _ in ranks], "errors": failed}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
