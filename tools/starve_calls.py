"""A whole call's folds beside a GEMM: one launch per chunk (today's ring) or one persistent launch.

Issue 14's candidate "one persistent fold kernel per call that consumes chunks as flags
arrive". :mod:`tools.starve` times single fold launches and finds that about 1 % of them
wait out a whole GEMM for SMs, whatever their grid; a ring call launches one fold per chunk, so
with tens of chunks a large share of calls meets such a wait. A persistent fold waits for SMs
once per call and then keeps its blocks. This measures both shapes of one call on one GPU:

  the call    ``--chunks`` chunks of ``--mib`` MiB per operand. A copy stream copies chunk k of
              ``b`` (``cuMemcpyDtoDAsync``, a copy engine, as a peer's ring step would) and then
              writes flag k (``cuStreamWriteValue64``: the driver's memory barrier comes first).
              The fold stream computes ``out_k = a_k + b_k`` once flag k has come:
  per chunk   ``cuStreamWaitValue64`` on flag k, then a ``fold`` launch (``chunks`` launches);
  persistent  one ``fold_chunks`` launch at the call's start that polls the flags itself.

A call starts at an event on the copy stream (the fold stream waits for it) and ends at an
event on the fold stream after the last fold; calls run one after the other (the next call's
copies wait for the last one's folds). Each call's ``b`` and ``out`` are poisoned (NaN) before
its start event, outside the timed span, and a first round of calls is checked element by
element after every call, so a fold that ran before its flag cannot pass. Reported per variant:
the call's time alone and beside a continuously running GEMM (median, 90th and 99th percentile,
max), and the GEMM's slowdown.

Run by ``python -m tools.starve`` (``--calls``, ``--chunks``) from the repository root.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from mpiring.bench.carveout import cupy_gemms_on

from .starve import THREADS, FoldVariant, Gemms, Gpu, cu_check, quantile

LIMIT_NS = 2_000_000_000  # a flag that does not come within 2 s fails the persistent fold
NAN_BITS = 0x7FC00000  # float32 quiet NaN: the poison of b and out before every call
CHECKED_CALLS = 20  # calls checked element by element, one at a time, before the timed ones


@dataclass(frozen=True)
class CallVariant:
    """How a call's folds run: ``persistent`` (one launch per call) or one launch per chunk,
    on ``variant``'s grid, priority and SM partition."""

    variant: FoldVariant
    persistent: bool

    @property
    def label(self) -> str:
        return f"{'persistent' if self.persistent else 'per chunk '}, {self.variant.label}"


@dataclass
class CallResult:
    variant: str
    launches: int  # fold launches per call
    call_alone_us: float
    call_alone_p90_us: float
    call_beside_us: float
    call_beside_p90_us: float
    call_beside_p99_us: float
    call_beside_max_us: float
    slowdown: float  # median beside / median alone
    gemm_slowdown: float  # GEMM time beside the calls / alone


def default_call_variants(sms: int) -> list[CallVariant]:
    out = []
    for grid in (4 * sms, sms, 16):
        out += [CallVariant(FoldVariant(grid), False), CallVariant(FoldVariant(grid), True)]
    return out + [CallVariant(FoldVariant(16, True), False), CallVariant(FoldVariant(16, True), True)]


