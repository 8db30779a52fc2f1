"""Allreduce results on real ranks: every op, dtype, size, placement, batch count and algorithm."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import (
    DTYPES,
    MODES,
    OPS,
    all_ok,
    check_identical,
    check_result,
    gather_inputs,
    make_input,
    poison,
    reduce_and_check,
    run_allreduce,
)

import mpiring
from mpiring.core.ops import Op
from mpiring.ring.schedule import RingPlan, choose_batches, default_batches

pytestmark = pytest.mark.mpi(min_size=1)

COUNTS = ["zero", "one", "n-1", "7919", "104729"]
MIB = 1 << 20


def resolve(count: str, size: int) -> int:
    """A named count for this ring size."""
    named = {"zero": 0, "one": 1, "n-1": size - 1}
    return named[count] if count in named else int(count)


def seq_advance(comm: mpiring.Communicator, count: int, dtype: np.dtype, batches: int | None) -> int:
    """Transfers a ring call of ``count`` elements must use on ``comm``."""
    if comm.size == 1 or count == 0:
        return 0
    link = comm.ring_pipeline(gpu=False).transport
    nb = choose_batches(count, comm.size, link.slot_capacity(dtype), batches,
                        default_batches(count * dtype.itemsize, comm.size))
    return RingPlan(comm.size, count, nb).num_transfers


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_ring(small_comm: mpiring.Communicator, op: Op, dtype: np.dtype, count: str, mode: str) -> None:
    """Every op x dtype x count x placement on 4 KiB slots: exact where it must be, identical everywhere."""
    n = resolve(count, small_comm.size)
    before = small_comm.ring_pipeline(gpu=False).next_seq
    label = f"{op.name} {dtype.name}[{n}] {mode}"
    problems = reduce_and_check(small_comm, dtype, op, n, mode, seed=11, label=label)
    advanced = small_comm.ring_pipeline(gpu=False).next_seq - before
    want = seq_advance(small_comm, n, dtype, None)
    if advanced != want:
        problems.append(f"{label}: the ring used {advanced} transfers, not {want}")
    all_ok(problems)


@pytest.mark.parametrize("mode", ["out", "in_place"])
@pytest.mark.parametrize("count", ["one", "n-1", "7919", "104729"])
@pytest.mark.parametrize("batches", [None, 1, 2, 3, 8])
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.int64)], ids=lambda d: d.name)
def test_batches(default_comm: mpiring.Communicator, dtype: np.dtype, batches: int | None, count: str,
                 mode: str) -> None:
    """Requested batch counts are honoured (big slots) and give the same exact results."""
    n = resolve(count, default_comm.size)
    before = default_comm.ring_pipeline(gpu=False).next_seq
    label = f"batches={batches} {dtype.name}[{n}] {mode}"
    problems = reduce_and_check(default_comm, dtype, Op.SUM, n, mode, seed=5, label=label, batches=batches)
    want = seq_advance(default_comm, n, dtype, batches)
    if default_comm.size > 1 and n and batches is not None and want != 2 * (default_comm.size - 1) * batches:
        problems.append(f"{label}: 1 MiB slots should not force more than {batches} batches")
    advanced = default_comm.ring_pipeline(gpu=False).next_seq - before
    if advanced != want:
        problems.append(f"{label}: {advanced} transfers instead of {want}")
    all_ok(problems)


LARGE = [  # (dtype, op, placement, MiB, slots): every dtype summed, every op on float32
    *[(d, Op.SUM, mode, mib, slots) for d, mode, mib, slots in zip(
        DTYPES, ["out", "in_place", "same", "none", "new", "out"], [3, 2, 2, 2, 1, 2],
        ["default", "small", "default", "small", "default", "small"], strict=True)],
    *[(np.dtype(np.float32), op, "out", 2, slots) for op, slots in
      [(Op.PROD, "default"), (Op.MAX, "small"), (Op.MIN, "default")]],
]


@pytest.mark.parametrize(("dtype", "op", "mode", "mib", "slots"), LARGE,
                         ids=[f"{d.name}-{o.name}-{m}-{mib}MiB-{s}" for d, o, m, mib, s in LARGE])
def test_large(request: pytest.FixtureRequest, dtype: np.dtype, op: Op, mode: str, mib: int,
               slots: str) -> None:
    """A few MiB, on big slots (default batches) and on 4 KiB slots (hundreds of mini-batches)."""
    comm = request.getfixturevalue(f"{slots}_comm")
    count = mib * MIB // dtype.itemsize + 3  # a count no ring size divides evenly, mostly
    all_ok(reduce_and_check(comm, dtype, op, count, mode, seed=3, label=f"{dtype.name}[{count}]"))


@pytest.mark.parametrize("mode", ["out", "in_place", "same", "new"])
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d.name != "bfloat16"], ids=lambda d: d.name)
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_mpi_algorithm(small_comm: mpiring.Communicator, op: Op, dtype: np.dtype, mode: str) -> None:
    """algorithm="mpi" (MPI.Allreduce) gives correct results for every op and dtype MPI has."""
    before = small_comm.ring_pipeline(gpu=False).next_seq
    problems = []
    for count in (0, 1, 7919):
        problems += reduce_and_check(small_comm, dtype, op, count, mode, seed=9, identical=False,
                                     label=f"mpi {op.name} {dtype.name}[{count}] {mode}", algorithm="mpi")
    if small_comm.ring_pipeline(gpu=False).next_seq != before:
        problems.append("the mpi algorithm moved the ring's sequence numbers")
    all_ok(problems)


def test_mpi_as_default_algorithm(world: MPI.Intracomm) -> None:
    """A communicator created with algorithm="mpi" uses it, and "ring" can still be asked for."""
    with mpiring.Communicator(world, gpu=False, algorithm="mpi", slot_bytes=4096) as comm:
        problems = reduce_and_check(comm, np.dtype(np.float64), Op.SUM, 5000, "out", seed=1, label="mpi")
        if comm.ring_pipeline(gpu=False).next_seq != 1:
            problems.append("default algorithm mpi ran the ring")
        problems += reduce_and_check(comm, np.dtype(np.float64), Op.SUM, 5000, "out", seed=2,
                                     label="ring", algorithm="ring")
        if world.size > 1 and comm.ring_pipeline(gpu=False).next_seq == 1:
            problems.append("algorithm='ring' did not run the ring")
    all_ok(problems)


def test_many_calls(small_comm: mpiring.Communicator, default_comm: mpiring.Communicator) -> None:
    """Hundreds of calls in a row with changing sizes, types, ops, placements, batches and algorithms."""
    rng = np.random.default_rng(2024)  # the same sequence of calls on every rank
    problems: list[str] = []
    for i in range(300):
        comm = small_comm if rng.random() < 0.8 else default_comm
        dtype = DTYPES[rng.integers(len(DTYPES))]
        op = OPS[rng.integers(len(OPS))]
        mode = ["out", "in_place", "none", "same", "new"][rng.integers(5)]
        count = int(rng.choice([0, 1, 2, 3, 5, 8, 13, 100, 1000, 2047, 4099, 6000, 33333],
                               p=[.04, .04, .04, .04, .04, .04, .04, .12, .15, .15, .12, .12, .06]))
        batches = [None, None, 1, 2, 3, 5][rng.integers(6)]
        algorithm = "mpi" if rng.random() < 0.15 and dtype.name != "bfloat16" else "ring"
        label = f"call {i}: {algorithm} {op.name} {dtype.name}[{count}] {mode} batches={batches}"
        problems += reduce_and_check(comm, dtype, op, count, mode, seed=1000 + i, label=label,
                                     identical=algorithm == "ring", algorithm=algorithm, batches=batches)
    all_ok(problems)


def test_shapes_and_layouts(small_comm: mpiring.Communicator) -> None:
    """2-d C and F arrays, a 0-d array, and a send/recv pair of different shapes but equal counts."""
    problems: list[str] = []
    for order in ("C", "F"):
        x = make_input(np.dtype(np.float64), Op.SUM, 3 * 1001, seed=4).reshape(3, 1001)
        x = np.asarray(x, order=order)
        stack = gather_inputs(x)
        for mode in ("out", "in_place", "new"):
            out, found = run_allreduce(small_comm, x.copy(order="K"), Op.SUM, mode)
            problems += found + check_result(out, stack, Op.SUM, f"{order} {mode}")
            if out.shape != (3, 1001):
                problems.append(f"{order} {mode}: shape {out.shape}")
    scalar = np.array(float(small_comm.rank + 1))
    got = small_comm.allreduce(scalar)
    if got.shape != () or got != small_comm.size * (small_comm.size + 1) / 2:
        problems.append(f"0-d: got {got!r}")
    x = make_input(np.dtype(np.int64), Op.SUM, 12, seed=6)
    out = np.full((3, 4), poison(x.dtype))
    small_comm.Allreduce(x, out)
    problems += check_result(out, gather_inputs(x), Op.SUM, "reshaped recv")
    all_ok(problems)


def test_views_into_one_array(small_comm: mpiring.Communicator) -> None:
    """Disjoint halves of one array serve as sendbuf and recvbuf."""
    whole = np.empty(2 * 5000, dtype=np.float32)
    whole[:5000] = make_input(np.dtype(np.float32), Op.SUM, 5000, seed=8)
    whole[5000:] = np.nan
    stack = gather_inputs(whole[:5000])
    small_comm.Allreduce(whole[:5000], whole[5000:], "sum")
    problems = check_result(whole[5000:], stack, Op.SUM, "halves")
    problems += check_result(whole[:5000], stack[[small_comm.rank]], Op.SUM, "untouched input")
    problems += check_identical(whole[5000:], "halves")
    all_ok(problems)


@pytest.mark.parametrize(
    ("op", "which"),
    [(MPI.SUM, Op.SUM), (MPI.PROD, Op.PROD), (MPI.MAX, Op.MAX), (MPI.MIN, Op.MIN),
     ("sum", Op.SUM), ("PROD", Op.PROD), ("Max", Op.MAX), (Op.MIN, Op.MIN)],
    ids=["MPI.SUM", "MPI.PROD", "MPI.MAX", "MPI.MIN", "sum", "PROD", "Max", "Op.MIN"],
)
def test_op_spellings(small_comm: mpiring.Communicator, op: object, which: Op) -> None:
    """MPI ops, strings and Op members select the same reduction."""
    x = make_input(np.dtype(np.int64), which, 3000, seed=2)
    out = np.full_like(x, poison(x.dtype))
    small_comm.Allreduce(x, out, op)
    all_ok(check_result(out, gather_inputs(x), which, f"op {op}"))


def test_default_op_is_sum(small_comm: mpiring.Communicator) -> None:
    """Without an op, Allreduce and allreduce sum."""
    x = make_input(np.dtype(np.int32), Op.SUM, 2000, seed=7)
    stack = gather_inputs(x)
    out = np.full_like(x, poison(x.dtype))
    small_comm.Allreduce(x, out)
    problems = check_result(out, stack, Op.SUM, "Allreduce")
    problems += check_result(small_comm.allreduce(x), stack, Op.SUM, "allreduce")
    all_ok(problems)
