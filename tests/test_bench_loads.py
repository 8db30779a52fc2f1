"""mpiring.bench.loads on the CPU: GpuTimeline over a simulated CUDA (a stand-in ``cupy`` whose
streams run queued work in order on a clock, with events, cross-stream waits and a host that
takes time to enqueue), so the order of its records, waits and the start gate is checked
without a GPU; CupyGemm over numpy. The real GPU run is the lead's (see the README)."""

from __future__ import annotations

import contextlib
import itertools
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI

from mpiring.bench.overlap import GEMM, TRAIN

HOST_GEMM = 20e-6  # host time to enqueue one GEMM
HOST_CALL = 5e-6  # ... one allreduce call
HOST_OP = 0.5e-6  # ... an event record or a wait


class Token:
    """One enqueued record (or a gate): when it ran, once it has."""

    def __init__(self):
        self.time = None


class Sim:
    """A device with in-order streams: each op starts once the stream is free, the host has
    enqueued it, and what it waits for has happened."""

    def __init__(self):
        self.host = 0.0
        self.streams = []
        self.current = None
        self.gate_held = False
        self.calls_under_gate = 0

    def enqueue(self, stream, op, cost=HOST_OP):
        op["at"] = self.host
        stream.queue.append(op)
        self.host += cost

    def run(self):
        progress = True
        while progress:
            progress = False
            for s in self.streams:
                while s.queue:
                    op = s.queue[0]
                    after = op.get("after")
                    if after is not None and after.time is None:
                        break  # waits for something not yet done
                    start = max(s.clock, op["at"], after.time if after is not None else 0.0)
                    s.clock = start + op.get("duration", 0.0)
                    if "token" in op:
                        op["token"].time = s.clock
                    s.queue.pop(0)
                    progress = True
        if any(s.queue for s in self.streams):
            raise RuntimeError("deadlock: a stream waits for what never comes")

    def sync(self, time=None):
        self.run()
        self.host = max(self.host, time if time is not None else max(
            [s.clock for s in self.streams] + [0.0]))


class Stream:
    _ptrs = itertools.count(1)

    def __init__(self, sim, non_blocking=False):
        self.sim, self.queue, self.clock = sim, [], 0.0
        self.ptr = next(self._ptrs)
        self._outer = []
        sim.streams.append(self)

    def __enter__(self):
        self._outer.append(self.sim.current)
        self.sim.current = self
        return self

    def __exit__(self, *exc):
        self.sim.current = self._outer.pop()

    def wait_event(self, event):
        self.sim.enqueue(self, {"after": event.token})


class Event:
    def __init__(self, sim):
        self.sim, self.token = sim, None

    def record(self, stream=None):
        self.token = Token()
        self.sim.enqueue(stream or self.sim.current, {"token": self.token})

    def synchronize(self):
        self.sim.run()
        self.sim.sync(self.token.time)


def fake_cupy(sim):
    def elapsed(a, b):
        sim.run()
        return (b.token.time - a.token.time) * 1e3

    device = SimpleNamespace(id=0, synchronize=sim.sync)
    cuda = SimpleNamespace(Stream=lambda non_blocking=False: Stream(sim, non_blocking),
                           Event=lambda: Event(sim), get_elapsed_time=elapsed,
                           Device=lambda *a: device)
    return SimpleNamespace(cuda=cuda)


class Gate:
    """The start gate, simulated: its wait is released at the host's time when the block ends."""

    def __init__(self, sim):
        self.sim = sim

    @contextlib.contextmanager
    def held(self, stream):
        token = Token()
        self.sim.enqueue(stream, {"after": token})
        self.sim.gate_held = True
        try:
            yield
        finally:
            self.sim.gate_held = False
            token.time = self.sim.host

    def close(self):
        pass


class Load:
    size, dtype, backend = 64, "float16", "sim"

    def __init__(self, sim, gemm_s=1e-3, fail_after=None):
        self.sim, self.gemm_s, self.fail_after = sim, gemm_s, fail_after
        self.enqueued = 0

    def on(self, stream):
        return stream

    def gemm(self):
        if self.fail_after is not None and self.enqueued >= self.fail_after:
            raise RuntimeError("cuBLAS failed")
        self.enqueued += 1
        self.sim.enqueue(self.sim.current, {"duration": self.gemm_s}, HOST_GEMM)


