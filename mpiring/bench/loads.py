"""The GPU side of ``--overlap``: GEMM loads behind one small protocol (:class:`Load`), and
:class:`GpuTimeline`, which enqueues them and the allreduce calls on two non-blocking CuPy
streams and times both with CUDA events. What is measured and why: :mod:`mpiring.bench.overlap`;
the repetitions: :mod:`mpiring.bench.overlap_run`.

Loads: :class:`CupyGemm` (float16: CuPy has no bfloat16) and :class:`TorchGemm` (bfloat16,
torch's matmul on the very same CUDA stream through ``torch.cuda.ExternalStream``). ``gemm()``
writes into a preallocated output, so nothing is allocated while timing; cuBLAS's workspace is
set up by the calibration's warm-up GEMMs on the same stream.

No start gate: the GEMMs start as they are enqueued, tens of microseconds each ahead of the
calls, so the calls start late by the host's time to enqueue the GEMMs, and that counts
against overlap (the makespan comes out longer, never shorter). A gate that held the GEMM
stream on a word of pinned host memory (``cuStreamWaitValue64``) until every GEMM was
enqueued deadlocked on an H200: CuPy 14.2's matmul waits on the host for the held stream
(``_try_fastcall_matmul``). ``GpuTimeline.gate`` stays the seam for one that does not.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from .command import BenchError
from .measure import agree
from .overlap import GEMM, GEMMS_ALONE, MIN_GEMM_S, MIN_WINDOW_GEMMS, TRAIN, Shape
from .overlap_run import OverlapMeasurer, TimedCall

GATE_NOTE = ("no start gate: GEMMs start as enqueued, ahead of the calls (counts against overlap; "
             "see mpiring.bench.loads)")
TRAIN_AFTER = 1  # GEMMs of the train shape before its allreduce may start
TRAIN_WINDOW_GEMMS = 64  # its loop spans this many (small) GEMMs: as long as the gemm shape's
NO_BF16 = "float16, not bfloat16: CuPy has no bfloat16, and torch cannot run here"


class Load(Protocol):
    """One square GEMM, ``size`` x ``size`` of ``dtype``, enqueued by ``gemm()`` on the stream
    that ``on(stream)`` makes current (a CuPy stream)."""

    size: int
    dtype: str
    backend: str

    def on(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        """A context in which ``gemm()`` enqueues on ``stream``."""

    def gemm(self) -> None:
        """Enqueue ``C = A @ B`` (no allocation, no host wait)."""


def describe(load: Load, gemm_s: float) -> str:
    """``8192x8192 float16 GEMMs (CuPy), 1.70 ms each alone (647 TFLOP/s)``."""
    rate = 2 * load.size**3 / gemm_s / 1e12
    sms = getattr(load, "sms", 0)
    planned = f", planned for {sms} SMs" if sms else ""
    return (f"{load.size}x{load.size} {load.dtype} GEMMs ({load.backend}{planned}), "
            f"{gemm_s * 1e3:.3g} ms each alone ({rate:.0f} TFLOP/s)")


class CupyGemm:
    """A square float16 matmul through CuPy's cuBLAS."""

    backend = "CuPy"

    def __init__(self, size: int, seed: int = 0, dtype: str = "float16", sms: int = 0) -> None:
        import cupy

        from .carveout import cupy_gemms_on

        self.cp = cupy
        self.size, self.dtype, self.sms = size, dtype, sms
        if sms:  # CuPy's handle of this thread: every GEMM of the run (0: cuBLAS's default)
            cupy_gemms_on(sms)
        rng = cupy.random.RandomState(seed)
        self.a = rng.standard_normal((size, size), dtype=cupy.float32).astype(dtype)
        self.b = rng.standard_normal((size, size), dtype=cupy.float32).astype(dtype)
        self.c = cupy.empty((size, size), dtype=dtype)
        cupy.cuda.Device().synchronize()

    def on(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        return stream  # a CuPy stream is its own context: it makes itself current

    def gemm(self) -> None:
        self.cp.matmul(self.a, self.b, out=self.c)


class TorchGemm:
    """A square bfloat16 matmul through torch, on CuPy's streams (``ExternalStream``)."""

    backend = "torch"

    def __init__(self, size: int, seed: int = 0, dtype: str = "bfloat16", sms: int = 0) -> None:
        import cupy
        import torch

        from .carveout import torch_gemms_on

        self.torch = torch
        self.size, self.dtype, self.sms = size, dtype, sms
        self.device = torch.device("cuda", cupy.cuda.Device().id)
        torch.cuda.set_device(self.device)
        if sms:  # torch's current handle (0: cuBLAS's default)
            torch_gemms_on(sms)
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        kind = getattr(torch, dtype)
        self.a = torch.randn(size, size, generator=gen, device=self.device).to(kind)
        self.b = torch.randn(size, size, generator=gen, device=self.device).to(kind)
        self.c = torch.empty(size, size, device=self.device, dtype=kind)
        torch.cuda.synchronize(self.device)
        self._streams: dict[int, Any] = {}

    def on(self, stream: Any) -> contextlib.AbstractContextManager[Any]:
        ext = self._streams.get(stream.ptr)
        if ext is None:
            ext = self._streams[stream.ptr] = self.torch.cuda.ExternalStream(stream.ptr,
                                                                             device=self.device)
        return self.torch.cuda.stream(ext)

    def gemm(self) -> None:
        self.torch.matmul(self.a, self.b, out=self.c)


def torch_usable() -> bool:
    """Whether torch imports and sees a GPU (for bfloat16 GEMMs)."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - absent or broken alike: float16 through CuPy then
        return False
    return bool(torch.cuda.is_available())


class NoGate:
    """Where a start gate would hold the GEMM stream: it holds nothing (see the module
    docstring). The timeline's ``held()`` blocks mark where the GEMMs are enqueued."""

    @contextlib.contextmanager
    def held(self, stream: Any) -> Iterator[None]:
        yield

    def close(self) -> None:
        pass


class GpuTimeline:
    """The GEMM stream and the allreduce stream (both non-blocking: neither waits for the
    other unless told), a pool of timing events, and the start gate of the GEMM stream."""

    def __init__(self) -> None:
        import cupy

        self.cp = cupy
        self.compute = cupy.cuda.Stream(non_blocking=True)
        self.ar = cupy.cuda.Stream(non_blocking=True)
        self._events: list[Any] = []
        self._torch_ar: Any = None  # torch's view of the allreduce stream, once needed
        self.gate = NoGate()
        self.gate_note = GATE_NOTE

    @contextlib.contextmanager
    def _on_ar(self) -> Iterator[None]:
        """The allreduce stream current for CuPy, and for torch where it runs: mpiring orders a
        call on torch tensors (``-d bfloat16``) on torch's current stream."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.ar)
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                if self._torch_ar is None:
                    self._torch_ar = torch.cuda.ExternalStream(self.ar.ptr,
                                                               device=self.cp.cuda.Device().id)
                stack.enter_context(torch.cuda.stream(self._torch_ar))
            yield

    def _marks(self, count: int) -> list[Any]:
        while len(self._events) < count:
            self._events.append(self.cp.cuda.Event())
        return self._events[:count]

    def _seconds(self, begin: Any, end: Any) -> float:
        return float(self.cp.cuda.get_elapsed_time(begin, end)) / 1e3

    def _enqueue_gemms(self, load: Load, marks: Sequence[Any]) -> None:
        """One GEMM between each pair of consecutive ``marks`` (events) on the GEMM stream."""
        stream = self.compute
        marks[0].record(stream)
        with load.on(stream):
            for mark in marks[1:]:
                load.gemm()
                mark.record(stream)

    def synchronize(self) -> None:
        self.cp.cuda.Device().synchronize()

    def calibrate(self, load: Load, warmup: int = 2) -> float:
        """Seconds per GEMM alone, after a warm-up on the GEMM stream (cuBLAS's set-up)."""
        self.gemms_alone(load, warmup)
        self.synchronize()
        return self.gemms_alone(load, GEMMS_ALONE)

    def gemms_alone(self, load: Load, n: int) -> float:
        begin, end = self._marks(2)
        with self.gate.held(self.compute):
            begin.record(self.compute)
            with load.on(self.compute):
                for _ in range(n):
                    load.gemm()
            end.record(self.compute)
        end.synchronize()
        return self._seconds(begin, end) / n

    def calls_alone(self, call: TimedCall, k: int) -> float:
        begin, end = self._marks(2)
        with self._on_ar():
            begin.record(self.ar)
            for _ in range(k):
                call()
            end.record(self.ar)
        end.synchronize()
        return self._seconds(begin, end) / k

    def beside(self, load: Load, call: TimedCall, k: int, n: int) -> tuple[list[float], float, float]:
        """Enqueue ``n`` GEMMs, then run ``k`` calls: the GEMM marks and the loop's start and
        end, in seconds after the first mark (the slowdowns; no gate: see overlap.py)."""
        marks = self._marks(n + 3)
        gemm_marks, a0, a1 = marks[:n + 1], marks[n + 1], marks[n + 2]
        self._enqueue_gemms(load, gemm_marks)
        with self._on_ar():
            a0.record(self.ar)
            for _ in range(k):
                call()
            a1.record(self.ar)
        a1.synchronize()
        gemm_marks[-1].synchronize()
        first = gemm_marks[0]
        return ([self._seconds(first, m) for m in gemm_marks], self._seconds(first, a0),
                self._seconds(first, a1))

    def together(self, load: Load, call: TimedCall, k: int, g: int, after: int) -> tuple[float, float]:
        """``g`` GEMMs behind the start event S (gated until all are enqueued) and ``k`` calls
        that wait for S, or for the end of GEMM ``after``: when each stream ended, after S."""
        start, ready, gemm_end, ar_end = self._marks(4)
        compute, ar = self.compute, self.ar
        with self.gate.held(compute):
            start.record(compute)
            with load.on(compute):
                for i in range(g):
                    if i == after:
                        ready.record(compute)
                    load.gemm()
            if g <= after:  # never so (overlap.gemm_count): the calls then wait for them all
                ready.record(compute)
            gemm_end.record(compute)
            ar.wait_event(ready)
        with self._on_ar():
            for _ in range(k):
                call()
            ar_end.record(ar)
        ar_end.synchronize()
        gemm_end.synchronize()
        return self._seconds(start, gemm_end), self._seconds(start, ar_end)

    def close(self) -> None:
        self.synchronize()
        self.gate.close()


def _shape(world: Any, timeline: GpuTimeline, name: str, size: int, seed: int, sms: int = 0,
           slowdowns: bool = True) -> Shape:
    """Collective: one workload shape's load, calibrated (the slowest rank's GEMM time);
    ``sms``: the SMs its GEMMs are planned for (0: all; :mod:`mpiring.bench.carveout`);
    ``slowdowns``: whether the gemm shape also measures the slowdowns (the tuner needs only
    the makespan)."""
    note = ""
    if name == GEMM:
        load: Load = agree(world, lambda: CupyGemm(size, seed, sms=sms))
    else:
        bf16 = all(agree(world, torch_usable, share=True))
        load = agree(world, lambda: TorchGemm(size, seed, sms=sms) if bf16 else CupyGemm(size, seed, sms=sms))
        note = "" if bf16 else f" ({NO_BF16})"
    gemm_s = max(agree(world, lambda: timeline.calibrate(load), share=True))
    flag = "--gemm-size" if name == GEMM else "--train-gemm-size"
    if gemm_s < MIN_GEMM_S:
        raise BenchError(f"a {size}x{size} GEMM of --overlap {name} takes {gemm_s * 1e6:.1f} us, "
                         f"under {MIN_GEMM_S * 1e6:.0f} us: launches, not the GPU, would set "
                         f"its pace; use a larger {flag}")
    if name == GEMM:
        return Shape(GEMM, load, gemm_s, after=0, window_gemms=MIN_WINDOW_GEMMS, slowdowns=slowdowns,
                     label=describe(load, gemm_s) + "; the allreduce starts with the first")
    return Shape(TRAIN, load, gemm_s, after=TRAIN_AFTER, window_gemms=TRAIN_WINDOW_GEMMS,
                 label=describe(load, gemm_s) + note + "; the allreduce starts after the first")


def set_up(world: Any, shapes: Sequence[str], gemm_size: int, train_size: int, seed: int,
           reps: int, gemm_sms: int = 0, slowdowns: bool = True) -> OverlapMeasurer:
    """Collective: the timeline, each shape's load, calibrated, and the measurer; raises
    :class:`~mpiring.bench.measure.StageFailed` (a rank failed) or :class:`BenchError` (a GEMM
    too small to time) on every rank alike."""
    timeline = agree(world, GpuTimeline)
    sizes = {GEMM: gemm_size, TRAIN: train_size}
    try:
        built = [_shape(world, timeline, name, sizes[name], seed, gemm_sms, slowdowns) for name in shapes]
    except BaseException:
        timeline.close()
        raise
    measurer = OverlapMeasurer(world, timeline, built, reps)
    if timeline.gate_note:
        measurer.note = timeline.gate_note
    return measurer
