"""``python -m tools.timeline``: where a ring or ce-twoshot call's time goes, alone and beside a GEMM.

Every rank traces ``--calls`` allreduces of ``-b`` bytes (float32 sum, out of place) of
``--algo`` and reports the medians over its calls.

``ring`` (the default), with :func:`mpiring.trace.ring_timeline`: the call, the copies into the
next rank's slots, the folds (on a GPU their time on the SMs, *including any wait for SMs to
run them*), the slowest fold, and the waits of each queue: for a full slot (the previous
rank's data) and for a free one (the next rank's fold).

``ce-twoshot`` (GPUs only), with :func:`mpiring.trace.alltoall_timeline`: each call is issued by
the engine's Python walk with a CUDA event before and after each device operation on its
stream. Per rank: the call, all its waits and the longest one (its stream, its flag with the
node rank it is about, e.g. ``fold arrived[2] round 0``: the fold waited for rank 2's piece;
over the calls the most frequent, with how often), then per stream (``rs o``: the pushes to
owner o, ``fold``, ``ag o``: the reduced piece pushed to rank o, ``collect``) the summed time of
its waits, flag writes, copies and fold, and the waits with the longest median. The Python
walk and its events take the host longer than the call takes the GPU, so the traced calls are
enqueued behind a *gate* (``tools/csrc/enqueue.cu``'s, as ``python -m tools.enqueue`` uses):
a kernel that holds the calls' stream until a group of ``--gate-calls`` calls is enqueued
(default: as many as keep about 512 commands on the call's busiest stream, at most 32; 0: no
gate, and the spans then show the host's pace too). The first call of a group also waits for
the other ranks' groups. One untraced call comes first (the row's staging, its fold kernel).

First alone, then, on GPUs, beside square float16 GEMMs running back to back on another stream
(``--gemm N``; 0: none), planned for ``--gemm-sms`` SMs (0: all; default: what the
communicator's ``--sm-budget`` leaves). A fold that waits for SMs behind the GEMM shows as
folds far above their time alone, and as the peers' waits; a copy engine that is slow shows in
the copies.

The output buffer is poisoned (NaN) before each set of calls and checked element by element
after it. Tracing records two events per step or operation, so these are not timings:
``python -m mpiring.bench --overlap gemm`` measures the makespan. Rank 0 prints; ``--json``
also writes each rank's medians and every span.

    mpirun -n 2 python -m tools.timeline -b 64M --calls 20 [--gemm 8192] [--json FILE]
    mpirun -n 4 python -m tools.timeline --algo ce-twoshot -b 1M --calls 20 --gemm 0

(from the repository root: the tools are not part of the installed package).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from mpiring.bench.argtypes import RankZeroParser, int_at_least, nonneg_int, size_arg
from mpiring.trace import AllToAllTimeline, RingTimeline, alltoall_timeline, ring_timeline

ALONE, BESIDE = "alone", "beside GEMM"
RING, CE = ALGOS = ("ring", "ce-twoshot")
GATE_COMMANDS = 512  # commands (operations and their two events) a gate group keeps on one stream
GATE_MOST = 32  # calls per gate group at most (the watchdog follows 64 calls at once)
GATE_LIMIT_S = 10.0  # the most a gate holds a stream (its time limit; at most a quarter of --timeout)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = RankZeroParser(prog="python -m tools.timeline",
                       description=(__doc__ or "").split("\n")[0].split(": ", 1)[-1])
    p.add_argument("--algo", choices=ALGOS, default=RING,
                   help="the algorithm traced (default ring; ce-twoshot: GPUs only)")
    p.add_argument("-b", "--bytes", type=size_arg, default=64 << 20, metavar="SIZE",
                   help="bytes per call (float32; default 64M)")
    p.add_argument("--calls", type=int_at_least(1), default=20, help="traced calls per setting")
    p.add_argument("--gate-calls", type=nonneg_int, default=None, metavar="N",
                   help="ce-twoshot: enqueue the traced calls behind a gate kernel, N at a time "
                        f"(default: about {GATE_COMMANDS} commands a stream, at most {GATE_MOST} "
                        "calls; 0: no gate)")
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
    if args.algo == CE and args.host:
        p.error("--algo ce-twoshot runs on GPU arrays only: drop --host")
    return args


def check(comm: Any, xp: Any, out: Any, expected: Any, algo: str) -> None:
    wrong = int(xp.count_nonzero(out != expected))
    if wrong:
        raise RuntimeError(f"rank {comm.rank}: {wrong} of {out.size} elements of the {algo}'s result "
                           "are wrong")


def traced(comm: Any, xp: Any, x: Any, expected: Any, args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """``args.calls`` calls of ``args.algo`` on ``x``, traced, the output checked, every element:
    the timeline and what else this rank reports of them."""
    if args.algo == CE:
        return traced_ce(comm, x, expected, args)
    out = xp.full_like(x, xp.nan)
    with ring_timeline(comm) as timeline:
        for _ in range(args.calls):
            comm.Allreduce(x, out, algorithm=RING)
    check(comm, xp, out, expected, RING)
    return timeline, {}


def gate_group(ranks: int, count: int, rank: int) -> int:
    """Traced ce-twoshot calls per gate group: as many as keep about :data:`GATE_COMMANDS`
    commands (each operation and its two events) on the busiest of a call's streams, with
    every phase's pushes on one stream (the default), at most :data:`GATE_MOST`."""
    from mpiring.algorithms.ce_twoshot import area_bytes
    from mpiring.ring.alltoall_schedule import AllToAllPlan, Rounds

    plan = AllToAllPlan(ranks, count, area_bytes() // 4)
    # After two rounds of earlier calls: with the "slot free" waits of a call in steady state.
    per_stream = Counter(key if isinstance(key, str) else key[0]
                         for key, _ in plan.issue_order(rank, Rounds(2, 2)))
    return max(1, min(GATE_MOST, GATE_COMMANDS // (3 * max(per_stream.values(), default=1))))


def traced_ce(comm: Any, x: Any, expected: Any,
              args: argparse.Namespace) -> tuple[AllToAllTimeline, dict[str, Any]]:
    """The ce-twoshot calls, on a stream of their own, in gated groups (module docstring)."""
    import cupy

    from .enqueue import Gate

    group = args.gate_calls if args.gate_calls is not None else gate_group(comm.size, x.size, comm.rank)
    limit = min(GATE_LIMIT_S, args.timeout / 4)
    stream = cupy.cuda.Stream(non_blocking=True)  # nothing else of this process waits behind the gate
    # After x and expected (made on the current stream), not after the GEMMs on theirs.
    made = cupy.cuda.Event(disable_timing=True)
    made.record(cupy.cuda.get_current_stream())
    stream.wait_event(made)
    enqueue_s: list[float] = []
    with stream:
        out = cupy.full_like(x, cupy.nan)
        comm.Allreduce(x, out, algorithm=CE)  # untraced: the staging, the fold kernel
        comm.synchronize()
        out.fill(cupy.nan)
        gates: list[Gate] = []  # kept to the end: their words are read by kernels that may start late
        with alltoall_timeline(comm) as timeline:
            done = 0
            while done < args.calls:
                calls = min(group or args.calls, args.calls - done)
                # A gate (and its word) per group: one whose kernel starts late still finds it open.
                gate = Gate(limit) if group else None
                if gate is not None:
                    gates.append(gate)
                    gate.close()
                start = time.perf_counter()
                try:
                    for _ in range(calls):
                        comm.Allreduce(x, out, algorithm=CE)
                finally:
                    if gate is not None:
                        gate.open()
                enqueue_s.append(time.perf_counter() - start)
                done += calls
        check(comm, cupy, out, expected, CE)
    # A group that took longer than the gate's limit to enqueue ran as it was enqueued.
    return timeline, {"gate_calls": group, "gate_limit_s": limit if group else None, "enqueue_s": enqueue_s}


def beside_gemms(comm: Any, x: Any, expected: Any, args: argparse.Namespace,
                 alone_call_s: float) -> tuple[Any, dict[str, Any]]:
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
        return traced(comm, cupy, x, expected, args)
    finally:
        stream.synchronize()


def run(args: argparse.Namespace, world: Any) -> dict[str, tuple[Any, dict[str, Any]]]:
    """This rank's timelines, per setting, with what else it reports of them."""
    from mpiring.communicator import Communicator

    with Communicator(world, gpu=False if args.host else None, sm_budget=args.sm_budget,
                      timeout=args.timeout) as comm:
        if args.algo == CE and not comm.gpu:
            raise RuntimeError("ce-twoshot runs on GPU arrays only, and this communicator has no GPUs")
        xp: Any = np
        if comm.gpu:
            import cupy

            xp = cupy
        count = args.bytes // 4
        base = xp.arange(count, dtype=xp.float32) % 7  # small integers: every sum is exact
        x = base + comm.rank
        expected = base * comm.size + comm.size * (comm.size - 1) // 2
        out = {ALONE: traced(comm, xp, x, expected, args)}
        if comm.gpu and args.gemm:
            timeline, extra = out[ALONE]
            # Per call, the GPU's time or (ce-twoshot's traced Python walk) the host's, if longer.
            gpu_s = timeline.summary().call if timeline.calls else 0.0  # none: ce-twoshot on one rank
            alone_s = max(gpu_s, sum(extra.get("enqueue_s", [])) / args.calls)
            out[BESIDE] = beside_gemms(comm, x, expected, args, alone_s)
        return out


def record(timeline: RingTimeline | AllToAllTimeline, extra: dict[str, Any]) -> dict[str, Any]:
    """One setting of one rank, as the JSON holds it."""
    # No call: ce-twoshot on one rank, where a call is a copy (the row's staging is never made).
    doc: dict[str, Any] = {"median": asdict(timeline.summary()) if timeline.calls else None,
                           "calls": [[asdict(s) for s in c] for c in timeline.calls]}
    if isinstance(timeline, AllToAllTimeline):
        doc["slowest_waits"] = timeline.slowest_waits()
    return doc | extra


def main(argv: Sequence[str] | None = None, world: Any = None) -> int:
    args = parse_args(argv)
    if world is None:
        from mpi4py import MPI

        world = MPI.COMM_WORLD
    try:
        mine: dict[str, Any] = {k: record(*t) for k, t in run(args, world).items()}
        error = ""
    except Exception as err:  # noqa: BLE001 - reported by rank 0 for every rank, then exit 1
        mine, error = {}, f"{type(err).__name__}: {err}"
    ranks = world.gather((mine, error), root=0)
    status = report(args, world.size, ranks) if world.rank == 0 else 0
    return int(world.bcast(status, root=0))


def ce_lines(setting: str, rank: int, doc: dict[str, Any]) -> list[str]:
    """Rank ``rank``'s ce-twoshot medians of one setting: the call, the streams, the slowest waits."""
    from mpiring.trace import AllToAllSummary

    if doc["median"] is None:
        return [f"{setting:12s} rank {rank}: no call traced (on one rank a ce-twoshot call is a copy)"]
    summary = AllToAllSummary(**doc["median"])
    pad = " " * 8
    lines = [f"{setting:12s} rank {rank}: {summary.line()}"]
    lines += [pad + line for line in summary.stream_lines()]
    lines.append(f"{pad}slowest waits (median over the calls that have them):"
                 + ("" if doc["slowest_waits"] else " none"))
    lines += [f"{pad}  {s * 1e6:9.1f} us  {name} ({n} calls)" for name, s, n in doc["slowest_waits"]]
    limit = doc.get("gate_limit_s")
    if limit is not None and max(doc["enqueue_s"], default=0.0) >= limit:
        lines.append(f"{pad}# a gate group took {max(doc['enqueue_s']):.1f} s to enqueue, past the gate's "
                     f"{limit:.1f} s: those calls ran as they were enqueued (lower --gate-calls)")
    return lines


def report(args: argparse.Namespace, size: int, ranks: list[tuple[dict[str, Any], str]]) -> int:
    """Rank 0: print every rank's medians (and write ``--json``); 1 if a rank failed."""
    from mpiring.trace import CallSummary

    if args.algo == RING:
        print(f"# ring timeline: {args.calls} calls of {args.bytes} bytes (float32 sum) per setting, "
              f"{size} ranks; medians over the calls")
    else:
        gates = sorted({t[ALONE].get("gate_calls") for t, _ in ranks if ALONE in t} - {None})
        gated = (f"behind a gate, {', '.join(map(str, gates))} calls at a time" if gates and gates != [0]
                 else "not gated")
        print(f"# ce-twoshot timeline: {args.calls} calls of {args.bytes} bytes (float32 sum) per setting, "
              f"{size} ranks; each call issued by the Python walk with an event around each operation, "
              f"{gated}; medians over the calls, in us")
    failed = [f"rank {r}: {e}" for r, (_, e) in enumerate(ranks) if e]
    for setting in (ALONE, BESIDE):
        for r, (timelines, _) in enumerate(ranks):
            if setting not in timelines:
                continue
            if args.algo == RING:
                print(f"{setting:12s} rank {r}: {CallSummary(**timelines[setting]['median']).line()}")
            else:
                print("\n".join(ce_lines(setting, r, timelines[setting])))
    if args.gemm and not failed and not any(BESIDE in t for t, _ in ranks):
        print("# no GEMM setting: host arrays (the GEMMs run on GPUs only)")
    for line in failed:
        print(f"# FAILED {line}", file=sys.stderr)
    if args.json:
        from mpiring.bench.metadata import provenance

        with open(args.json, "w") as f:
            json.dump({**provenance(), "algo": args.algo, "bytes": args.bytes, "calls": args.calls,
                       "gemm": args.gemm, "gemm_sms": args.gemm_sms, "sm_budget": args.sm_budget,
                       "gate_calls": args.gate_calls, "ranks": [t for t, _ in ranks], "errors": failed},
                      f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
