"""``python -m tools.ce_patterns``: what copy engines give a ring step and an all-to-all phase.

Issue 27 asks whether an all-to-all copy-engine two-shot can beat NCCL from 1 to 256 MiB on a
node where every GPU reaches every other (NVLink through NVSwitch). Before its GPU body is
written, this measures the two patterns it would be built from, in one process that drives
every GPU of the machine (no MPI, peer access between every pair), for a message of S bytes
over n GPUs:

  ring step   each GPU copies S/n bytes to the next GPU, all at once: one step of the ring,
              which runs 2(n-1) of them;
  all-to-all  each GPU copies S/n bytes to every other GPU, a stream per peer, all at once:
              one phase of the two-shot (reduce-scatter's pushes; all-gather's are the same);
  permuted    the same bytes as n-1 steps, one peer at a time per GPU (step s: GPU i to GPU
              i+s), each GPU's steps in order on one stream: every GPU sends to one peer and
              receives from one at a time, as in a ring step, but no step waits for a fold;
  fold        on one GPU, out = s_0 + s_1 + ... + s_(n-1) over n arrays of S/n bytes, in that
              order (``tools/csrc/ce_patterns.cu``): the two-shot's fold, bound by memory.

Every GPU's copy streams wait behind a *gate* (``tools/csrc/enqueue.cu``: a kernel spinning
on a word of pinned host memory) until all copies are enqueued, so they start together; a
pattern's time is, over the GPUs, the longest from the gate's opening (an event after it) to
the end of that GPU's last copy, ``--reps`` times; the median is printed with the bound it implies:
``2(n-1) x ring step`` for a ring whose steps did nothing else, ``2 x min(all-to-all, permuted)
+ fold`` for a two-shot without overlap. Neither counts flag waits: they are floors.

    python -m tools.ce_patterns [--sizes 1M,4M,16M,64M,256M,1G] [--reps 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from typing import Any

import numpy as np

from mpiring.bench.sizes import parse_size

from . import kernels

SIZES = "1M,4M,16M,64M,256M,1G"


class Machine:
    """Every GPU of this process, with peer access between every pair and a stream per peer."""

    def __init__(self) -> None:
        import cupy

        self.cupy, self.rt = cupy, cupy.cuda.runtime
        self.n = self.rt.getDeviceCount()
        if self.n < 2:
            sys.exit(f"python -m tools.ce_patterns needs at least 2 GPUs, this process sees {self.n}")
        self.streams: dict[tuple[int, int], Any] = {}
        self.gate = cupy.RawKernel(kernels.source("enqueue.cu"), "gate")
        self.pinned = cupy.cuda.alloc_pinned_memory(4)  # mapped into every GPU (unified addressing)
        self.word = (ctypes.c_int32 * 1).from_address(self.pinned.ptr)
        self.gates: list = []  # per GPU: the stream its gate runs on
        for i in range(self.n):
            with cupy.cuda.Device(i):
                self.gates.append(cupy.cuda.Stream(non_blocking=True))
                for j in range(self.n):
                    if j != i:
                        if not self.rt.deviceCanAccessPeer(i, j):
                            sys.exit(f"GPU {i} cannot reach GPU {j} directly: no all-to-all here")
                        self.rt.deviceEnablePeerAccess(j)
                        self.streams[i, j] = cupy.cuda.Stream(non_blocking=True)

    def buffers(self, nbytes: int) -> tuple[list, dict]:
        """Per GPU a source of ``nbytes``; per pair (i, j) a destination of ``nbytes`` on j."""
        cp = self.cupy
        src, dst = [], {}
        for i in range(self.n):
            with cp.cuda.Device(i):
                src.append(cp.ones(nbytes, dtype=cp.uint8))
        for i in range(self.n):
            for j in range(self.n):
                if j != i:
                    with cp.cuda.Device(j):
                        dst[i, j] = cp.empty(nbytes, dtype=cp.uint8)
        return src, dst

    def sync(self) -> None:
        for i in range(self.n):
            with self.cupy.cuda.Device(i):
                self.rt.deviceSynchronize()

    def copies(self, lanes: list[list[tuple[int, int]]], src: list, dst: dict, nbytes: int) -> float:
        """Seconds for the copies i -> j of ``lanes``: the lanes at once, each on its own stream
        (the stream of its first pair), a lane's copies in order, behind the gate: the longest,
        over the GPUs, from the gate's opening to their last copy's end."""
        cp = self.cupy
        self.sync()
        self.word[0] = 0
        opened = []
        for i in range(self.n):
            with cp.cuda.Device(i):
                self.gate((1,), (1,), (np.intp(self.pinned.ptr), np.uint64(2e9)), stream=self.gates[i])
                opened.append(cp.cuda.Event())
                opened[-1].record(self.gates[i])
        ends = []
        for lane in lanes:
            i = lane[0][0]
            with cp.cuda.Device(i):
                stream = self.streams[lane[0]]
                stream.wait_event(opened[i])
                for src_gpu, j in lane:
                    self.rt.memcpyPeerAsync(dst[src_gpu, j].data.ptr, j, src[src_gpu].data.ptr, src_gpu,
                                            nbytes, stream.ptr)
                ends.append((i, cp.cuda.Event()))
                ends[-1][1].record(stream)
        self.word[0] = 1  # every copy is enqueued: open the gates
        longest = 0.0
        for i, end in ends:
            with cp.cuda.Device(i):
                end.synchronize()
                longest = max(longest, cp.cuda.get_elapsed_time(opened[i], end) / 1e3)
        return longest

    def fold(self, nbytes: int, reps: int) -> float:
        """Median seconds of the rank-ordered fold of n float32 arrays of ``nbytes`` each on GPU 0."""
        cp = self.cupy
        with cp.cuda.Device(0):
            n4 = max(1, nbytes // 16)
            sources = [cp.ones(4 * n4, dtype=cp.float32) for _ in range(self.n)]
            pointers = cp.array([x.data.ptr for x in sources], dtype=cp.uint64)
            out = cp.empty(4 * n4, dtype=cp.float32)
            kernel = cp.RawKernel(kernels.source("ce_patterns.cu"), "fold_ranked")
            sms = cp.cuda.Device(0).attributes["MultiProcessorCount"]
            blocks = int(min(4 * sms, -(-n4 // 256)))
            times = []
            for _ in range(reps + 2):
                a, b = cp.cuda.Event(), cp.cuda.Event()
                a.record()
                kernel((blocks,), (256,), (out, pointers, np.int32(self.n), np.int64(n4)))
                b.record()
                b.synchronize()
                times.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
            return statistics.median(times[2:])


def measure(machine: Machine, nbytes: int, reps: int) -> dict:
    n = machine.n
    piece = max(1, nbytes // n)
    src, dst = machine.buffers(piece)
    ring = [[(i, (i + 1) % n)] for i in range(n)]
    alltoall = [[(i, j)] for i in range(n) for j in range(n) if j != i]
    permuted = [[(i, (i + s) % n) for s in range(1, n)] for i in range(n)]
    step = statistics.median(machine.copies(ring, src, dst, piece) for _ in range(reps))
    phase = statistics.median(machine.copies(alltoall, src, dst, piece) for _ in range(reps))
    steps = statistics.median(machine.copies(permuted, src, dst, piece) for _ in range(reps))
    fold = machine.fold(piece, reps)
    del src, dst
    ring_floor = 2 * (n - 1) * step
    twoshot_floor = 2 * min(phase, steps) + fold
    return dict(bytes=nbytes, gpus=n, ring_step_us=step * 1e6, alltoall_phase_us=phase * 1e6,
                permuted_phase_us=steps * 1e6, fold_us=fold * 1e6, ring_floor_us=ring_floor * 1e6,
                twoshot_floor_us=twoshot_floor * 1e6,
                twoshot_floor_busbw_gbs=2 * (n - 1) / n * nbytes / twoshot_floor / 1e9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.ce_patterns",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default=SIZES, help=f"message sizes (default {SIZES})")
    parser.add_argument("--reps", type=int, default=20, help="timed repetitions of each pattern")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    machine = Machine()
    print(f"# {machine.n} GPUs, peer access between every pair; copies behind a gate, timed by events, "
          f"median of {args.reps}")
    print(f"{'size':>8} {'ring step':>11} {'all-to-all':>11} {'permuted':>11} {'fold':>9} "
          f"{'ring floor':>11} {'two-shot floor':>15} {'busbw':>8}")
    rows = []
    for text in args.sizes.split(","):
        row = measure(machine, parse_size(text), args.reps)
        rows.append(row)
        print(f"{text:>8} {row['ring_step_us']:9.1f}us {row['alltoall_phase_us']:9.1f}us "
              f"{row['permuted_phase_us']:9.1f}us {row['fold_us']:7.1f}us {row['ring_floor_us']:9.1f}us "
              f"{row['twoshot_floor_us']:13.1f}us {row['twoshot_floor_busbw_gbs']:6.1f}GB/s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(tool="tools.ce_patterns", gpus=machine.n, reps=args.reps, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
