"""``reproducible=True`` on GPUs (2+ ranks, one GPU each): every element of every allowed row's
result (auto, oneshot, twoshot, oneshot-ll) bit-equal to the rank-ordered reference, for random
normal float32, float16, bfloat16 (torch) and float64 data, at sizes that cross every algorithm
boundary (oneshot-ll's and oneshot's limits, twoshot's 32 MiB chunk) from 1 element to 1 GiB, in
and out of place, eager and replayed from a CUDA graph; the other rows refused by name.

The reference is computed on the GPU in the same order and types as
:func:`mpiring.core.reproducible.reference` (checked against that numpy function on the smaller sizes).
"""

from __future__ import annotations

import cupy
import numpy as np
import pytest
from gpu_helpers import LIMITS, WORLD, agree
from mpi4py import MPI

import mpiring
from mpiring.core.ops import Op
from mpiring.core.reproducible import reference

try:
    import torch
except ImportError:  # bfloat16 needs torch (CuPy has no bfloat16)
    torch = None

RANK, SIZE = WORLD.rank, WORLD.size
pytestmark = pytest.mark.mpi(min_size=2)
DTYPES = ["float32", "float16", "float64"] + (["bfloat16"] if torch is not None else [])
ROWS = ["auto", "oneshot", "twoshot", "oneshot-ll"]
CHUNK = 32 << 20  # twoshot's staging chunk (mpiring/cuda/layout.py): larger calls take several


def sizes_in_bytes() -> list[int]:
    """Both sides of every boundary, odd sizes, and random sizes up to 1 GiB (the same on every rank)."""
    edges = [LIMITS["oneshot-ll"], LIMITS["oneshot"], CHUNK, 3 * CHUNK]
    around = [e + d for e in edges for d in (-8, 8, 4 * 1001)]
    rng = np.random.default_rng(20261126)
    drawn = np.exp(rng.uniform(np.log(16), np.log(1 << 30), 6)).astype(np.int64).tolist()
    return sorted({8, 24, 4 * 1001, *around, *drawn, (1 << 30) - 8})


def inputs(dtype: str, count: int, seed: int) -> list:
    """Every rank's input (each rank makes them all, alike): random normal values."""
    out = []
    for r in range(SIZE):
        values = cupy.random.default_rng(seed * 64 + r).standard_normal(count, dtype=cupy.float32) * 10
        if dtype == "bfloat16":
            out.append(torch.from_dlpack(values).to(torch.bfloat16))
        else:
            out.append(values.astype(dtype))
    return out


def as_cupy(x) -> cupy.ndarray:
    """A CuPy array of the values (bfloat16 tensors: their bits, as uint16)."""
    if torch is not None and isinstance(x, torch.Tensor):
        return cupy.from_dlpack(x.contiguous().view(torch.int16)).view(cupy.uint16)
    return x


def raw_bits(x) -> cupy.ndarray:
    """The bits of every element, as unsigned integers: -0.0 and 0.0 differ, NaN equals itself."""
    a = as_cupy(x)
    return a.view({2: cupy.uint16, 4: cupy.uint32, 8: cupy.uint64}[a.dtype.itemsize])


def gpu_reference(xs: list, op: Op) -> object:
    """:func:`mpiring.core.reproducible.reference` on the GPU: rank order, float32 for 2-byte floats."""
    bf16 = torch is not None and isinstance(xs[0], torch.Tensor)
    widen = (lambda x: cupy.from_dlpack(x.float())) if bf16 else (
        lambda x: x.astype(cupy.float32 if x.dtype == cupy.float16 else x.dtype))
    fold = {Op.SUM: cupy.add, Op.AVG: cupy.add, Op.MAX: cupy.maximum, Op.MIN: cupy.minimum,
            Op.PROD: cupy.multiply}[op]
    acc = widen(xs[0])
    for x in xs[1:]:
        acc = fold(acc, widen(x))
    if bf16:
        result = torch.from_dlpack(acc).to(torch.bfloat16)
        if op is Op.AVG:
            result = (result.float() / np.float32(SIZE)).to(torch.bfloat16)
        return result
    result = acc.astype(xs[0].dtype)
    if op is Op.AVG:
        result = (result.astype(acc.dtype) / acc.dtype.type(SIZE)).astype(xs[0].dtype)
    return result


