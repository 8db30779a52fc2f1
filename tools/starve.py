"""``python -m tools.starve``: how long a fold-sized kernel waits for SMs beside a GEMM.

Issue 14's first question. Beside a continuously running GEMM the ring's own time grows
3-10x: its copies run on copy engines, but every step's fold (``out = in + slot``) is a
kernel that needs SMs, and a cuBLAS GEMM holds them. Which lever gets a small kernel onto the
SMs quickly: fewer blocks, a higher stream priority, an SM partition of its own (a green
context, CUDA 12.4+), or a GEMM told to leave SMs free (``cublasSetSmCountTarget``, what
torch's SM carve-out does: that one is the user's to set, not mpiring's)? This measures each,
on one GPU, with no MPI:

  the fold    ``out[i] = a[i] + b[i]`` over float32 (``--mib`` per operand, default 16 MiB: one
              ring chunk of a 64 MiB allreduce on 2-4 GPUs), 256 threads a block, ``grid``
              blocks (the ring's fold uses up to 4 per SM), compiled here with NVRTC and loaded
              with ``cuLibraryLoadData`` (a context-independent kernel, so the same kernel runs
              on a stream of the primary context or of a green context);
  the GEMM    CuPy's ``matmul`` (cuBLAS) of two N x N float16 matrices (``--gemm``, default 8192),
              enqueued back to back on a stream of its own, enough to outlast the folds.

For each variant (grid, priority, green-context SM count): the fold's time alone and beside
the GEMM (median and 90th percentile of ``--folds`` back-to-back folds, each between two
events on its stream, so the wait for SMs counts), and the GEMM's time beside the folds over
its time alone. What it does not show: the ring's copies and memops (they need no SMs) and
several ranks; ``bench --overlap`` measures the ring itself.

Then whole calls (:mod:`tools.starve_calls`): ``--chunks`` chunks, each copied by a copy
engine and folded, by one fold launch per chunk (as the ring does) or by one persistent fold
per call, ``--calls`` calls per variant, alone and beside the GEMM.

    python -m tools.starve [--gemm 8192] [--mib 16] [--folds 200] [--chunks 8] [--calls 100]
                           [--json FILE]                 # from the repository root
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass

from mpiring.bench.carveout import cupy_gemms_on

from . import kernels

THREADS = 256


@dataclass(frozen=True)
class FoldVariant:
    """Where and how the fold runs: ``grid`` blocks on a stream of the primary context or of a
    green context of ``green_sms`` SMs (0: none), at the highest priority or the default; and
    how many SMs cuBLAS plans the GEMM for (``gemm_sms``; 0: all)."""

    grid: int
    high_priority: bool = False
    green_sms: int = 0
    gemm_sms: int = 0

    @property
    def label(self) -> str:
        where = f"green {self.green_sms} SMs" if self.green_sms else "primary"
        gemm = f", GEMM on {self.gemm_sms} SMs" if self.gemm_sms else ""
        return f"grid {self.grid:4d}, {'high' if self.high_priority else 'default'} priority, {where}{gemm}"


@dataclass
class Result:
    variant: str
    fold_alone_us: float
    fold_alone_p90_us: float
    fold_beside_us: float
    fold_beside_p90_us: float
    fold_beside_p99_us: float
    fold_beside_max_us: float
    slowdown: float  # median beside / median alone
    gemm_slowdown: float  # GEMM time beside the folds / alone on every SM


def cu_check(result: tuple) -> tuple:
    """cuda.bindings returns (CUresult, values...): raise on an error, return the values."""
    err, *values = result
    if int(err) != 0:
        from cuda.bindings import driver

        _, name = driver.cuGetErrorName(err)
        raise RuntimeError(f"CUDA driver error {name.decode() if name else int(err)}")
    return tuple(values)


def compile_folds(major: int, minor: int) -> bytes:
    """The cubin of ``csrc/starve.cu`` (both folds) for compute capability ``major.minor`` (NVRTC)."""
    from cuda.bindings import nvrtc

    prog = nvrtc.nvrtcCreateProgram(kernels.source("starve.cu").encode(), b"starve.cu", 0, [], [])[1]
    opts = [f"--gpu-architecture=sm_{major}{minor}".encode()]
    (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(err) != 0:
        size = nvrtc.nvrtcGetProgramLogSize(prog)[1]
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise RuntimeError(f"NVRTC failed: {log.decode(errors='replace')}")
    size = nvrtc.nvrtcGetCUBINSize(prog)[1]
    cubin = b" " * size
    nvrtc.nvrtcGetCUBIN(prog, cubin)
    return cubin


class Gpu:
    """The driver objects of one measurement: the folds (``kernel``: one per chunk;
    ``chunks_kernel``: one per call), streams per variant, events."""

    def __init__(self, device: int = 0) -> None:
        import cupy
        import numpy as np
        from cuda.bindings import driver

        self.cupy, self.np, self.d = cupy, np, driver
        cupy.cuda.Device(device).use()
        cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1))  # the primary context is current now
        cu_check(driver.cuInit(0))
        self.dev = cu_check(driver.cuDeviceGet(device))[0]
        attr = driver.CUdevice_attribute

        def ask(what):
            return cu_check(driver.cuDeviceGetAttribute(what, self.dev))[0]

        self.sms = ask(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        major = ask(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = ask(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        self.device = device
        self._cubin = np.frombuffer(compile_folds(major, minor), dtype=np.uint8).copy()
        self.library = cu_check(driver.cuLibraryLoadData(self._cubin.ctypes.data, None, None, 0,
                                                       None, None, 0))[0]
        self.kernel = cu_check(driver.cuLibraryGetKernel(self.library, b"fold"))[0]
        self.chunks_kernel = cu_check(driver.cuLibraryGetKernel(self.library, b"fold_chunks"))[0]
        self.lowest, self.highest = cu_check(driver.cuCtxGetStreamPriorityRange())
        self._greens: dict[int, tuple] = {}

    def stream(self, variant: FoldVariant):
        """A non-blocking stream for ``variant`` (made once per variant)."""
        d = self.d
        priority = self.highest if variant.high_priority else 0
        if not variant.green_sms:
            flags = d.CUstream_flags.CU_STREAM_NON_BLOCKING
            return cu_check(d.cuStreamCreateWithPriority(flags, priority))[0]
        green = self._greens.get(variant.green_sms)
        if green is None:
            sm = cu_check(d.cuDeviceGetDevResource(self.dev, d.CUdevResourceType.CU_DEV_RESOURCE_TYPE_SM))[0]
            groups = cu_check(d.cuDevSmResourceSplitByCount(1, sm, 0, variant.green_sms))[0]
            desc = cu_check(d.cuDevResourceGenerateDesc([groups[0]], 1))[0]
            flags = d.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM
            ctx = cu_check(d.cuGreenCtxCreate(desc, self.dev, flags))[0]
            green = self._greens[variant.green_sms] = (ctx, groups[0].sm.smCount)
        flags = d.CUstream_flags.CU_STREAM_NON_BLOCKING
        return cu_check(d.cuGreenCtxStreamCreate(green[0], flags, priority))[0]

    def event(self):
        return cu_check(self.d.cuEventCreate(0))[0]

    def folds(self, stream, grid: int, params: int, marks: list) -> list[float]:
        """``len(marks) // 2`` folds back to back on ``stream``, each between two events: us each."""
        d = self.d
        for k in range(0, len(marks), 2):
            cu_check(d.cuEventRecord(marks[k], stream))
            cu_check(d.cuLaunchKernel(self.kernel, grid, 1, 1, THREADS, 1, 1, 0, stream, params, 0))
            cu_check(d.cuEventRecord(marks[k + 1], stream))
        cu_check(d.cuStreamSynchronize(stream))
        return [self.elapsed_us(marks[k], marks[k + 1]) for k in range(0, len(marks), 2)]

    def elapsed_us(self, start, end) -> float:
        return cu_check(self.d.cuEventElapsedTime(start, end))[0] * 1e3


