"""Benchmark inputs whose allreduce is exact, and the expected result, computed locally.

Every rank's input is a hash of (seed, rank, element index): each rank can regenerate any
other rank's input, so the expected result needs no communication and is independent of the
algorithm under test. Values are small integers chosen per op and dtype so that every partial
result is exactly representable, whatever order the algorithm reduces in:

  sum       integers in [-2^b, 2^b - 1] with  nranks * 2^b <= the dtype's exact-integer limit
  prod      values in {-2, -1, 1, 2} (or {-1, 1} where 2^nranks would not be exact)
  max, min  integers in [-2^b, 2^b - 1]

Generation works on any array module with numpy's API (numpy on the host, CuPy on GPUs) and
returns int32 arrays; conversion to the benchmark dtype is the memory space's job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.ops import Op, bfloat16_dtype, normalize_op

CHUNK = 1 << 24  # elements per generated piece; a divisor of 2**32 keeps pieces in one block
DTYPE_NAMES = ("float16", "float32", "float64", "int32", "int64", "bfloat16")
FLOAT_NAMES = ("float16", "float32", "float64", "bfloat16")
MAX_BITS = 20  # value magnitude cap: plenty of distinct values, sums far from int32 overflow
_MASK64 = (1 << 64) - 1
_UFUNC_NAMES = {Op.SUM: "add", Op.PROD: "multiply", Op.MAX: "maximum", Op.MIN: "minimum"}


def resolve_dtype(name: str) -> np.dtype:
    """The numpy dtype for a benchmark dtype name (bfloat16 comes from ml_dtypes)."""
    key = str(name).lower()
    if key not in DTYPE_NAMES:
        raise ValueError(f"unsupported dtype {name!r}: choose one of {', '.join(DTYPE_NAMES)}")
    if key == "bfloat16":
        dtype = bfloat16_dtype()
        if dtype is None:
            raise ValueError("bfloat16 needs the ml_dtypes package (pip install ml_dtypes)")
        return dtype
    return np.dtype(key)


def is_float(dtype: np.dtype) -> bool:
    return np.dtype(dtype).name in FLOAT_NAMES


def exact_limit(dtype: np.dtype) -> int:
    """Largest L such that every integer in [-L, L] is exactly representable in ``dtype``."""
    name = np.dtype(dtype).name
    mantissa = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
    if name in mantissa:
        return 1 << mantissa[name]
    if name in ("int32", "int64"):
        return int(np.iinfo(np.dtype(name)).max)
    raise ValueError(f"no exact-integer limit for dtype {name}")


@dataclass(frozen=True)
class ValueRule:
    """What one rank's elements may be: ``kind`` is "range" (integers in [-2^bits, 2^bits-1]),
    "pow2" ({-2, -1, 1, 2}) or "sign" ({-1, 1})."""

    kind: str
    bits: int = 0

    def bound(self) -> int:
        """Largest magnitude of one value."""
        return {"range": 1 << self.bits, "pow2": 2, "sign": 1}[self.kind]


def value_rule(op: Any, dtype: np.dtype, nranks: int) -> ValueRule:
    """The values that keep the allreduce of ``nranks`` inputs exact in ``dtype``."""
    if nranks < 1:
        raise ValueError(f"rank count must be positive, got {nranks}")
    the_op = normalize_op(op)
    limit = min(exact_limit(dtype), (1 << 31) - 1)  # results are also computed in int32
    if the_op is Op.SUM:
        room = limit // nranks
        if room < 1:
            raise ValueError(
                f"cannot make exact inputs for a sum of {nranks} ranks in {np.dtype(dtype).name}"
            )
        return ValueRule("range", min(MAX_BITS, room.bit_length() - 1))
    if the_op is Op.PROD:
        return ValueRule("pow2") if nranks < 31 and (1 << nranks) <= limit else ValueRule("sign")
    return ValueRule("range", min(MAX_BITS, limit.bit_length() - 2))


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def point_seed(base: int, *parts: Any) -> int:
    """A 64-bit seed from a base seed and the point's description (same on every rank)."""
    x = _splitmix64(base & _MASK64)
    for part in parts:
        for byte in str(part).encode():
            x = _splitmix64(x ^ byte)
    return x