def make_call(sim, call_s):
    def call():
        if sim.gate_held:
            sim.calls_under_gate += 1
        sim.enqueue(sim.current, {"duration": call_s}, HOST_CALL)
    return call


@pytest.fixture
def sim(monkeypatch):

    s = Sim()
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(s))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    return s


def timeline(sim, gate=True):
    from mpiring.bench.loads import GpuTimeline, NoGate

    tl = GpuTimeline()
    assert isinstance(tl.gate, NoGate)  # timed without a gate (mpiring.bench.loads), and it says so
    assert tl.gate_note.startswith("no start gate")
    if gate:
        tl.gate, tl.gate_note = Gate(sim), ""
    return tl


def test_gemms_alone_run_back_to_back_behind_the_gate(sim):
    tl = timeline(sim)
    load = Load(sim, gemm_s=1e-3)
    assert tl.gemms_alone(load, 7) == pytest.approx(1e-3, rel=1e-9)
    assert tl.calibrate(load) == pytest.approx(1e-3, rel=1e-9) and load.enqueued == 7 + 2 + 5


def test_calls_alone_are_paced_by_the_slower_of_the_gpu_and_the_host(sim):
    tl = timeline(sim)
    assert tl.calls_alone(make_call(sim, 50e-6), 100) == pytest.approx(50e-6, rel=1e-3)
    assert tl.calls_alone(make_call(sim, 1e-6), 100) == pytest.approx(HOST_CALL, rel=0.05)


def test_together_starts_both_streams_at_the_common_start(sim):
    tl = timeline(sim)
    load, call = Load(sim, gemm_s=1e-3), make_call(sim, 50e-6)
    gemm_end, ar_end = tl.together(load, call, k=160, g=8, after=0)
    assert gemm_end == pytest.approx(8e-3, rel=1e-9)  # no GEMM waited for the host
    assert ar_end == pytest.approx(160 * 50e-6, abs=2 * HOST_CALL)  # the calls from the start
    assert sim.calls_under_gate == 0  # every call enqueued after the gate's release


def test_without_the_gate_the_calls_start_late(sim):
    tl = timeline(sim, gate=False)
    load, call = Load(sim, gemm_s=1e-3), make_call(sim, 50e-6)
    _, ar_end = tl.together(load, call, k=160, g=8, after=0)
    assert ar_end == pytest.approx(8 * HOST_GEMM + 160 * 50e-6, abs=4 * HOST_OP + 2 * HOST_CALL)


def test_train_calls_wait_for_the_first_gemm(sim):
    tl = timeline(sim)
    load, call = Load(sim, gemm_s=0.2e-3), make_call(sim, 50e-6)
    gemm_end, ar_end = tl.together(load, call, k=40, g=11, after=1)
    assert gemm_end == pytest.approx(11 * 0.2e-3, rel=1e-9)
    assert ar_end == pytest.approx(0.2e-3 + 40 * 50e-6, abs=2 * HOST_CALL)


def test_a_failing_gemm_still_releases_the_gate(sim):
    tl = timeline(sim)
    with pytest.raises(RuntimeError, match="cuBLAS"):
        tl.together(Load(sim, fail_after=3), make_call(sim, 1e-5), k=4, g=8, after=0)
    sim.run()  # no stream is left waiting on the gate
    assert tl.gemms_alone(Load(sim), 2) == pytest.approx(1e-3)


def test_beside_marks_every_gemm_and_the_loop(sim):
    tl = timeline(sim)
    load, call = Load(sim, gemm_s=1e-3), make_call(sim, 50e-6)
    marks, a0, a1 = tl.beside(load, call, k=100, n=10)
    assert len(marks) == 11 and marks[0] == 0.0
    assert np.diff(marks) == pytest.approx([1e-3] * 10, abs=HOST_GEMM)
    assert 0 < a0 < marks[-1] and a1 - a0 == pytest.approx(100 * 50e-6, abs=2 * HOST_CALL)


def test_closing_waits_for_the_device(sim):
    tl = timeline(sim)
    tl.together(Load(sim), make_call(sim, 1e-5), k=2, g=2, after=0)
    tl.close()
    assert not any(s.queue for s in sim.streams)


