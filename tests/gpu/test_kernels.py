"""The kernels on one GPU, without MPI: fold and copy (``mpiring.cuda.fold_kernel``), one-shot and
two-shot (``mpiring.cuda.direct_kernels``) over a one-rank staging.

Every output is poisoned (0x7f bytes) before a launch and checked element by element after it,
with a guard of poison on either side that must survive. Fold results are compared bit for
bit with numpy (ml_dtypes for bfloat16): equal bits, or NaN where numpy has NaN (NaN payloads
may differ). Skipped without CuPy or a GPU (tests/gpu/conftest.py); needs no MPI.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

cupy = pytest.importorskip("cupy")  # tests/gpu/conftest.py skips too; this file also stands alone

from mpiring import cuda  # noqa: E402
from mpiring.core.ops import DTYPES, OPS, REDUCTIONS, Op, divide_by_ranks  # noqa: E402
from mpiring.cuda import contract, sources  # noqa: E402
from mpiring.cuda.direct_kernels import DirectKernels  # noqa: E402
from mpiring.cuda.fold_kernel import FoldKernel  # noqa: E402
from mpiring.cuda.layout import StagingLayout  # noqa: E402

if not cuda.available():
    pytest.skip("no CUDA GPU visible", allow_module_level=True)

pytestmark = pytest.mark.gpu

POISON = 0x7F
GUARD = 64  # bytes of poison before and after every output


@pytest.fixture(scope="module", autouse=True)
def device() -> int:
    """One device per process: under mpirun, each local rank takes its own (no MPI is used)."""
    local = next((os.environ[v] for v in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK")
                  if v in os.environ), "0")
    dev = int(local) % cupy.cuda.runtime.getDeviceCount()
    with cupy.cuda.Device(dev):
        yield dev


@pytest.fixture
def guard():
    """(abort word, status block): a healthy communicator's, in plain device memory."""
    return cupy.zeros(1, dtype=cupy.uint64), cupy.zeros(contract.WORDS, dtype=cupy.int64)


def _np_dtype(name: str) -> np.dtype:
    dt = DTYPES[name].numpy
    if dt is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    return dt