class Gemms:
    """``n`` x ``n`` float16 GEMMs (CuPy's cuBLAS) queued back to back on a stream of their own,
    an event after each: what the folds run beside. ``alone_us``: one GEMM's median time alone."""

    def __init__(self, cupy, n: int) -> None:
        self.cupy = cupy
        self.x = cupy.ones((n, n), dtype=cupy.float16)
        self.y = cupy.empty_like(self.x)
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.times_us(self.queue(3))  # warm-up (cuBLAS's workspace)
        self.alone_us = statistics.median(self.times_us(self.queue(10)))

    def queue(self, count: int) -> list:
        """Queue ``count`` GEMMs; returns the ``count + 1`` events around them."""
        marks = [self.cupy.cuda.Event() for _ in range(count + 1)]
        with self.stream:
            marks[0].record()
            for k in range(count):
                self.cupy.matmul(self.x, self.x, out=self.y)
                marks[k + 1].record()
        return marks

    def times_us(self, marks: list) -> list[float]:
        """Each queued GEMM's time, in microseconds (waits for them to finish)."""
        self.stream.synchronize()
        elapsed = self.cupy.cuda.get_elapsed_time
        return [elapsed(marks[k], marks[k + 1]) * 1e3 for k in range(len(marks) - 1)]


def measure(gpu: Gpu, variants: list[FoldVariant], gemm_n: int, mib: int, folds: int) -> list[Result]:
    """Every variant's fold alone and beside the GEMM, and the GEMM beside it."""
    cupy, np, d = gpu.cupy, gpu.np, gpu.d
    n4 = (mib << 20) // 16
    a, b, out = (cupy.ones(4 * n4, dtype=cupy.float32) for _ in range(3))
    args = [np.array([p], dtype=np.uint64) for p in (out.data.ptr, a.data.ptr, b.data.ptr)]
    args.append(np.array([n4], dtype=np.int64))
    params = np.array([x.ctypes.data for x in args], dtype=np.uint64)
    gemms = Gemms(cupy, gemm_n)

    results = []
    for variant in variants:
        stream = gpu.stream(variant)
        marks = [gpu.event() for _ in range(2 * folds)]
        gpu.folds(stream, variant.grid, params.ctypes.data, marks)  # warm-up (module load, clocks)
        alone_us = gpu.folds(stream, variant.grid, params.ctypes.data, marks)
        count = max(4, int(2 * statistics.median(alone_us) * folds / gemms.alone_us) + 4)
        cupy_gemms_on(variant.gemm_sms)
        try:
            beside_marks = gemms.queue(count)  # queued first: the folds arrive while they run
            beside_us = gpu.folds(stream, variant.grid, params.ctypes.data, marks)
            gemm_times = gemms.times_us(beside_marks)
        finally:
            cupy_gemms_on(0)
        gemm_beside = statistics.median(gemm_times[:max(1, count // 2)])  # the GEMMs the folds overlapped
        cu_check(d.cuStreamDestroy(stream))
        med_alone, med_beside = statistics.median(alone_us), statistics.median(beside_us)
        results.append(Result(variant.label, med_alone, quantile(alone_us, 0.9), med_beside,
                              quantile(beside_us, 0.9), quantile(beside_us, 0.99), max(beside_us),
                              med_beside / med_alone, gemm_beside / gemms.alone_us))
    return results


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (the nearest rank at or above it; no interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def default_variants(sms: int) -> list[FoldVariant]:
    big = 4 * sms  # what the ring's fold launches at most
    out = [FoldVariant(big), FoldVariant(sms), FoldVariant(16), FoldVariant(big, True), FoldVariant(16, True)]
    out += [FoldVariant(16, False, 16), FoldVariant(16, True, 16), FoldVariant(64, True, 32),
            FoldVariant(big, True, 32)]
    out += [FoldVariant(big, False, 0, sms - 16), FoldVariant(64, False, 0, sms - 16),
            FoldVariant(16, True, 16, sms - 16), FoldVariant(big, False, 0, sms - 32)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.starve",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--gemm", type=int, default=8192, help="GEMM size N (N x N float16)")
    parser.add_argument("--mib", type=int, default=16, help="MiB per fold operand")
    parser.add_argument("--folds", type=int, default=200, help="folds timed per variant and setting")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--match", default="", help="only the variants whose label holds this text")
    parser.add_argument("--calls", type=int, default=100,
                        help="whole calls timed per call variant (0: none; tools.starve_calls)")
    parser.add_argument("--chunks", type=int, default=8, help="chunks (of --mib MiB) per call")
    args = parser.parse_args(argv)
    gpu = Gpu()
    variants = [v for v in default_variants(gpu.sms) if args.match in v.label]
    print(f"# {gpu.sms} SMs; GEMM {args.gemm}^2 float16 (cuBLAS); fold {args.mib} MiB per operand, "
          f"{THREADS} threads a block; stream priorities {gpu.lowest}..{gpu.highest}")
    results = []
    for variant in variants:  # one at a time: a variant that fails (no green contexts) is reported
        try:
            results += measure(gpu, [variant], args.gemm, args.mib, args.folds)
        except Exception as err:  # noqa: BLE001 - reported, the others still run
            print(f"# {variant.label}: {type(err).__name__}: {err}", file=sys.stderr)
            continue
        r = results[-1]
        print(f"{r.variant:45s} alone {r.fold_alone_us:7.1f} us (p90 {r.fold_alone_p90_us:7.1f})  "
              f"beside GEMM {r.fold_beside_us:7.1f} us (p90 {r.fold_beside_p90_us:7.1f}, p99 "
              f"{r.fold_beside_p99_us:7.1f}, max {r.fold_beside_max_us:7.1f})  x{r.slowdown:5.2f}  "
              f"GEMM x{r.gemm_slowdown:5.3f}", flush=True)
    calls = run_calls(gpu, args) if args.calls > 0 else []
    if args.json:
        from mpiring.bench.metadata import provenance

        with open(args.json, "w") as f:
            json.dump({**provenance(), "sms": gpu.sms, "gemm": args.gemm, "mib": args.mib,
                       "folds": args.folds, "results": [asdict(r) for r in results], "chunks": args.chunks,
                       "calls": args.calls, "call_results": [asdict(r) for r in calls]}, f, indent=1)
    return 0 if results or calls else 1  # a variant that failed is reported on stderr


def run_calls(gpu: Gpu, args: argparse.Namespace) -> list:
    """Whole calls: a fold launch per chunk against one persistent fold (:mod:`.starve_calls`)."""
    from .starve_calls import default_call_variants, line, measure_calls

    print(f"# whole calls: {args.chunks} chunks of {args.mib} MiB per operand, each copied by a "
          f"copy engine and then folded; {args.calls} calls per variant")
    out = []
    for cv in default_call_variants(gpu.sms):
        if args.match not in cv.label:
            continue
        try:
            out.append(measure_calls(gpu, cv, args.gemm, args.mib, args.chunks, args.calls))
        except Exception as err:  # noqa: BLE001 - reported, the others still run
            print(f"# {cv.label}: {type(err).__name__}: {err}", file=sys.stderr)
            continue
        print(line(out[-1]), flush=True)
    return out


if __name__ == "__main__":
    sys.exit(main())
