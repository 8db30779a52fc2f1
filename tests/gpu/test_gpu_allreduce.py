"""GPU allreduce through every algorithm: correctness matrix, sizes to 1 GiB, mini-batch counts,
races under back-to-back calls and stragglers, stream ordering, lifetimes and bad memory."""

from __future__ import annotations

import random
import time

import cupy
import numpy as np
import pytest
from gpu_helpers import (
    WORLD,
    agree,
    fit,
    free_device_bytes,
    identical_on_all_ranks,
    mismatches,
    poison,
    rank_input,
    reference,
    runnable,
    span_for,
)
from matrix import GPU_ALGORITHMS as ALGOS  # noqa: E402 - every GPU row of the table, and auto
from matrix import GPU_DTYPES as DTYPES  # noqa: E402
from matrix import OPS  # noqa: E402
from mpi4py import MPI

import mpiring

RANK = WORLD.rank


@pytest.fixture(scope="module")
def comm():
    c = mpiring.Communicator(WORLD, gpu=True)
    yield c
    c.close()


@pytest.fixture(scope="module")
def small_slots():
    """Slots of 64 KiB: a few MiB already run through dozens of mini-batches and slot reuses."""
    c = mpiring.Communicator(WORLD, gpu=True, slot_bytes=64 << 10)
    yield c
    c.close()


def run_case(c, algo, op, count, dtype, placement, salt, batches=None) -> str | None:
    """One allreduce of exact-sum inputs, checked element by element; a message if wrong."""
    count = fit(algo, count, dtype)
    x = rank_input(RANK, count, dtype, salt, span_for(op))
    expect = reference(op, WORLD.size, count, salt)
    if placement == "out":
        out = cupy.empty_like(x)
        poison(out)
        c.Allreduce(x, out, op, algorithm=algo, batches=batches)
    elif placement == "in":
        out = x
        c.Allreduce(MPI.IN_PLACE, out, op, algorithm=algo, batches=batches)
    else:  # the same array passed twice
        out = x
        c.Allreduce(x, x, op, algorithm=algo, batches=batches)
    wrong = mismatches(out, expect)
    if wrong:
        return f"{algo} {op.name} {dtype} n={count} {placement} b={batches}: {wrong} wrong elements"
    return None


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("placement", ["out", "in", "same"])
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("algo", ALGOS)
def test_matrix(comm, algo, dtype, op, placement):
    n = WORLD.size
    errors = [run_case(comm, algo, op, count, dtype, placement, salt=count)
              for count in (0, 1, n - 1, 7919, (1 << 20) + 3)]
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("algo", ALGOS)
def test_sizes_up_to_one_gib(comm, algo):
    errors = [run_case(comm, algo, mpiring.Op.SUM, count, "float32", "out", salt=3)
              for count in (1, 1023, 1 << 18, (1 << 24) + 5, 1 << 28)]
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("batches", range(1, 9))
@pytest.mark.parametrize("algo", ["ring", "ring-events", "nccl-ring"])
def test_every_batch_count(comm, small_slots, algo, batches):
    n = WORLD.size
    errors = []
    for c in (comm, small_slots):
        for count in (n * batches - 1, 100003, 3 << 20):
            for placement in ("out", "in"):
                errors.append(run_case(c, algo, mpiring.Op.SUM, count, "float32", placement,
                                       salt=batches, batches=batches))
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
def test_random_floats_identical_on_every_rank(comm):
    """Rounded float sums: close to float64 and bitwise identical on all ranks, every algorithm."""
    rng = cupy.random.default_rng(100 + RANK)
    x = rng.standard_normal(5_000_011, dtype=cupy.float32)
    everyone = WORLD.allgather(cupy.asnumpy(x))
    exact = np.sum(np.stack(everyone).astype(np.float64), axis=0)
    errors = []
    bound = mpiring.core.ops.tolerance(np.float32, WORLD.size) * np.sum(np.abs(np.stack(everyone)), axis=0)
    for algo in runnable(ALGOS):
        n = fit(algo, x.size, x.dtype)
        out = cupy.full_like(x[:n], np.nan)
        comm.Allreduce(x[:n], out, algorithm=algo)
        got = cupy.asnumpy(out).astype(np.float64)
        bad = int(np.count_nonzero(~(np.abs(got - exact[:n]) <= bound[:n])))
        if bad:
            errors.append(f"{algo}: {bad} elements outside the float32 bound")
        if not identical_on_all_ranks(out):
            errors.append(f"{algo}: results differ between ranks")
    agree(not errors, "; ".join(errors))


