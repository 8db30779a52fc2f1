"""Helpers for tests that run on every rank at once: collective verdicts, data, references, checks.

Every check here ends in a collective verdict, so that all ranks pass or fail a test together and
stay in step for the next one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from matrix import HOST_DTYPES, OPS, PLACEMENTS  # noqa: F401 - OPS: re-exported for the tests
from mpi4py import MPI

from mpiring.core.ops import Op, dtype_row, is_integer, tolerance

world = MPI.COMM_WORLD
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = HOST_DTYPES  # the shared matrix (tests/matrix.py), read from mpiring's own tables
MODES = PLACEMENTS


def all_ok(failures: list[str], comm: MPI.Intracomm = world) -> None:
    """Fail on every rank when any rank reported a problem; pass on every rank otherwise."""
    gathered = comm.allgather(failures)
    lines = [f"rank {r}: {m}" for r, fs in enumerate(gathered) for m in fs]
    if lines:
        more = f"\n... and {len(lines) - 30} more" if len(lines) > 30 else ""
        pytest.fail(f"{len(lines)} problem(s):\n" + "\n".join(lines[:30]) + more, pytrace=False)


def attempt(fn: Callable[[], Any]) -> BaseException | None:
    """Run ``fn``; return what it raised, or None."""
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - judged by the caller, collectively
        return err
    return None


def expect_raised(err: BaseException | None, cls: type[BaseException], *fragments: str) -> list[str]:
    """Problems with ``err`` if it is not a ``cls`` whose message holds every fragment."""
    if err is None:
        return [f"expected {cls.__name__}, nothing was raised"]
    if not isinstance(err, cls):
        return [f"expected {cls.__name__}, got {type(err).__name__}: {err}"]
    return [f"{cls.__name__} message lacks {f!r}: {err}" for f in fragments if f not in str(err)]


def poison(dtype: np.dtype) -> Any:
    """A value no test input ever reduces to: NaN for floats, the most negative integer else."""
    return np.iinfo(dtype).min if is_integer(dtype) else np.nan


def make_input(dtype: np.dtype, op: Op, count: int, seed: int, rank: int | None = None) -> np.ndarray:
    """This rank's input: values whose reduction is representable, differing from rank to rank."""
    rank = world.rank if rank is None else rank
    rng = np.random.default_rng([seed, rank, count, int(op)])
    dtype = np.dtype(dtype)
    if is_integer(dtype):
        info = np.iinfo(dtype)
        if op is Op.SUM:
            span = 2**20 if dtype.itemsize == 4 else 2**40
            return rng.integers(-span, span, count, dtype=dtype, endpoint=True)
        if op is Op.PROD:
            return (rng.integers(1, 10, count) * rng.choice([-1, 1], count)).astype(dtype)
        return rng.integers(info.min + 1, info.max, count, dtype=dtype, endpoint=True)
    if op is Op.PROD:
        values = rng.uniform(0.5, 2.0, count) * rng.choice([-1.0, 1.0], count)
    else:  # a spread of magnitudes, float16 subnormals included
        values = rng.uniform(-1.0, 1.0, count) * np.exp2(rng.integers(-14, 10, count))
    return values.astype(dtype)


def gather_inputs(x: np.ndarray, comm: MPI.Intracomm = world) -> np.ndarray:
    """Every rank's ``x`` (same count and dtype everywhere), as an array of shape (size, count)."""
    raw = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    out = np.empty(comm.size * raw.size, dtype=np.uint8)
    comm.Allgather(raw, out)
    return out.view(x.dtype).reshape(comm.size, x.size)


def tiny(dtype: np.dtype) -> float:
    """The smallest subnormal of a floating type: the absolute rounding step near zero."""
    info = ml_dtypes.finfo(dtype) if dtype == BF16 else np.finfo(dtype)
    return float(info.smallest_subnormal)


def dtype_epsilon(dtype: np.dtype) -> float:
    return dtype_row(np.dtype(dtype)).epsilon


def check_result(out: np.ndarray, stack: np.ndarray, op: Op, label: str) -> list[str]:
    """Compare ``out`` element by element with the reduction of ``stack`` (every rank's input).

    Integers must be exact (wrapping like the element type), max/min exact, one rank exact, and
    floating sums and products within ``tolerance(dtype, n)`` of sum|x| (resp. |prod|), plus
    one smallest subnormal per rounding for results near zero.
    """
    dtype, n = stack.dtype, stack.shape[0]
    flat = np.ascontiguousarray(out).reshape(-1)  # logical order, as gather_inputs
    if out.dtype != dtype or flat.size != stack.shape[1]:
        return [f"{label}: result is {out.dtype}[{flat.size}], expected {dtype}[{stack.shape[1]}]"]
    if flat.size == 0:
        return []
    if op is Op.AVG:  # the sum's bound, divided by n, plus the division's own rounding
        wide = stack.astype(np.longdouble)
        want = wide.sum(axis=0) / n
        got_values = flat.astype(np.longdouble)
        allowed = (tolerance(dtype, n) * np.abs(wide).sum(axis=0) + (n - 1) * tiny(dtype)) / n
        allowed += dtype_epsilon(dtype) / 2 * np.abs(want) + tiny(dtype)
        bad = np.flatnonzero(~(np.abs(got_values - want) <= allowed))
    elif is_integer(dtype):
        want = op.ufunc.reduce(stack.astype(np.int64), axis=0).astype(dtype)
        bad = np.flatnonzero(flat != want)
        got_values = flat
    else:
        wide = stack.astype(np.longdouble)
        want = op.ufunc.reduce(wide, axis=0)
        got_values = flat.astype(np.longdouble)
        if op in (Op.MAX, Op.MIN) or n == 1:
            allowed = np.zeros_like(want)
        else:
            scale = np.abs(wide).sum(axis=0) if op is Op.SUM else np.abs(want)
            allowed = tolerance(dtype, n) * scale + (n - 1) * tiny(dtype)
        ok = np.abs(got_values - want) <= allowed  # False for NaN (the poison)
        bad = np.flatnonzero(~ok)
    if bad.size == 0:
        return []
    shown = bad[:8]
    return [f"{label}: {bad.size} of {flat.size} elements wrong, first at {shown.tolist()}: "
            f"got {got_values[shown].tolist()}, want {want[shown].tolist()}"]


