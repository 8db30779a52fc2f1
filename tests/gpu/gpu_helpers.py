"""Shared helpers of the GPU tests: verdicts agreed by every rank, exact-sum inputs."""

from __future__ import annotations

import os

import cupy
import numpy as np
from mpi4py import MPI

import mpiring

WORLD = MPI.COMM_WORLD
# Several ranks on one GPU (MPIRING_SHARE_GPU=1, a testing mode, under MPS): NCCL cannot run.
SHARED_GPU = os.environ.get("MPIRING_SHARE_GPU", "").strip() == "1"
NCCL_ROWS = ("nccl", "nccl-ring")


# The largest message, in bytes, of the rows that refuse larger ones: one-shot's slot is
# 4 MiB / ranks (kept to 1 MiB); oneshot-ll's 1 MiB slot has a row of whole 16-byte lines per
# rank, each line 8 bytes of payload (64 KiB on 8 ranks, 128 KiB on 4, 256 KiB on 2).
LIMITS = {"oneshot": min(1 << 20, (4 << 20) // WORLD.size // 16 * 16),
          "oneshot-ll": (1 << 20) // WORLD.size // 16 * 8}


def fit(algo: str, count: int, dtype) -> int:
    """``count``, cut to the size limit of ``algo`` (one-shot and oneshot-ll refuse larger messages)."""
    limit = LIMITS.get(algo)
    return count if limit is None else min(count, limit // np.dtype(dtype).itemsize)


def runnable(algos):
    """``algos`` less the NCCL rows where ranks share a GPU (NCCL refuses that)."""
    return [a for a in algos if not (SHARED_GPU and a in NCCL_ROWS)]


def agree(ok: bool, message: str) -> None:
    """Fail on every rank when any rank failed, so no rank runs ahead into a collective."""
    verdicts = WORLD.allgather((bool(ok), message))
    bad = [f"rank {r}: {m}" for r, (good, m) in enumerate(verdicts) if not good]
    assert not bad, "; ".join(bad)


def rank_input(rank: int, count: int, dtype, salt: int = 0, span: int = 8) -> cupy.ndarray:
    """Small integers in [-span, span], different per rank, element and salt.

    With span 8 every sum over up to 8 ranks is exact even in bfloat16, and with span 2 every
    product is: so results can be compared with zero tolerance.
    """
    idx = cupy.arange(count, dtype=cupy.int64)
    vals = (idx * (2 * rank + 3) + 7 * salt + 11 * rank) % (2 * span + 1) - span
    return vals.astype(dtype)


_UFUNCS = {mpiring.Op.SUM: cupy.add, mpiring.Op.PROD: cupy.multiply,
           mpiring.Op.MAX: cupy.maximum, mpiring.Op.MIN: cupy.minimum}


def span_for(op: mpiring.Op) -> int:
    return 2 if op is mpiring.Op.PROD else 8


def reference(op: mpiring.Op, size: int, count: int, salt: int = 0) -> cupy.ndarray:
    """The exact result of ``op`` over every rank's :func:`rank_input`, in float64."""
    span = span_for(op)
    acc = rank_input(0, count, cupy.float64, salt, span)
    for r in range(1, size):
        acc = _UFUNCS[op](acc, rank_input(r, count, cupy.float64, salt, span))
    return acc


def poison(out: cupy.ndarray) -> None:
    if out.dtype.kind == "f":
        out.fill(np.nan)
    else:
        out.fill(np.iinfo(out.dtype).min)


def mismatches(out: cupy.ndarray, expect: cupy.ndarray) -> int:
    """Elements of ``out`` that differ from ``expect`` (NaN counts as a mismatch)."""
    return int(cupy.count_nonzero(out.astype(cupy.float64) != expect))


_WEIGHTS = None
_PIECE = 1 << 24


def identical_on_all_ranks(out: cupy.ndarray) -> bool:
    """Whether ``out`` holds the same bytes on every rank (a position-weighted checksum)."""
    global _WEIGHTS
    if _WEIGHTS is None:
        _WEIGHTS = cupy.arange(_PIECE, dtype=cupy.uint64) % 251 + 1
    raw = out.reshape(-1).view(cupy.uint8)
    digest = 0
    for start in range(0, raw.size, _PIECE):
        piece = raw[start:start + _PIECE]
        part = cupy.sum(piece.astype(cupy.uint64) * _WEIGHTS[:piece.size])
        digest = (digest * 1000003 + int(part)) % (1 << 61)
    return len(set(WORLD.allgather(digest))) == 1


_NAP = cupy.RawKernel(r"""
extern "C" __global__ void nap(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("nanosleep.u32 1000;");
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}""", "nap")


def gpu_nap(stream: cupy.cuda.Stream, seconds: float) -> None:
    """Hold ``stream`` for about ``seconds`` (one sleeping thread: no SM is kept busy)."""
    _NAP((1,), (1,), (np.uint64(seconds * 1e9),), stream=stream)


def free_device_bytes() -> int:
    """Free memory of the device with nothing in flight on any rank. Free memory is the whole
    device's, so where ranks share a GPU every rank empties its pool before any rank reads it,
    and none allocates again until all have read."""
    cupy.cuda.runtime.deviceSynchronize()
    WORLD.Barrier()
    cupy.get_default_memory_pool().free_all_blocks()
    WORLD.Barrier()
    free = cupy.cuda.runtime.memGetInfo()[0]
    WORLD.Barrier()
    return free