@pytest.mark.mpi(min_size=2)
def test_thousand_back_to_back_calls():
    """1000 calls on changing data: random sizes, algorithms, batches and caller streams (so
    one-shot, two-shot and ring calls follow each other on different streams), checked in
    groups of 16 without synchronizing in between."""
    rng = np.random.default_rng(2024)  # same stream of choices on every rank
    errors = []
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(3)]
    with mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20) as c:
        pending = []
        for call in range(1000):
            roll = call % 10
            count = int(rng.integers(0, 64)) if roll == 0 else int(
                rng.integers(0, 1 << 18) if roll < 5 else rng.integers(0, 3 << 20))
            algo = str(rng.choice(runnable(["ring", "ring", "ring-events", "oneshot", "twoshot",
                                            "twoshot", "auto", "nccl", "nccl-ring"])))
            count = fit(algo, count, np.float32)
            batches = None if rng.random() < 0.3 else int(rng.integers(1, 9))
            stream = streams[int(rng.integers(0, len(streams)))]
            with stream:
                x = rank_input(RANK, count, cupy.float32, salt=call)
                out = cupy.empty_like(x)
                poison(out)
                c.Allreduce(x, out, algorithm=algo, batches=batches)
                if rng.random() < 0.2:  # in place too, on the array just reduced
                    c.Allreduce(MPI.IN_PLACE, out, algorithm=algo, batches=batches)
                    out = out / WORLD.size if count else out
            pending.append((stream, out, call, count, algo, batches))
            if len(pending) == 16 or call == 999:
                for stream, out, salt, n, a, b in pending:
                    stream.synchronize()
                    wrong = mismatches(out, reference(mpiring.Op.SUM, WORLD.size, n, salt))
                    if wrong:
                        errors.append(f"call {salt} ({a}, n={n}, b={b}): {wrong} wrong")
                pending.clear()
    agree(not errors, "; ".join(errors[:10]))


_SPIN = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) { }
}""", "spin")


def gpu_delay(stream, microseconds: float) -> None:
    """Keep ``stream`` busy for about ``microseconds`` (2 GHz clock)."""
    _SPIN((1,), (1,), (np.int64(microseconds * 2000),), stream=stream)


@pytest.mark.mpi(min_size=2)
def test_straggler_at_random_steps(monkeypatch):
    """One rank is delayed on the host and on its GPU streams at random steps: still exact."""
    errors = []
    with mpiring.Communicator(WORLD, gpu=True, slot_bytes=256 << 10) as c:
        link = c.ring_pipeline(gpu=True).transport
        if RANK == WORLD.size - 1:
            chance = random.Random(7)
            for name in ("send", "fold", "wait_slot_full", "wait_slot_free"):
                original = getattr(link, name)

                def delayed(*args, _original=original, **kwargs):
                    roll = chance.random()
                    if roll < 0.1:
                        time.sleep(chance.uniform(0, 0.002))
                    elif roll < 0.2:
                        gpu_delay(link.copy_stream, chance.uniform(0, 300))
                    elif roll < 0.3:
                        gpu_delay(link.fold_stream, chance.uniform(0, 300))
                    return _original(*args, **kwargs)

                monkeypatch.setattr(link, name, delayed)
        rng = np.random.default_rng(5)
        for call in range(200):
            count = int(rng.integers(1, 1 << 20))
            errors.append(run_case(c, "ring", mpiring.Op.SUM, count, "float32", "out", salt=call,
                                   batches=int(rng.integers(1, 9))))
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("algo", ["oneshot", "twoshot"])
def test_direct_kernels_with_a_straggler(algo):
    """One rank launches late (its stream is held up on the GPU) at random calls: peers wait
    at the flag barrier, and every result is still exact."""
    chance = random.Random(11)
    errors = []
    with mpiring.Communicator(WORLD, gpu=True) as c:
        stream = cupy.cuda.get_current_stream()
        for call in range(300):
            late, delay = chance.random() < 0.3, chance.uniform(0, 200)  # drawn on every rank alike
            if RANK == WORLD.size - 1 and late:
                gpu_delay(stream, delay)
            count = fit(algo, chance.choice([1, 33, 4097, 262_147, 3_000_001]), np.float32)
            errors.append(run_case(c, algo, mpiring.Op.SUM, count, "float32", "out", salt=call))
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("algo", ALGOS)
def test_unaligned_views(comm, algo):
    """Views that start off a 16-byte boundary take the scalar path of every kernel and touch
    nothing outside the view, also when only some ranks' views are aligned."""
    errors = []
    for count, offset in ((1001, 1), (70_001, 3), (2_000_003, 1), (70_001, RANK % 2), (3001, RANK % 4)):
        count = fit(algo, count, np.float32)
        base = cupy.empty(count + offset + 1, dtype=cupy.float32)
        x = base[offset:offset + count]
        x[...] = rank_input(RANK, count, cupy.float32, salt=count)
        out_base = cupy.full(count + 2, 12345.0, dtype=cupy.float32)
        out = out_base[1:1 + count]
        comm.Allreduce(x, out, algorithm=algo)
        wrong = mismatches(out, reference(mpiring.Op.SUM, WORLD.size, count, salt=count))
        if wrong or float(out_base[0]) != 12345.0 or float(out_base[-1]) != 12345.0:
            errors.append(f"{algo} n={count} offset={offset}: {wrong} wrong or neighbours touched")
    agree(not errors, "; ".join(errors))