def check_identical(out: np.ndarray, label: str, comm: MPI.Intracomm = world) -> list[str]:
    """Problems if this rank's result is not bitwise identical to rank 0's."""
    mine = np.ascontiguousarray(out).reshape(-1).view(np.uint8)
    root = mine.copy()
    comm.Bcast(root, root=0)
    diff = np.flatnonzero(mine != root)
    if diff.size == 0:
        return []
    return [f"{label}: result differs from rank 0's in {diff.size} bytes, first at byte {int(diff[0])}"]


def run_allreduce(comm: Any, x: np.ndarray, op: Op, mode: str, **kwargs: Any) -> tuple[np.ndarray, list[str]]:
    """Allreduce a copy of ``x`` in ``mode``; return the result and problems with the input's fate.

    Outputs are poisoned first; out-of-place inputs must come back unchanged.
    """
    problems: list[str] = []
    keep = x.copy()
    if mode == "out":
        out = np.full_like(x, poison(x.dtype))
        comm.Allreduce(x, out, op, **kwargs)
    elif mode == "new":
        out = comm.allreduce(x, op, **kwargs)
    else:
        out = x  # in place: the input is the output
        send = {"in_place": MPI.IN_PLACE, "none": None, "same": out}[mode]
        comm.Allreduce(send, out, op, **kwargs)
    if mode in ("out", "new"):
        if out is x or np.shares_memory(out, x):
            problems.append(f"{mode}: the result aliases the input")
        if x.tobytes() != keep.tobytes():
            problems.append(f"{mode}: the input was modified")
    return out, problems


def reduce_and_check(comm: Any, dtype: np.dtype, op: Op, count: int, mode: str, seed: int,
                     label: str, identical: bool = True, group: MPI.Intracomm = world,
                     **kwargs: Any) -> list[str]:
    """One verified call: make inputs, gather them, reduce, check every element and every rank.

    ``group`` is the MPI communicator ``comm`` was made from (for the reference and the
    cross-rank comparison).
    """
    x = make_input(dtype, op, count, seed)
    stack = gather_inputs(x, group)
    out, problems = run_allreduce(comm, x, op, mode, **kwargs)
    problems += check_result(out, stack, op, label)
    if identical:
        problems += check_identical(out, label, group)
    return problems


def resources() -> dict[str, int]:
    """What a leaking communicator would grow in this process: open file descriptors, shared
    memory mappings (MPI shared windows), and, on MPICH, the MPI communicators and windows alive.

    MPICH reuses freed handle slots before it takes new ones, so the highest handle among more
    new objects than were ever freed at once rises by one for every object leaked since.
    """
    with open("/proc/self/maps") as maps:
        shared = sum(1 for line in maps if line.split()[1].endswith("s"))
    found = {"fds": len(os.listdir("/proc/self/fd")), "shared mappings": shared}
    if MPI.Get_library_version().startswith("MPICH"):
        comms = [MPI.COMM_SELF.Dup() for _ in range(64)]
        found["highest communicator handle"] = max(c.handle & 0xFFFFFFFF for c in comms)
        for c in comms:
            c.Free()
        wins = [MPI.Win.Allocate_shared(8, 1, comm=MPI.COMM_SELF) for _ in range(24)]
        found["highest window handle"] = max(w.handle & 0xFFFFFFFF for w in wins)
        for w in wins:
            w.Free()
    return found


def growth(before: dict[str, int], after: dict[str, int], slack: int = 4) -> list[str]:
    """Problems if any resource of ``after`` exceeds ``before`` by more than ``slack``."""
    return [f"{name} grew from {before[name]} to {after[name]}" for name in before
            if after[name] > before[name] + slack]


class HostTimeline:
    """--overlap's GPU side simulated on the host (a stand-in for mpiring.bench.loads.GpuTimeline):
    GEMMs that take 1 ms (on paper); the calls timed for real (host allreduces): together, the
    calls run while the GEMMs would, so the makespan is the longer of the two."""

    def synchronize(self):
        pass

    def gemms_alone(self, load, n):
        return 1e-3

    def calls_alone(self, call, k):
        start = MPI.Wtime()
        for _ in range(k):
            call()
        return (MPI.Wtime() - start) / k

    def beside(self, load, call, k, n):
        t = self.calls_alone(call, k) * k
        return [i * 1.05e-3 for i in range(n + 1)], 0.2e-3, 0.2e-3 + t

    def together(self, load, call, k, g, after):
        t = self.calls_alone(call, k) * k
        return g * 1e-3, after * 1e-3 + t

    def close(self):
        pass