class InputGenerator:
    """Generates rank inputs and the expected allreduce, piece by piece, with array module
    ``xp`` (numpy or cupy)."""

    def __init__(self, xp: Any, op: Any, dtype: np.dtype, nranks: int, seed: int) -> None:
        self.xp = xp
        self.op = normalize_op(op)
        self.dtype = np.dtype(dtype)
        self.nranks = nranks
        self.seed = seed
        self.rule = value_rule(self.op, self.dtype, nranks)
        self._idx: Any = None  # arange(CHUNK) in xp, made on first use

    def _keys(self, rank: int, block: int) -> tuple[np.uint32, np.uint32]:
        h = _splitmix64(self.seed ^ _splitmix64((rank << 32) ^ block))
        return np.uint32((h & 0xFFFFFFFF) | 1), np.uint32(h >> 32)  # odd multiplier, offset

    def values(self, rank: int, start: int, stop: int) -> Any:
        """Rank ``rank``'s input elements ``start:stop`` as int32 (at most :data:`CHUNK`, not
        crossing a multiple of 2**32)."""
        xp, u32 = self.xp, np.uint32
        n = stop - start
        block, low = divmod(start, 1 << 32)
        if not 0 <= n <= CHUNK or low + n > 1 << 32:
            raise ValueError(f"bad piece {start}:{stop}")
        if self._idx is None:
            self._idx = xp.arange(CHUNK, dtype=xp.uint32)
        mul, add = self._keys(rank, block)
        z = self._idx[:n] + u32(low)
        z *= mul
        z += add
        z ^= z >> u32(16)  # murmur3's fmix32
        z *= u32(0x85EBCA6B)
        z ^= z >> u32(13)
        z *= u32(0xC2B2AE35)
        z ^= z >> u32(16)
        rule = self.rule
        if rule.kind == "range":
            z >>= u32(31 - rule.bits)  # the top bits + 1 bits: [0, 2^(bits+1))
            v = z.view(xp.int32)
            v -= np.int32(1 << rule.bits)
        elif rule.kind == "pow2":
            z >>= u32(30)
            v = z.view(xp.int32)
            v -= np.int32(2)  # -2, -1, 0, 1
            v += (v >= 0).astype(xp.int32)  # -2, -1, 1, 2
        else:
            z >>= u32(31)
            v = z.view(xp.int32)
            v *= np.int32(2)
            v -= np.int32(1)
        return v

    def expected(self, start: int, stop: int) -> Any:
        """The exact allreduce of all ranks' elements ``start:stop``, as int32."""
        acc = self.values(0, start, stop).copy()
        fold = getattr(self.xp, _UFUNC_NAMES[self.op])
        for r in range(1, self.nranks):
            fold(acc, self.values(r, start, stop), out=acc)
        return acc


def pieces(count: int) -> list[tuple[int, int]]:
    """``(start, stop)`` pieces of at most :data:`CHUNK` elements covering ``range(count)``."""
    return [(s, min(s + CHUNK, count)) for s in range(0, count, CHUNK)]


def describe_rule(rule: ValueRule) -> str:
    if rule.kind == "range":
        return f"integers in [{-(1 << rule.bits)}, {(1 << rule.bits) - 1}]"
    return "values in {-2, -1, 1, 2}" if rule.kind == "pow2" else "values in {-1, 1}"


def check_exact(rule: ValueRule, op: Any, dtype: np.dtype, nranks: int) -> bool:
    """Whether every partial result of ``nranks`` values under ``rule`` is exact in ``dtype``
    (what :func:`value_rule` promises; used by the tests)."""
    the_op = normalize_op(op)
    b = rule.bound()
    worst = b * nranks if the_op is Op.SUM else b**nranks if the_op is Op.PROD else b
    return worst <= min(exact_limit(dtype), (1 << 31) - 1) and math.isfinite(worst)
