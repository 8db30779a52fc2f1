"""mpiring.bench on one GPU (skipped without CuPy and a GPU): the CuPy/torch memory spaces,
device-side generation matching the host's, poison and mismatch reports, CUDA-event timing,
and the measurer's check on device buffers."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from mpi4py import MPI

import mpiring
from mpiring.bench.arrays import CupySpace, HostSpace, TorchBf16Space
from mpiring.bench.data import DTYPE_NAMES, InputGenerator, resolve_dtype
from mpiring.bench.measure import Point, PointMeasurer, SizeBuffers, TimingPolicy

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def space_for(name):
    if name == "bfloat16":
        if not HAVE_TORCH:
            pytest.skip("bfloat16 GPU buffers need torch")
        return TorchBf16Space()
    return CupySpace()


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_device_generation_matches_host(op):
    host = InputGenerator(np, op, np.dtype(np.float32), 4, seed=99)
    dev = InputGenerator(cp, op, np.dtype(np.float32), 4, seed=99)
    start = (1 << 32) - 1000  # across the 2**32 block boundary, in two pieces
    for s, e in ((0, 5000), (start, 1 << 32), (1 << 32, (1 << 32) + 777)):
        assert np.array_equal(host.values(2, s, e), cp.asnumpy(dev.values(2, s, e)))
        assert np.array_equal(host.expected(s, e), cp.asnumpy(dev.expected(s, e)))


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_device_space_poison_store_and_mismatch(name):
    dtype = resolve_dtype(name)
    space = space_for(name)
    want = cp.arange(-500, 500, dtype=cp.int32)
    buf = space.empty(1000, dtype)
    space.poison(buf)
    space.synchronize()
    bad = space.mismatches(buf, 0, want)
    assert bad is not None and bad.count == 1000 and bad.index == 0
    space.store(buf, 0, want)
    assert space.mismatches(buf, 0, want) is None
    other = space.empty(1000, dtype)
    space.copy(other, buf)
    buf[123] = 7777 if name != "bfloat16" else 77.0
    bad = space.mismatches(buf, 0, want)
    assert (bad.count, bad.index, bad.expected) == (1, 123, -377)
    assert space.mismatches(other, 0, want) is None
    assert space.free_bytes() > 0


def test_cuda_timer_measures_device_work():
    space = CupySpace()
    timer = space.timer()
    x = cp.ones(1 << 26, dtype=cp.float32)
    timer.start()
    for _ in range(20):
        x *= 1.0001
    t = timer.stop()
    assert 0 < t < 5


class DeviceFake:
    """A one-rank allreduce on the device that can go wrong."""

    def __init__(self, wrong: bool) -> None:
        self.wrong, self.check = wrong, True

    def stats(self) -> mpiring.CallStats:  # calls not counted: the bench's replayed share is None
        return mpiring.CallStats(0, 0, 0, False)

    def Allreduce(self, send, recv, op, *, algorithm=None, batches=None):  # noqa: N802
        if send is not MPI.IN_PLACE:
            cp.copyto(recv, send)
        if self.wrong:
            recv[-1] += 1


@pytest.mark.parametrize("wrong", [False, True])
@pytest.mark.parametrize("placement", ["out", "in"])
def test_measure_on_device(wrong, placement):
    space = CupySpace()
    count = (1 << 24) + 5  # two generation pieces
    gen = InputGenerator(cp, "sum", np.dtype(np.float16), 1, seed=4)
    bufs = SizeBuffers(space, gen, count, rank=0, cache=False)
    m = PointMeasurer(MPI.COMM_SELF, DeviceFake(wrong), space, TimingPolicy(budget_s=0.01),
                      check=True, time_agreement=False, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
    out = m.measure(Point(2 * count, count, "float16", "sum", "ring", "auto", placement), bufs)
    if wrong:
        assert out.status == "fail" and f"first at index {count - 1}" in out.note
    else:
        assert (out.status, out.check) == ("ok", "OK") and out.stats.median > 0


def test_host_and_device_agree_on_expected_in_dtype():
    host = HostSpace()
    gen = InputGenerator(np, "sum", np.dtype(np.float16), 8, seed=1)
    buf = host.empty(4096, np.float16)
    host.store(buf, 0, gen.expected(0, 4096))
    dev = InputGenerator(cp, "sum", np.dtype(np.float16), 8, seed=1)
    assert CupySpace().mismatches(cp.asarray(buf), 0, dev.expected(0, 4096)) is None


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather"])
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in"])
def test_block_collectives_check_on_device(name, collective, in_place):
    """reduce_scatter / allgather buffers on the device (CuPy, torch bfloat16) for 3 simulated
    ranks: a true result (computed from the device inputs) passes, one wrong element is counted
    on its rank only; the expected values are the host's."""
    from mpiring.bench.collectives import Expect
    from mpiring.bench.collectives import SizeBuffers as Blocks

    n, m = 3, (1 << 24) // 3 + 7  # blocks across the generation pieces
    total, dtype, space = n * m, resolve_dtype(name), space_for(name)
    gen = InputGenerator(cp, "sum", dtype, n, seed=6)
    bufs = [Blocks(space, gen, total, r, cache=False, collective=collective) for r in range(n)]
    for b in bufs:
        b.prepare_in_place() if in_place else space.poison(b.recv)
    space.synchronize()
    # inputs as the call sees them, in float64 on the device (exact for these integers)
    as64 = (lambda t: cp.asarray(t.float().cpu().numpy(), dtype=cp.float64)) if name == "bfloat16" \
        else (lambda a: a.astype(cp.float64))
    if in_place and collective == "allgather":
        inputs = [as64(b.recv[b.rank * m:(b.rank + 1) * m]) for b in bufs]
    else:
        inputs = [as64(b.recv if in_place else b.send) for b in bufs]
    for b in bufs:
        if collective == "reduce_scatter":
            result = sum(inputs)[b.rank * m:(b.rank + 1) * m]
        else:
            result = cp.concatenate(inputs)
        if b.rank == 1:
            result[-1] += 1
        space.store(b.recv_arg(in_place), 0, result.astype(cp.int32))
    space.synchronize()
    checks = [(b.check_output(), b.check_input()) for b in bufs]
    assert checks[0] == checks[2] == (None, None)
    assert checks[1][0] is not None and checks[1][0].count == 1 and checks[1][1] is None
    host = Expect(InputGenerator(np, "sum", dtype, n, seed=6), collective, total, 2)
    dev = Expect(gen, collective, total, 2)
    assert np.array_equal(host.want(m - 5, m + 5), cp.asnumpy(dev.want(m - 5, m + 5)))


