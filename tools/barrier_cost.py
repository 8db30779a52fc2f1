"""``python -m tools.barrier_cost``: what one barrier of the direct kernels costs, by its parts.

The one-shot and two-shot kernels (``mpiring/cuda/csrc/direct.cu``) meet their peers in
barriers: block b of every GPU meets block b of every other, each of its first n threads storing
a flag into a peer with release semantics at system scope and spinning with acquire loads on
its own. In CUDA graphs one-shot's floor at 1 KiB sits about 4.4 us above oneshot-ll's (which
has no barrier), and two-shot's second barrier adds about as much again. This measures one
barrier alone, in one process that drives every GPU (peer access between every pair, the same
NVLink mappings as CUDA IPC), ``--iters`` barriers in one launch per GPU, after ``--warm``
untimed ones: the time per barrier on the slowest GPU, for each mode of
``tools/csrc/barrier_cost.cu`` (release, relaxed, fence1, spin), grid and bytes pushed to every
peer before each barrier.

    python -m tools.barrier_cost [--blocks 1,8,32,128] [--bytes 0,1K,64K] [--iters 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from mpiring.bench.sizes import parse_size

from . import kernels

MODES = ("release", "relaxed", "fence1", "spin")
THREADS = 512


class Machine:
    """Every GPU of this process: peer access between every pair, a flag table and a data area on each."""

    def __init__(self, max_blocks: int, max_bytes: int) -> None:
        import cupy

        self.cp = cupy
        rt = cupy.cuda.runtime
        self.n = rt.getDeviceCount()
        if self.n < 2:
            sys.exit(f"python -m tools.barrier_cost needs at least 2 GPUs, this process sees {self.n}")
        self.flags, self.areas, self.streams, self.stamps, self.kernel = [], [], [], [], []
        for i in range(self.n):
            with cupy.cuda.Device(i):
                for j in range(self.n):
                    if j != i:
                        rt.deviceEnablePeerAccess(j)
                self.flags.append(cupy.zeros(self.n * max_blocks, dtype=cupy.uint64))
                self.areas.append(cupy.zeros(max(16, self.n * max_bytes), dtype=cupy.uint8))
                self.streams.append(cupy.cuda.Stream(non_blocking=True))
                self.stamps.append(cupy.zeros(2, dtype=cupy.uint64))
                self.kernel.append(cupy.RawKernel(kernels.source("barrier_cost.cu"), "barriers"))
        self.tables, self.datas = [], []
        for i in range(self.n):
            with cupy.cuda.Device(i):
                self.tables.append(cupy.array([f.data.ptr for f in self.flags], dtype=cupy.uint64))
                self.datas.append(cupy.array([a.data.ptr for a in self.areas], dtype=cupy.uint64))
        self.seq = 0  # flags only grow: every launch continues the sequence of the last

    def per_barrier_us(self, mode: int, blocks: int, nbytes: int, iters: int, warm: int) -> float:
        """Microseconds per barrier on the slowest GPU, after ``warm`` untimed barriers."""
        cp = self.cp
        for i in range(self.n):
            with cp.cuda.Device(i):
                self.kernel[i]((blocks,), (THREADS,),
                               (self.tables[i], self.datas[i], np.int32(i), np.int32(self.n), np.int32(iters),
                                np.int32(warm), np.int32(mode), np.int64(nbytes), np.uint64(self.seq),
                                self.stamps[i]), stream=self.streams[i])
        self.seq += iters
        worst = 0.0
        for i in range(self.n):
            with cp.cuda.Device(i):
                self.streams[i].synchronize()
                start, end = (int(v) for v in self.stamps[i].get())
                worst = max(worst, (end - start) / 1e3 / (iters - warm))
        return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.barrier_cost",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--blocks", default="1,8,32,128", help="grids to time (default 1,8,32,128)")
    parser.add_argument("--bytes", default="0,1K,64K", help="bytes pushed to every peer before each barrier")
    parser.add_argument("--iters", type=int, default=2000, help="barriers per launch (default 2000)")
    parser.add_argument("--warm", type=int, default=200, help="untimed barriers first (default 200)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    grids = [int(b) for b in args.blocks.split(",")]
    sizes = [parse_size(s) for s in args.bytes.split(",")]
    machine = Machine(max(grids), max(sizes))
    print(f"# {machine.n} GPUs; us per barrier on the slowest GPU, {args.iters - args.warm} barriers "
          f"after {args.warm}; {THREADS} threads a block")
    print(f"{'blocks':>6} {'bytes':>8} " + " ".join(f"{m:>8}" for m in MODES))
    rows = []
    for blocks in grids:
        for nbytes in sizes:
            times = [machine.per_barrier_us(mode, blocks, nbytes, args.iters, args.warm)
                     for mode in range(len(MODES))]
            rows.append(dict(blocks=blocks, bytes=nbytes, **dict(zip(MODES, times, strict=True))))
            print(f"{blocks:6d} {nbytes:8d} " + " ".join(f"{t:8.2f}" for t in times), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(tool="tools.barrier_cost", gpus=machine.n, iters=args.iters, warm=args.warm,
                           rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