class CallShape:
    """The buffers, flags, streams and launch arguments of one call shape on ``gpu``."""

    def __init__(self, gpu: Gpu, cv: CallVariant, mib: int, chunks: int) -> None:
        from mpiring.cuda.memops import StreamMemOps

        cupy, np, d = gpu.cupy, gpu.np, gpu.d
        self.gpu, self.cv, self.chunks = gpu, cv, chunks
        self.n4 = (mib << 20) // 16
        self.chunk_bytes = self.n4 * 16
        n = 4 * self.n4 * chunks
        self.a = (cupy.arange(n, dtype=cupy.float32) % 251) - 125
        self.src = (cupy.arange(n, dtype=cupy.float32) * 3) % 127
        self.expected = self.a + self.src  # exact: small integers in float32
        self.b, self.out = cupy.empty_like(self.a), cupy.empty_like(self.a)
        self.flags = cupy.zeros(chunks, dtype=cupy.uint64)
        self.failed = cupy.zeros(1, dtype=cupy.int32)
        self.memops = StreamMemOps(gpu.device)
        self.copy_stream = cu_check(d.cuStreamCreate(d.CUstream_flags.CU_STREAM_NON_BLOCKING))[0]
        self.fold_stream = gpu.stream(cv.variant)
        self.generation = 0
        self.previous_end = None
        cupy.cuda.Device().synchronize()  # the arrays above, made on CuPy's stream, are ready
        # Launch arguments, packed once (cuLaunchKernel copies them at each launch).
        ptr = [x.data.ptr for x in (self.out, self.a, self.b)]
        self._per_chunk = []
        for k in range(chunks):
            args = [np.array([p + k * self.chunk_bytes], dtype=np.uint64) for p in ptr]
            args.append(np.array([self.n4], dtype=np.int64))
            self._per_chunk.append((args, np.array([x.ctypes.data for x in args], dtype=np.uint64)))
        self._gen = np.zeros(1, dtype=np.uint64)
        self._persistent_args = [*(np.array([p], dtype=np.uint64) for p in ptr),
                                 np.array([self.n4], dtype=np.int64), np.array([chunks], dtype=np.int32),
                                 np.array([self.flags.data.ptr], dtype=np.uint64), self._gen,
                                 np.array([LIMIT_NS], dtype=np.uint64),
                                 np.array([self.failed.data.ptr], dtype=np.uint64)]
        self._persistent = np.array([x.ctypes.data for x in self._persistent_args], dtype=np.uint64)

    @property
    def launches(self) -> int:
        return 1 if self.cv.persistent else self.chunks

    def enqueue(self, start: Any, end: Any) -> None:
        """One call between the events ``start`` (copy stream) and ``end`` (fold stream)."""
        d, grid = self.gpu.d, self.cv.variant.grid
        copy, fold = self.copy_stream, self.fold_stream
        self.generation += 1
        if self.previous_end is not None:  # calls one after the other: b is reused
            cu_check(d.cuStreamWaitEvent(copy, self.previous_end, 0))
        for buf in (self.b, self.out):  # poison, outside the timed span
            cu_check(d.cuMemsetD32Async(buf.data.ptr, NAN_BITS, buf.size, copy))
        cu_check(d.cuEventRecord(start, copy))
        cu_check(d.cuStreamWaitEvent(fold, start, 0))
        if self.cv.persistent:
            self._gen[0] = self.generation
            cu_check(d.cuLaunchKernel(self.gpu.chunks_kernel, grid, 1, 1, THREADS, 1, 1, 0, fold,
                                    self._persistent.ctypes.data, 0))
        b, flags = self.b.data.ptr, self.flags.data.ptr
        for k in range(self.chunks):
            offset = k * self.chunk_bytes
            cu_check(d.cuMemcpyDtoDAsync(b + offset, self.src.data.ptr + offset, self.chunk_bytes, copy))
            self.memops.write(int(copy), flags + 8 * k, self.generation)  # after the copy (barrier)
            if not self.cv.persistent:
                self.memops.wait_geq(int(fold), flags + 8 * k, self.generation)
                cu_check(d.cuLaunchKernel(self.gpu.kernel, grid, 1, 1, THREADS, 1, 1, 0, fold,
                                        self._per_chunk[k][1].ctypes.data, 0))
        cu_check(d.cuEventRecord(end, fold))
        self.previous_end = end

    def run(self, count: int, marks: list) -> list[float]:
        """``count`` calls back to back (``marks``: 2 events a call): microseconds each."""
        for k in range(count):
            self.enqueue(marks[2 * k], marks[2 * k + 1])
        cu_check(self.gpu.d.cuStreamSynchronize(self.fold_stream))
        self.check()
        return [self.gpu.elapsed_us(marks[2 * k], marks[2 * k + 1]) for k in range(count)]

    def check(self) -> None:
        """The last call's output, every element, and no flag that timed out."""
        cupy = self.gpu.cupy
        if int(self.failed.get()[0]):
            raise RuntimeError(f"{self.cv.label}: a flag did not come within {LIMIT_NS / 1e9:.0f} s")
        wrong = int(cupy.count_nonzero(self.out != self.expected))
        if wrong:
            raise RuntimeError(f"{self.cv.label}: {wrong} of {self.out.size} elements wrong")

    def close(self) -> None:
        d = self.gpu.d
        cu_check(d.cuStreamSynchronize(self.copy_stream))
        cu_check(d.cuStreamDestroy(self.copy_stream))
        cu_check(d.cuStreamDestroy(self.fold_stream))


def measure_calls(gpu: Gpu, cv: CallVariant, gemm_n: int, mib: int, chunks: int,
                  calls: int) -> CallResult:
    """``calls`` calls alone and beside the GEMM (after :data:`CHECKED_CALLS` checked ones)."""
    gemms = Gemms(gpu.cupy, gemm_n)
    call = CallShape(gpu, cv, mib, chunks)
    try:
        pair = [gpu.event(), gpu.event()]
        for _ in range(CHECKED_CALLS):  # one at a time, each checked (also the warm-up)
            call.run(1, pair)
        marks = [gpu.event() for _ in range(2 * calls)]
        alone = call.run(calls, marks)
        count = max(4, int(2 * statistics.median(alone) * calls / gemms.alone_us) + 4)
        cupy_gemms_on(cv.variant.gemm_sms)
        try:
            beside_marks = gemms.queue(count)  # queued first: the calls arrive while they run
            beside = call.run(calls, marks)
            gemm_times = gemms.times_us(beside_marks)
        finally:
            cupy_gemms_on(0)
        gemm_beside = statistics.median(gemm_times[:max(1, count // 2)])
    finally:
        call.close()
    med_alone, med_beside = statistics.median(alone), statistics.median(beside)
    return CallResult(cv.label, call.launches, med_alone, quantile(alone, 0.9), med_beside,
                      quantile(beside, 0.9), quantile(beside, 0.99), max(beside),
                      med_beside / med_alone, gemm_beside / gemms.alone_us)


def line(r: CallResult) -> str:
    return (f"{r.variant:58s} {r.launches:3d} launch{'es' if r.launches > 1 else '  '}  alone "
            f"{r.call_alone_us:8.1f} us (p90 {r.call_alone_p90_us:8.1f})  beside GEMM "
            f"{r.call_beside_us:8.1f} us (p90 {r.call_beside_p90_us:8.1f}, p99 "
            f"{r.call_beside_p99_us:8.1f}, max {r.call_beside_max_us:8.1f})  x{r.slowdown:5.2f}  "
            f"GEMM x{r.gemm_slowdown:5.3f}")