def host(x) -> np.ndarray:
    raw = cupy.asnumpy(as_cupy(x))
    if raw.dtype == np.uint16 and torch is not None and isinstance(x, torch.Tensor):
        import ml_dtypes

        return raw.view(ml_dtypes.bfloat16)
    return raw


def fits(row: str, nbytes: int) -> bool:
    return nbytes <= LIMITS.get(row, nbytes)


@pytest.fixture(scope="module")
def comm():
    with mpiring.Communicator(WORLD, gpu=True, reproducible=True) as c:
        yield c


def empty_like(x):
    if torch is not None and isinstance(x, torch.Tensor):
        return torch.full_like(x, float("nan"))
    out = cupy.empty_like(x)
    out.fill(np.nan)
    return out


def differs(out, want) -> int:
    return int(cupy.count_nonzero(raw_bits(out) != raw_bits(want)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_allowed_row_gives_the_references_bits(comm, dtype: str) -> None:
    problems: list[str] = []
    itemsize = 8 if dtype == "float64" else 2 if dtype in ("float16", "bfloat16") else 4
    for k, nbytes in enumerate(sizes_in_bytes()):
        count = max(1, nbytes // itemsize)
        if dtype != "float32" and count * itemsize > 256 << 20:
            continue  # 1 GiB runs in float32; the other types up to 256 MiB
        xs = inputs(dtype, count, seed=k)
        op = (Op.SUM, Op.AVG, Op.MAX)[k % 3]
        want = gpu_reference(xs, op)
        if count <= 1 << 16:  # the GPU reference is the library's numpy reference, bit for bit
            assert host(want).tobytes() == reference([host(x) for x in xs], op).tobytes()
        mine = xs[RANK]
        for row in ROWS:
            if not fits(row, count * itemsize):
                continue
            out = empty_like(mine)
            comm.Allreduce(mine, out, op=op, algorithm=row)
            inplace = mine.clone() if dtype == "bfloat16" else mine.copy()
            comm.Allreduce(MPI.IN_PLACE, inplace, op=op, algorithm=row)
            for place, got in (("out", out), ("in", inplace)):
                wrong = differs(got, want)
                if wrong:
                    problems.append(f"{row} {place} {dtype} {op.name} count={count}: {wrong} differ")
        del xs, want
        cupy.get_default_memory_pool().free_all_blocks()
    agree(not problems, "; ".join(problems[:6]))


@pytest.mark.parametrize("row", ROWS)
def test_calls_replayed_from_a_cuda_graph_give_the_same_bits(comm, row: str) -> None:
    problems: list[str] = []
    stream = cupy.cuda.Stream(non_blocking=True)
    for k, nbytes in enumerate((8, 4 * 1001, LIMITS["oneshot-ll"] - 8, 3 * CHUNK + 4 * 1001)):
        if not fits(row, nbytes):
            continue
        count = nbytes // 4
        with stream:
            x = cupy.empty(count, dtype=cupy.float32)
            out = cupy.empty_like(x)
            comm.Allreduce(x, out, algorithm=row)  # outside the capture first (lazy resources)
            stream.begin_capture()
            comm.Allreduce(x, out, algorithm=row)
            graph = stream.end_capture()
            for replay in range(3):
                xs = inputs("float32", count, seed=100 + 7 * k + replay)
                x[...] = xs[RANK]
                out.fill(np.nan)
                graph.launch(stream)
                wrong = differs(out, gpu_reference(xs, Op.SUM))
                if wrong:
                    problems.append(f"graph {row} count={count} replay {replay}: {wrong} differ")
        stream.synchronize()
    agree(not problems, "; ".join(problems[:6]))


@pytest.mark.parametrize("row", ["nccl", "ring", "ring-events", "nccl-ring"])
def test_rows_that_do_not_keep_rank_order_refuse_by_name(comm, row: str) -> None:
    x = cupy.ones(100, dtype=cupy.float32)
    with pytest.raises(mpiring.InvalidArgumentError, match=f"'{row}' does not reduce in rank order"):
        comm.Allreduce(x, cupy.empty_like(x), algorithm=row)
    with pytest.raises(mpiring.UnavailableError, match="Allreduce and keep this rank's block"):
        comm.Reduce_scatter_block(cupy.ones(SIZE * 4, dtype=cupy.float32), cupy.empty(4, dtype=cupy.float32))
    y = cupy.ones(1000, dtype=cupy.float32)
    comm.Allreduce(MPI.IN_PLACE, y)
    agree(bool((y == SIZE).all()), "the call after a refusal is wrong")