def _bits(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{dtype.itemsize}")


class Buffer:
    """Device bytes with poison around a window of ``count`` elements at ``offset`` elements
    past a 256-byte boundary (offset 1: not 16-byte aligned, so the kernels go element-wise)."""

    def __init__(self, count: int, dtype: np.dtype, offset: int = 0) -> None:
        self.count, self.dtype = count, dtype
        self.start = GUARD + offset * dtype.itemsize
        self.raw = cupy.full(self.start + count * dtype.itemsize + GUARD, POISON, dtype=cupy.uint8)

    @property
    def ptr(self) -> int:
        return self.raw.data.ptr + self.start

    def put(self, host: np.ndarray) -> None:
        self.raw[self.start:self.start + host.nbytes] = cupy.asarray(host.view(np.uint8))

    def get(self) -> np.ndarray:
        """The window's elements; asserts the guards around it are untouched."""
        raw = cupy.asnumpy(self.raw)
        end = self.start + self.count * self.dtype.itemsize
        assert (raw[:self.start] == POISON).all() and (raw[end:] == POISON).all(), "wrote out of bounds"
        return raw[self.start:end].view(self.dtype)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Equal bits at every element, except that NaN matches NaN (payloads may differ)."""
    assert got.shape == want.shape
    if want.dtype.kind == "f" or want.dtype.name == "bfloat16":
        nan_want = np.isnan(want.astype(np.float32))
        nan_got = np.isnan(got.astype(np.float32))
        assert (nan_got == nan_want).all(), f"NaN at {np.flatnonzero(nan_got != nan_want)[:10]}"
    else:
        nan_want = np.zeros(want.shape, dtype=bool)
    diff = (got.view(_bits(got.dtype)) != want.view(_bits(want.dtype))) & ~nan_want
    bad = np.flatnonzero(diff)
    assert bad.size == 0, f"{bad.size} elements differ, first at {bad[:5]}: {got[bad[:5]]} != {want[bad[:5]]}"


def random_values(rng: np.random.Generator, count: int, dtype: np.dtype, nan: bool) -> np.ndarray:
    """Values that exercise rounding (floats: no exact zeros or ties), NaN in some if ``nan``."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
    values = rng.standard_normal(count) * rng.choice([1e-3, 1.0, 300.0], count)
    out = values.astype(np.float32).astype(dtype)
    if nan and count:
        out[rng.integers(0, count, max(1, count // 7))] = np.nan
    return out


COUNTS = [1, 7, 33, 1001, 100_003]
OFFSETS = [(0, 0, 0), (1, 1, 1), (0, 1, 0), (1, 0, 1)]  # (out, in, slot), in elements


@pytest.mark.parametrize("offsets", OFFSETS, ids=lambda o: "offsets-{}{}{}".format(*o))
@pytest.mark.parametrize("op", REDUCTIONS, ids=lambda op: op.name.lower())
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_fold_matches_numpy_bit_for_bit(device: int, guard, dtype_name: str, op: Op,
                                        offsets: tuple[int, int, int]) -> None:
    """out = in (op) slot for odd counts, on aligned and misaligned pointers, with grids both
    large and too small for one pass (the grid-stride loop), equals numpy's result."""
    dtype = _np_dtype(dtype_name)
    rng = np.random.default_rng([DTYPES[dtype_name].code, int(op), *offsets])
    abort, status = guard
    for max_blocks in (None, 2):
        kernel = FoldKernel(device, abort.data.ptr, status.data.ptr, max_blocks=max_blocks)
        fn = kernel.function(dtype, op)
        for count in COUNTS:
            a = random_values(rng, count, dtype, nan=True)
            b = random_values(rng, count, dtype, nan=True)
            out, inp, slot = (Buffer(count, dtype, k) for k in offsets)
            inp.put(a)
            slot.put(b)
            kernel.launch(fn, out.ptr, inp.ptr, slot.ptr, count, dtype.itemsize, cupy.cuda.Stream.null)
            with np.errstate(all="ignore"):
                want = OPS[op].ufunc(a, b)
            assert_same(out.get(), want.astype(dtype))
            assert_same(inp.get(), a)  # inputs untouched
    assert not cupy.asnumpy(status).any(), "a healthy launch reported"


def test_fold_of_nothing_launches_nothing(device: int, guard) -> None:
    abort, status = guard
    kernel = FoldKernel(device, abort.data.ptr, status.data.ptr)
    out = Buffer(0, np.dtype(np.float32))
    kernel.launch(kernel.function(np.float32, Op.SUM), out.ptr, 0, 0, 0, 4, cupy.cuda.Stream.null)
    kernel.copy(out.ptr, 0, 0, cupy.cuda.Stream.null)
    out.get()


@pytest.mark.parametrize("ranks", [1, 2, 3, 7])
@pytest.mark.parametrize("dtype_name", sources.averaged_dtypes())
def test_average_matches_the_host_rule_bit_for_bit(device: int, guard, dtype_name: str, ranks: int) -> None:
    """out /= ranks (op avg) equals mpiring.core.ops.divide_by_ranks, the host's rule, on odd counts,
    an odd offset and a grid too small for one pass; the poison guards around it survive."""
    dtype = _np_dtype(dtype_name)
    rng = np.random.default_rng([DTYPES[dtype_name].code, ranks])
    abort, status = guard
    kernel = FoldKernel(device, abort.data.ptr, status.data.ptr, max_blocks=2)
    for count in COUNTS:
        a = random_values(rng, count, dtype, nan=True)
        out = Buffer(count, dtype, 1)
        out.put(a)
        kernel.average(out.ptr, count, dtype, ranks, cupy.cuda.Stream.null)
        want = a.copy()
        divide_by_ranks(want, ranks)
        assert_same(out.get(), want)
    assert not cupy.asnumpy(status).any(), "a healthy launch reported"


@pytest.mark.parametrize("unit", [16, 8, 4, 2, 1])
def test_copy_uses_each_unit(device: int, guard, unit: int) -> None:
    """copy picks the widest unit that out, src and nbytes allow, and copies every byte."""
    abort, status = guard
    kernel = FoldKernel(device, abort.data.ptr, status.data.ptr, max_blocks=3)
    u8 = np.dtype(np.uint8)
    for units in (1, 3, 999, 40_001):
        nbytes = unit * units if unit == 16 else unit * (2 * units + 1)  # not a multiple of 2 * unit
        skew = 0 if unit == 16 else unit  # pointers a multiple of unit but not of 2 * unit
        src, out = Buffer(nbytes, u8, skew), Buffer(nbytes, u8, skew)
        data = np.random.default_rng(units).integers(0, 256, nbytes, dtype=np.uint8)
        src.put(data)
        kernel.copy(out.ptr, src.ptr, nbytes, cupy.cuda.Stream.null)
        assert_same(out.get(), data)
    assert set(kernel._copies) == {unit}, "copy chose another unit"
    assert not cupy.asnumpy(status).any()


def test_fold_and_copy_write_nothing_once_aborted(device: int, guard) -> None:
    """With the abort word set (1 + the aborting rank), neither kernel writes its output, and the
    abort is reported into the status block as seen by the ring."""
    abort, status = guard
    abort.fill(1 + 5)
    kernel = FoldKernel(device, abort.data.ptr, status.data.ptr)
    dtype = np.dtype(np.float32)
    count = 10_000
    out, inp, slot = Buffer(count, dtype), Buffer(count, dtype), Buffer(count, dtype)
    inp.put(np.ones(count, dtype))
    slot.put(np.ones(count, dtype))
    kernel.launch(kernel.function(dtype, Op.SUM), out.ptr, inp.ptr, slot.ptr, count, 4, cupy.cuda.Stream.null)
    kernel.copy(out.ptr, inp.ptr, count * 4, cupy.cuda.Stream.null)
    assert (out.get().view(np.uint8) == POISON).all()
    words = cupy.asnumpy(status)
    assert words[contract.STATE] == contract.ABORTED
    assert words[contract.KIND] == contract.KIND_RING
    assert words[contract.PEER] == 5


# -- one-shot and two-shot over a staging of one rank ----------------------------------------------

class OneRankStaging:
    """The staging interface DirectKernels needs (rank, size, addr) over one zeroed allocation."""

    rank, size = 0, 1

    def __init__(self, layout: StagingLayout) -> None:
        rt = cupy.cuda.runtime
        self.ptr = rt.malloc(layout.alloc_bytes)
        rt.memset(self.ptr, 0, layout.alloc_bytes)
        rt.deviceSynchronize()

    def addr(self, rank: int, offset: int) -> int:
        assert rank == 0
        return self.ptr + offset

    def close(self) -> None:
        cupy.cuda.runtime.free(self.ptr)


# 4 blocks: two-shot's chunk holds a 16-byte word per thread of the grid for each of 2 ranks.
LAYOUT = StagingLayout(slot_bytes=64 << 10, oneshot_bytes=64 << 10, twoshot_bytes=64 << 10, blocks=4)
NO_DESC = (0, 0)  # a call's descriptor: one rank has no peer to compare it with


@pytest.fixture
def direct(guard):
    staging = OneRankStaging(LAYOUT)
    _, status = guard
    try:
        yield DirectKernels(staging, LAYOUT, status.data.ptr, timeout=30.0), status
    finally:
        cupy.cuda.runtime.deviceSynchronize()
        staging.close()


@pytest.mark.parametrize("offset", [0, 1], ids=["aligned", "misaligned"])
@pytest.mark.parametrize("op", REDUCTIONS, ids=lambda op: op.name.lower())
@pytest.mark.parametrize("dtype_name", list(DTYPES))
def test_direct_kernels_of_one_rank_copy_input(direct, dtype_name: str, op: Op, offset: int) -> None:
    """With one rank, oneshot and twoshot give out == in bit for bit, for odd counts up to the
    one-shot limit and, for two-shot, past one chunk (several chunks, a ragged last one).
    Launches alternate kinds, so the per-block barrier counters carry across calls."""
    kernels, status = direct
    dtype = _np_dtype(dtype_name)
    rng = np.random.default_rng([DTYPES[dtype_name].code, int(op), offset])
    chunk = LAYOUT.twoshot_bytes // dtype.itemsize
    oneshot_max = kernels.oneshot_limit // dtype.itemsize
    plan = [("oneshot", n) for n in (1, 7, oneshot_max - 1, oneshot_max)]
    plan += [("twoshot", n) for n in (1, 333, chunk, chunk + 1, 3 * chunk + 17)]
    for kind, count in plan * 2:
        data = random_values(rng, count, dtype, nan=False)
        src, out = Buffer(count, dtype, offset), Buffer(count, dtype, offset)
        src.put(data)
        kernels.launch(kind, src.ptr, out.ptr, count, dtype, op, NO_DESC, cupy.cuda.Stream.null)
        assert_same(out.get(), data)
    assert not cupy.asnumpy(status).any(), "a healthy launch reported"


def test_direct_kernels_in_place(direct) -> None:
    """src == out (in place) works for both kinds."""
    kernels, _ = direct
    dtype = np.dtype(np.float32)
    for kind, count in (("oneshot", 1000), ("twoshot", 5 * LAYOUT.twoshot_bytes // 4 + 3)):
        data = random_values(np.random.default_rng(count), count, dtype, nan=False)
        buf = Buffer(count, dtype)
        buf.put(data)
        kernels.launch(kind, buf.ptr, buf.ptr, count, dtype, Op.SUM, NO_DESC, cupy.cuda.Stream.null)
        assert_same(buf.get(), data)


class AbsentPeerStaging(OneRankStaging):
    """Two ranks, of which only rank 0 runs: rank 1's regions are a second allocation that no
    kernel serves, so every barrier waits for rank 1 in vain."""

    rank, size = 0, 2

    def __init__(self, layout: StagingLayout) -> None:
        self.ptrs = []
        for _ in range(self.size):
            super().__init__(layout)
            self.ptrs.append(self.ptr)

    def addr(self, rank: int, offset: int) -> int:
        return self.ptrs[rank] + offset

    def close(self) -> None:
        for ptr in self.ptrs:
            cupy.cuda.runtime.free(ptr)


@pytest.mark.parametrize(("kind", "code"),
                         [("oneshot", contract.KIND_ONESHOT), ("twoshot", contract.KIND_TWOSHOT)])
def test_a_barrier_times_out_on_an_absent_peer(device: int, guard, kind: str, code: int) -> None:
    """A peer that never comes: past the timeout the kernel reports TIMED_OUT (waiting for
    rank 1, at the agreement check before the first barrier), aborts every rank's abort word
    with 1 + its rank, and writes no output."""
    staging = AbsentPeerStaging(LAYOUT)
    _, status = guard
    try:
        kernels = DirectKernels(staging, LAYOUT, status.data.ptr, timeout=0.2)
        dtype = np.dtype(np.float32)
        count = 1000
        src, out = Buffer(count, dtype), Buffer(count, dtype)
        src.put(np.ones(count, dtype))
        kernels.launch(kind, src.ptr, out.ptr, count, dtype, Op.SUM, NO_DESC, cupy.cuda.Stream.null)
        assert (out.get().view(np.uint8) == POISON).all(), "wrote output after a timeout"
        words = cupy.asnumpy(status)
        assert words[contract.STATE] == contract.TIMED_OUT, words
        # The first wait is the agreement check's, for rank 1's descriptor of call 1 (step -1).
        assert (words[contract.KIND], words[contract.PEER], words[contract.SEQ], words[contract.STEP]) == (
            code, 1, 1, -1)
        assert 0 <= words[contract.BLOCK] < LAYOUT.blocks
        aborts = np.zeros(2, dtype=np.uint64)
        for r in range(2):
            cupy.cuda.runtime.memcpy(aborts[r:].ctypes.data, staging.addr(r, LAYOUT.abort), 8,
                                     cupy.cuda.runtime.memcpyDeviceToHost)
        assert aborts.tolist() == [1, 1]
    finally:
        cupy.cuda.runtime.deviceSynchronize()
        staging.close()
