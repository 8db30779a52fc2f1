"""Stress: thousands of calls on one host communicator with random sizes, dtypes, ops,
algorithms, batch counts and placements, and a random straggler now and then.

Inputs are integers small enough that every partial result is exact in the dtype, so any order
of reduction gives the same bits: every element must equal the reference exactly (tolerance
zero), and every rank's results must be bitwise identical (a CRC per call, compared at the end).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import BF16, DTYPES, all_ok, poison

import mpiring
from mpiring.core.ops import Op

pytestmark = pytest.mark.mpi(min_size=1)

CALLS = 2000  # a few seconds per rank count on 2 cores
MAX_COUNT = 200_000
PLACEMENTS = ("out", "in_place", "none", "same", "new")
# Largest |input| per dtype such that every partial sum of up to 4 ranks is exact.
SPAN = {"float16": 512, "bfloat16": 64, "float32": 1000, "float64": 1000, "int32": 1000, "int64": 1000}


def values(count: int, dtype: np.dtype, op: Op, call: int, rank: int) -> np.ndarray:
    """Rank ``rank``'s exact input for call ``call``, as int64 (cheap: a formula, not a random stream)."""
    i = np.arange(count, dtype=np.int64) * (2 * rank + 3) + call * 7919 + rank * 104729
    if op is Op.PROD:
        return np.array([-2, -1, 1, 2])[i % 4]  # never 0: no signed zeros to compare
    span = SPAN[dtype.name]
    return i % (2 * span + 1) - span


def inputs(count: int, dtype: np.dtype, op: Op, call: int, rank: int) -> np.ndarray:
    return values(count, dtype, op, call, rank).astype(dtype)


def reference(count: int, dtype: np.dtype, op: Op, call: int, size: int) -> np.ndarray:
    """The exact result, computed in int64 from every rank's input."""
    stack = np.stack([values(count, dtype, op, call, r) for r in range(size)])
    return op.ufunc.reduce(stack, axis=0).astype(dtype)


def straggle(link: Any, who: list[int], rank: int, rng: np.random.Generator) -> None:
    """Make this rank's transport sleep at random steps while ``who[0] == rank``."""

    def wrap(method: Callable[..., None]) -> Callable[..., None]:
        def slow(*args: Any) -> None:
            if who[0] == rank and rng.random() < 0.05:
                time.sleep(rng.uniform(0, 0.001))
            method(*args)
        return slow

    for name in ("send", "fold", "wait_slot_free", "wait_slot_full", "post_slot_full", "post_slot_free"):
        setattr(link, name, wrap(getattr(link, name)))


def one_call(comm: mpiring.Communicator, i: int,
             plan: np.random.Generator) -> tuple[str, np.ndarray, list[str]]:
    """Draw call ``i`` from the shared plan, run it; return its label, result and problems."""
    count = 0 if plan.random() < 0.02 else int(np.exp(plan.uniform(0, np.log(MAX_COUNT))))
    dtype = DTYPES[int(plan.integers(len(DTYPES)))]
    op = Op(int(plan.integers(1, 5)))
    algorithm = [None, "ring", "mpi"][int(plan.integers(3))]
    if algorithm == "mpi" and dtype == BF16:
        algorithm = "ring"  # MPI has no bfloat16
    batches = int(plan.integers(1, 5)) if algorithm == "ring" and plan.random() < 0.3 else None
    placement = PLACEMENTS[int(plan.integers(len(PLACEMENTS)))]
    label = f"call {i}: {op.name} {dtype.name}[{count}] {placement} algorithm={algorithm} batches={batches}"
    x = inputs(count, dtype, op, i, comm.rank)
    kwargs = {"algorithm": algorithm, "batches": batches}
    problems = []
    if placement == "out":
        out = np.full_like(x, poison(dtype))  # no result: an element left unwritten shows
        comm.Allreduce(x, out, op, **kwargs)
    elif placement == "new":
        out = comm.allreduce(x, op, **kwargs)
    else:
        out = x.copy()
        comm.Allreduce({"in_place": MPI.IN_PLACE, "none": None, "same": out}[placement], out, op, **kwargs)
    if placement in ("out", "new") and not np.array_equal(x, inputs(count, dtype, op, i, comm.rank)):
        problems.append(f"{label}: the input was modified")
    want = reference(count, dtype, op, i, comm.size)
    bits = np.dtype(f"u{dtype.itemsize}")  # compare bit patterns: exact, NaN included
    wrong = np.flatnonzero(out.view(bits) != want.view(bits))
    if wrong.size:
        first = wrong[:5]
        problems.append(f"{label}: {wrong.size} wrong elements, first at {first.tolist()}: "
                        f"got {out[first].tolist()}, want {want[first].tolist()}")
    return label, out, problems


def test_stress(world: MPI.Intracomm) -> None:
    """2000 random calls, a random straggler in one call of ten: zero wrong elements, identical
    bits on every rank, inputs intact. Protection: the whole ring protocol (sequence-numbered
    slot waits, slot reuse, batch choice) and the algorithm dispatch; with the fold's wait for
    a full slot removed, this test reports thousands of wrong elements."""
    plan = np.random.default_rng(20240611)  # the same plan on every rank
    who = [-1]
    problems: list[str] = []
    crcs: list[int] = []
    labels: list[str] = []
    with mpiring.Communicator(world, gpu=False, slot_bytes=64 << 10, timeout=60) as comm:
        straggle(comm.ring_pipeline(gpu=False).transport, who, comm.rank,
                 np.random.default_rng([7, comm.rank]))
        for i in range(CALLS):
            who[0] = int(plan.integers(world.size)) if plan.random() < 0.1 else -1
            label, out, found = one_call(comm, i, plan)
            problems += found
            crcs.append(zlib.crc32(out.view(np.uint8)))
            labels.append(label)
            if i % 100 == 99 and world.allreduce(len(problems) > 30, op=MPI.LOR):
                break  # together: a rank that stopped alone would leave the others waiting
        seqs = world.allgather(comm.ring_pipeline(gpu=False).next_seq)
    if len(set(seqs)) != 1:
        problems.append(f"ranks ended at different sequence numbers: {seqs}")
    everyone = world.allgather(crcs)
    for i, label in enumerate(labels):
        if len({c[i] if i < len(c) else None for c in everyone}) != 1:
            problems.append(f"{label}: results differ between ranks (CRCs {[c[i:i + 1] for c in everyone]})")
            break
    if len(labels) != CALLS and not problems:  # another rank's problems stopped the run
        problems.append(f"only {len(labels)} of {CALLS} calls ran")
    all_ok(problems)