@pytest.mark.mpi(min_size=2)
def test_oneshot_limit_is_enforced_on_every_rank(comm):
    """One-shot takes messages up to its limit and refuses larger ones with a clear error."""
    limit = comm.max_bytes("oneshot") // 4
    assert run_case(comm, "oneshot", mpiring.Op.SUM, limit, "float32", "out", salt=2) is None
    with pytest.raises(mpiring.InvalidArgumentError, match="oneshot"):
        x = cupy.ones(limit + 1, dtype=cupy.float32)
        comm.Allreduce(MPI.IN_PLACE, x, algorithm="oneshot")
    assert comm.resolve(limit + 1, np.float32, "auto") != "oneshot"


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("algo", ["oneshot", "twoshot", "auto", "nccl"])
def test_cuda_graph_replays_see_new_data(comm, algo):
    """Two calls captured in one CUDA graph, replayed 50 times on changing inputs: the
    direct kernels keep their sequence numbers on the GPU, so every replay is exact."""
    count = fit(algo, 300_007, np.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    errors = []
    with stream:
        x = cupy.zeros(count, dtype=cupy.float32)
        out = cupy.empty_like(x)
        comm.Allreduce(x, out, algorithm=algo)  # first call on this stream happens outside capture
        stream.begin_capture()
        comm.Allreduce(x, out, algorithm=algo)
        comm.Allreduce(MPI.IN_PLACE, out, algorithm=algo)
        graph = stream.end_capture()
        for replay in range(50):
            x[...] = rank_input(RANK, count, cupy.float32, salt=replay)
            poison(out)
            graph.launch(stream)
            wrong = mismatches(out / WORLD.size, reference(mpiring.Op.SUM, WORLD.size, count, replay))
            if wrong:
                errors.append(f"replay {replay}: {wrong} wrong")
    agree(not errors, "; ".join(errors[:5]))


@pytest.mark.mpi(min_size=2)
def test_ring_refuses_graph_capture_on_every_rank(comm):
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x = cupy.ones(1 << 20, dtype=cupy.float32)
        comm.Allreduce(MPI.IN_PLACE, x, algorithm="twoshot")
        stream.begin_capture()
        try:
            with pytest.raises(mpiring.InvalidArgumentError, match="captured"):
                comm.Allreduce(MPI.IN_PLACE, x, algorithm="ring")
            assert comm.resolve(1 << 30, np.float32, "auto") != "ring"
        finally:
            stream.end_capture()
    agree(run_case(comm, "ring", mpiring.Op.SUM, 5000, "float32", "out", salt=1) is None,
          "communicator broken after a refused capture")


@pytest.mark.mpi(min_size=2)
def test_callers_stream_is_honoured(comm):
    """Inputs written late on a side stream are seen; later work on that stream sees the result."""
    side = cupy.cuda.Stream(non_blocking=True)
    errors = []
    for algo in runnable(ALGOS):
        count = fit(algo, 1 << 22, np.float32)
        expect = reference(mpiring.Op.SUM, WORLD.size, count, salt=9)
        with side:
            x = cupy.empty(count, dtype=cupy.float32)
            poison(x)
            gpu_delay(side, 20_000)  # 20 ms: any work not ordered after it reads the poison
            x[...] = rank_input(RANK, count, cupy.float32, salt=9)
            out = cupy.empty_like(x)
            comm.Allreduce(x, out, algorithm=algo)
            result = out * 1  # queued after the allreduce on the same stream
            wrong = mismatches(result, expect)
        if wrong:
            errors.append(f"{algo}: {wrong} wrong elements")
    agree(not errors, "; ".join(errors))


@pytest.mark.mpi(min_size=2)
def test_two_communicators_at_once(comm):
    errors = []
    with mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20) as other:
        for call in range(60):
            c = comm if call % 2 else other
            algo = ("ring", "oneshot", "twoshot")[call % 3]
            errors.append(run_case(c, algo, mpiring.Op.SUM, 200_007 + call, "float32", "out",
                                   salt=call))
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
def test_create_close_cycles_do_not_grow_memory():
    """50 create/close cycles after a short warm-up (kernels, driver pools): zero growth."""
    free_bytes = free_device_bytes
    errors = []
    series = []
    for cycle in range(53):
        if cycle == 3:
            before = free_bytes()
        with mpiring.Communicator(WORLD, gpu=True) as c:
            errors.append(run_case(c, "ring", mpiring.Op.SUM, 4099, "float32", "out", salt=cycle))
        series.append(free_bytes())
    growth = before - series[-1]
    if growth > 0:
        steps = [before - f for f in series[3:]]
        errors.append(f"device memory grew by {growth} bytes over 50 cycles (per cycle: {steps})")
    agree(not any(errors), "; ".join(e for e in errors if e))
    with pytest.raises(mpiring.CommunicatorClosedError):
        c.Allreduce(cupy.ones(4, dtype=cupy.float32), cupy.empty(4, dtype=cupy.float32))