def test_cupy_gemm_computes_into_its_output(monkeypatch):
    from mpiring.bench.loads import CupyGemm, describe

    class RandomState(np.random.RandomState):  # CuPy's takes a dtype
        def standard_normal(self, size, dtype=np.float64):
            return super().standard_normal(size).astype(dtype)

    fake = SimpleNamespace(random=SimpleNamespace(RandomState=RandomState), float32=np.float32,
                           empty=np.empty, matmul=np.matmul,
                           cuda=SimpleNamespace(Device=lambda: SimpleNamespace(synchronize=lambda: None)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    load = CupyGemm(16, seed=3)
    assert load.a.dtype == np.float16 and not np.array_equal(load.a, load.b)
    stream = contextlib.nullcontext()
    assert load.on(stream) is stream
    load.gemm()
    assert np.allclose(load.c, load.a @ load.b, rtol=1e-2, atol=1e-2)
    assert CupyGemm(16, seed=3).a.tobytes() == load.a.tobytes()  # seeded
    text = describe(load, 1.7e-3)
    assert text.startswith("16x16 float16 GEMMs (CuPy), 1.7 ms each alone")
    assert text.endswith("(0 TFLOP/s)")  # 8 kFLOP in 1.7 ms


def test_torch_is_not_usable_without_torch(monkeypatch):
    from mpiring.bench import loads

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert loads.torch_usable() is False


def test_the_banner_gives_the_gemms_rate():
    """2 n^3 floating-point operations per n x n GEMM: 8192^2 in 1.7 ms is 647 TFLOP/s."""
    from mpiring.bench.loads import describe

    load = SimpleNamespace(size=8192, dtype="float16", backend="CuPy")
    assert describe(load, 1.7e-3) == "8192x8192 float16 GEMMs (CuPy), 1.7 ms each alone (647 TFLOP/s)"


class FakeLoad:
    def __init__(self, size, seed=0, sms=0):
        self.size, self.dtype, self.backend, self.sms = size, "float16", "fake", sms


def set_up_with(monkeypatch, shapes, per_rank_ms):
    """loads.set_up over fake GEMMs on one process whose "ranks" calibrated ``per_rank_ms``."""
    from mpiring.bench import loads

    class FakeTimeline:
        gate_note = ""

        def calibrate(self, load):
            return 1e-3

        def close(self):
            pass

    def agree(world, fn, share=False):
        value = fn()
        if not share:
            return value
        return [value * ms for ms in per_rank_ms] if isinstance(value, float) else [value] * len(per_rank_ms)

    for name, fake in (("CupyGemm", FakeLoad), ("TorchGemm", FakeLoad), ("GpuTimeline", FakeTimeline),
                       ("agree", agree), ("torch_usable", lambda: True)):
        monkeypatch.setattr(loads, name, fake)
    return loads.set_up(MPI.COMM_SELF, shapes, 4096, 2048, 0, reps=3)


def test_each_shape_is_timed_by_its_slowest_rank_and_starts_where_it_says(monkeypatch):
    """The GEMMs' time is the slowest rank's calibration (the work is sized for it); the gemm
    shape starts its calls with the first GEMM and measures the slowdowns, the train shape
    starts them after the first and does not."""
    from mpiring.bench.loads import TRAIN_AFTER, TRAIN_WINDOW_GEMMS
    from mpiring.bench.overlap import MIN_WINDOW_GEMMS

    gemm, train = set_up_with(monkeypatch, [GEMM, TRAIN], [1.0, 1.5, 1.2]).shapes
    assert gemm.gemm_s == pytest.approx(1.5e-3) and train.gemm_s == pytest.approx(1.5e-3)
    assert (gemm.after, gemm.window_gemms, gemm.slowdowns) == (0, MIN_WINDOW_GEMMS, True)
    assert (train.after, train.window_gemms, train.slowdowns) == (TRAIN_AFTER, TRAIN_WINDOW_GEMMS, False)
    assert TRAIN_AFTER > 0
    assert (gemm.load.size, train.load.size) == (4096, 2048)


def test_a_gemm_too_short_to_time_is_refused_by_name(monkeypatch):
    from mpiring.bench.command import BenchError

    with pytest.raises(BenchError, match="takes 50.0 us, under .*use a larger --gemm-size"):
        set_up_with(monkeypatch, [GEMM], [0.05])
    with pytest.raises(BenchError, match="use a larger --train-gemm-size"):
        set_up_with(monkeypatch, [TRAIN], [0.05])