@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("placement", ["out", "in"])
@pytest.mark.parametrize(("name", "op"), [("float32", "sum"), ("float16", "max"), ("float64", "prod"),
                                          ("int32", "min"), ("int64", "sum"), ("bfloat16", "max")])
def test_nccl_direct_on_one_gpu_checked_and_timed(name, op, placement, graph):
    """nccl-direct's runtime for real (CuPy's NCCL, one rank): its call on the bench's buffers
    is checked element by element and timed, eager and captured in a CUDA graph (--graph).
    Across ranks: mpirun -n 2 python -m mpiring.bench --gpu --algo nccl-direct,nccl,auto."""
    from mpiring.bench.rivals.base import RivalContext
    from mpiring.bench.rivals.direct_calls import NcclDirect

    rival = NcclDirect()
    why = rival.available()
    if why:
        pytest.skip(why)
    dtype, space, count = resolve_dtype(name), space_for(name), 4099
    rival.setup(MPI.COMM_SELF, RivalContext(max_count=count, dtype=dtype, op=op, rank=0, size=1,
                                            nodes=1, timeout=30.0))
    try:
        gen = InputGenerator(space.xp, op, dtype, 1, seed=7)
        bufs = SizeBuffers(space, gen, count, rank=0, cache=False)
        m = PointMeasurer(MPI.COMM_SELF, DeviceFake(False), space, TimingPolicy(budget_s=0.005, reps=2),
                          check=2, time_agreement=True, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE,
                          graph=graph)
        point = Point(count * dtype.itemsize, count, name, op, "nccl-direct", None, placement)
        out = m.measure(point, bufs, call=rival.prepare(bufs, placement == "in"))
        assert (out.status, out.check, out.wrong) == ("ok", "OK", 0), out.note
        assert out.stats.median > 0
    finally:
        rival.close()