@pytest.mark.mpi(min_size=2)
def test_torch_tensors_including_bfloat16(comm):
    torch = pytest.importorskip("torch")
    if mpiring.core.ops.bfloat16_dtype() is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    device = torch.device("cuda", comm.device)
    errors = []
    count = 100_003
    expect = reference(mpiring.Op.SUM, WORLD.size, count, salt=4)
    for tdtype in (torch.float32, torch.bfloat16, torch.int64):
        x = torch.as_tensor(cupy.asnumpy(rank_input(RANK, count, cupy.float64, salt=4)),
                            device=device).to(tdtype)
        for algo in runnable(ALGOS):
            n = fit(algo, count, np.float64)  # the widest of the three dtypes
            out = torch.full_like(x[:n], -1)
            comm.Allreduce(x[:n], out, algorithm=algo)
            got = cupy.asarray(out.to(torch.float64))
            wrong = mismatches(got, expect[:n])
            if wrong:
                errors.append(f"{algo} {tdtype}: {wrong} wrong")
        y = comm.allreduce(x)
        if not isinstance(y, torch.Tensor) or mismatches(cupy.asarray(y.to(torch.float64)), expect):
            errors.append(f"allreduce() on {tdtype} returned a wrong result")
    agree(not errors, "; ".join(errors))


class _Foreign:
    """An array known only by its __cuda_array_interface__."""

    def __init__(self, ptr: int, count: int) -> None:
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": "<f4", "data": (ptr, False),
                                         "version": 3, "strides": None}


class _DLPackOnly:
    """An array known only by the DLPack protocol."""

    def __init__(self, array) -> None:
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


@pytest.mark.mpi(min_size=2)
def test_dlpack_and_cuda_array_interface_producers(comm):
    count = 77_777
    expect = reference(mpiring.Op.SUM, WORLD.size, count, salt=6)
    errors = []
    for algo in runnable(ALGOS):
        n = fit(algo, count, np.float32)
        x = rank_input(RANK, count, cupy.float32, salt=6)[:n]
        out = cupy.empty_like(x)
        poison(out)
        comm.Allreduce(_DLPackOnly(x), _Foreign(out.data.ptr, n), algorithm=algo)
        wrong = mismatches(out, expect[:n])
        if wrong:
            errors.append(f"{algo}: {wrong} wrong elements")
    agree(not errors, "; ".join(errors))


@pytest.mark.mpi(min_size=2)
def test_unsupported_memory_is_refused_on_every_rank(comm):
    count = 1024
    managed = cupy.cuda.ManagedMemory(count * 4)
    arr = cupy.ndarray(count, cupy.float32, cupy.cuda.MemoryPointer(managed, 0))
    with pytest.raises(mpiring.InvalidArgumentError, match="managed"):
        comm.Allreduce(MPI.IN_PLACE, arr)
    pinned = cupy.cuda.alloc_pinned_memory(count * 4)
    with pytest.raises(mpiring.InvalidArgumentError, match="host memory"):
        comm.Allreduce(MPI.IN_PLACE, _Foreign(pinned.ptr, count))
    # Only one rank passes bad memory: every rank raises, none hangs (a rank whose call its
    # kernel checks on the GPU, the default, raises at the call or at synchronize()).
    good = cupy.ones(count, dtype=cupy.float32)
    bad = arr if RANK == 0 else good
    with pytest.raises(mpiring.InvalidArgumentError if RANK == 0 else mpiring.PeerArgumentError):
        comm.Allreduce(MPI.IN_PLACE, bad)
        comm.synchronize()
    if cupy.cuda.runtime.getDeviceCount() > 1:
        other = (comm.device + 1) % cupy.cuda.runtime.getDeviceCount()
        with cupy.cuda.Device(other):
            elsewhere = cupy.ones(count, dtype=cupy.float32)
        with pytest.raises(mpiring.InvalidArgumentError, match="lives on GPU"):
            comm.Allreduce(MPI.IN_PLACE, elsewhere)
    # The communicator still works afterwards.
    agree(run_case(comm, "ring", mpiring.Op.SUM, 5000, "float32", "out", salt=1) is None,
          "communicator broken after rejected arguments")
