"""What each algorithm row states of its SM work (``Algorithm.sm_work``), checked against
counts made independently: the fold bytes of every ``Fold`` of the ring's and ce-twoshot's
actual schedules, the shards of ``csrc/direct.cu``'s two-shot and the lines of oneshot-ll; and
the blocks against the grid the launchers compute (:mod:`mpiring.cuda.grids`, with the addresses
the transports form) for the same call, capped by the SM budget; and the SMs a grid holds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring import algorithms
from mpiring.algorithms import CallShape, SmWork
from mpiring.algorithms import ce_twoshot as ce
from mpiring.core.buffers import Memory
from mpiring.cuda.direct_kernels import ll_shape
from mpiring.cuda.fold_kernel import THREADS
from mpiring.cuda.grids import GridLimits, copy_blocks, copy_unit, fold_blocks
from mpiring.cuda.layout import staging_layout
from mpiring.ring.alltoall_schedule import AllToAllPlan, Fold, Rounds
from mpiring.ring.schedule import RingPlan

H100_SMS = 132
BASE_IN, BASE_OUT, SLOT = 1 << 30, 2 << 30, 3 << 30  # 16-byte aligned buffers and a ring slot
DTYPES = [np.dtype(d) for d in ("float32", "float16", "float64", "int8")]

ranks = st.integers(2, 8)
counts = st.integers(1, 40_000)
dtypes = st.sampled_from(DTYPES)
budgets = st.one_of(st.none(), st.integers(1, 200))


def state(name: str, shape: CallShape) -> SmWork:
    row = algorithms.get(name)
    assert row.sm_work is not None, name
    return row.sm_work(shape)


def gpu_shape(n: int, count: int, dtype: np.dtype, batches: int | None = None,
              budget: int | None = None) -> CallShape:
    return CallShape(Memory.CUDA, n, count, dtype, batches, GridLimits.of(H100_SMS, budget))


# -- the ring: its schedule's folds, its transport's launches ------------------------------

def ring_fold_bytes(plan: RingPlan, itemsize: int) -> int:
    """Bytes the reduce-scatter folds of ``plan`` read and write on all ranks: each reads the
    rank's input chunk and its slot and writes its output chunk."""
    return sum(3 * t.recv_count * itemsize for r in range(plan.size) for t in plan.transfers(r) if t.reduce)


def ring_launch_blocks(plan: RingPlan, itemsize: int, cap: int) -> int:
    """The largest grid the CUDA IPC transport's folds and copies launch over ``plan`` on any
    rank, with the addresses it forms (``CudaIpcTransport.fold``, ``FoldKernel``)."""
    most = 0
    for r in range(plan.size):
        for t in plan.transfers(r):
            if not t.recv_count:
                continue
            out = BASE_OUT + t.out_start * itemsize
            if t.reduce:
                inp = BASE_IN + t.recv_start * itemsize
                blocks = fold_blocks(t.recv_count, itemsize, (out | inp | SLOT) % 16 == 0, cap, THREADS)
            else:
                nbytes = t.recv_count * itemsize
                blocks = copy_blocks(nbytes, copy_unit(out, SLOT, nbytes), cap, THREADS)
            most = max(most, blocks)
    return most


@settings(max_examples=60, deadline=None)
@given(ranks, counts, dtypes, st.integers(1, 4), budgets)
def test_the_rings_statement_is_its_schedules_folds_and_launches(n, count, dtype, batches, budget):
    plan = RingPlan(n, count, batches)
    shape = gpu_shape(n, count, dtype, batches, budget)
    for name in ("ring", "ring-events"):
        work = state(name, shape)
        assert work.fold_traffic == pytest.approx(ring_fold_bytes(plan, dtype.itemsize) / (n * shape.nbytes))
        assert work.blocks == ring_launch_blocks(plan, dtype.itemsize, shape.grids.fold_cap)
        if budget is not None:
            assert work.blocks <= budget


def test_the_ring_on_host_arrays_holds_no_sm():
    work = state("ring", CallShape(Memory.HOST, 4, 1000, np.dtype("float32"), 1))
    assert work == SmWork(0, pytest.approx(9 / 4))


# -- ce-twoshot: the Fold operations of its plan -------------------------------------------

def ce_folds(n: int, count: int, itemsize: int) -> list[tuple[int, Fold]]:
    plan = AllToAllPlan(n, count, ce.area_bytes() // itemsize)
    return [(rank, op) for rank in range(n) for _, op in plan.issue_order(rank, Rounds())
            if isinstance(op, Fold)]


@settings(max_examples=40, deadline=None)
@given(ranks, st.integers(1, 3_000_000), dtypes, budgets)
def test_ce_twoshots_statement_is_its_plans_folds(n, count, dtype, budget):
    folds = ce_folds(n, count, dtype.itemsize)
    shape = gpu_shape(n, count, dtype, None, budget)
    work = state("ce-twoshot", shape)
    moved = sum((len(op.sources) + 1) * op.elements * dtype.itemsize for _, op in folds)
    assert work.fold_traffic == pytest.approx(moved / (n * shape.nbytes))
    assert work.fold_traffic == pytest.approx((n + 1) / n)
    cap = shape.grids.fold_cap
    launched = 0
    for rank, op in folds:  # the engine's addresses: output and the rank's own input piece
        out, mine = BASE_OUT + op.dst[2] * dtype.itemsize, BASE_IN + op.sources[rank][2] * dtype.itemsize
        launched = max(launched, fold_blocks(op.elements, dtype.itemsize, (out | mine) % 16 == 0, cap,
                                             ce.THREADS))
    assert work.blocks == launched


def test_ce_twoshot_on_one_rank_is_a_copy():
    assert state("ce-twoshot", gpu_shape(1, 1000, np.dtype("float32"))) == SmWork(0, 0.0)


# -- the direct kernels ----------------------------------------------------------------------

def twoshot_fold_bytes(n: int, count: int, itemsize: int, blocks: int, twoshot_bytes: int) -> int:
    """Bytes of step 2 of ``csrc/direct.cu``'s two-shot on all ranks, its shard arithmetic
    mirrored: each rank reads the n copies of its shard and stores the result n times."""
    v = 16 // itemsize
    g = v * blocks * THREADS
    chunk = twoshot_bytes // itemsize // (n * g) * (n * g)
    grain = g if count > chunk else v
    moved = 0
    for base in range(0, count, chunk):
        m = min(chunk, count - base)
        shard = (-(-m // n) + grain - 1) // grain * grain
        for me in range(n):
            lo = min(me * shard, m)
            moved += 2 * n * min(shard, m - lo) * itemsize
    return moved


@settings(max_examples=40, deadline=None)
@given(ranks, st.integers(1, 40_000_000), st.sampled_from([np.dtype("float32"), np.dtype("float16")]),
       budgets)
def test_the_direct_kernels_statement(n, count, dtype, budget):
    shape = gpu_shape(n, count, dtype, None, budget)
    grid = staging_layout(None, budget).blocks  # what DirectKernels launches
    one, two = state("oneshot", shape), state("twoshot", shape)
    assert one == SmWork(grid, n + 1)
    assert two.blocks == grid
    layout = staging_layout(None, budget)
    moved = twoshot_fold_bytes(n, count, dtype.itemsize, layout.blocks, layout.twoshot_bytes)
    assert two.fold_traffic == pytest.approx(moved / (n * shape.nbytes))


@settings(max_examples=60, deadline=None)
@given(ranks, st.integers(1, 40_000), dtypes, budgets)
def test_oneshot_lls_statement(n, count, dtype, budget):
    shape = gpu_shape(n, count, dtype, None, budget)
    work = state("oneshot-ll", shape)
    held = None if budget is None else min(budget, H100_SMS)
    try:
        assert work.blocks == ll_shape(count, dtype.itemsize, max_blocks=held).blocks
    except ValueError:  # over the budget's limit: the row refuses the call
        assert work.blocks is None
    nbytes = count * dtype.itemsize
    lines = [min(8, nbytes - at) for at in range(0, nbytes, 8)]  # payload of each line
    # own copy read, result written (the payload), and per peer each line read and cleared
    moved = 2 * sum(lines) + (n - 1) * sum(2 * 16 for _ in lines)
    assert work.fold_traffic == pytest.approx(moved / nbytes)
    if nbytes % 8 == 0:
        assert work.fold_traffic == pytest.approx(4 * n - 2)


# -- every row: the budget caps the grid, and the rows mpiring cannot know say so ------------

@settings(max_examples=60, deadline=None)
@given(ranks, st.integers(1, 1 << 22), dtypes, st.integers(1, 200))
def test_a_budget_caps_every_stated_grid(n, count, dtype, budget):
    shape = gpu_shape(n, count, dtype, 1, budget)
    for row in algorithms.rows():
        if row.sm_work is not None and row.serves(Memory.CUDA):
            blocks = row.sm_work(shape).blocks
            assert blocks is None or blocks <= budget, row.name


def test_nccl_and_mpi_rows_state_nothing():
    for name in ("nccl", "nccl-ring", "mpi", "hier"):
        assert algorithms.get(name).sm_work is None


def test_the_fold_cap_follows_the_budget():
    assert GridLimits.of(H100_SMS, None).fold_cap == 4 * H100_SMS
    assert GridLimits.of(H100_SMS, 16).fold_cap == 16
    assert GridLimits.of(H100_SMS, 500).fold_cap == H100_SMS  # at most the device's SMs
    assert GridLimits.of(H100_SMS, 16).direct_blocks == staging_layout(None, 16).blocks


def test_mpi_twoshot_states_its_numpy_passes():
    """Float32: a copy and n - 1 in-place folds; float16 widened to float32 (mpi_twoshot.sm_work)."""
    f32 = CallShape(Memory.HOST, 4, 1000, np.dtype("float32"), comm_ranks=4)
    f16 = CallShape(Memory.HOST, 4, 1000, np.dtype("float16"), comm_ranks=4)
    assert state("mpi-twoshot", f32) == SmWork(0, pytest.approx(11 / 4))
    assert state("mpi-twoshot", f16) == SmWork(0, pytest.approx(33 / 4))


@pytest.mark.parametrize("budget", [None, 1, 16, 132, 500])
def test_the_fold_launcher_takes_the_stated_cap_as_given(monkeypatch, budget):
    """The context hands ``GridLimits.fold_cap`` to ``FoldKernel``, whose launches the ring's
    statement describes: the launcher must use it as is (4 blocks per SM without a budget, not a
    cap of the cap). A fake CuPy answers the device's SM count."""
    import sys
    import types

    from mpiring.cuda.fold_kernel import FoldKernel

    device = types.SimpleNamespace(attributes={"MultiProcessorCount": 132})
    cupy, cuda = types.ModuleType("cupy"), types.ModuleType("cupy.cuda")
    cuda.Device = lambda _id: device  # type: ignore[attr-defined]
    cuda.driver = types.SimpleNamespace(launchKernel=lambda *args: None)  # type: ignore[attr-defined]
    cupy.cuda = cuda  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    limits = GridLimits.of(132, budget)
    assert FoldKernel(0, 0, 0, limits.fold_cap).max_blocks == limits.fold_cap
    assert limits.fold_cap == (4 * 132 if budget is None else min(budget, 132))
    assert FoldKernel(0, 0, 0).max_blocks == 4 * 132


# -- the SMs a statement holds: its largest grid on the communicator's GPU ------------------


@given(st.one_of(st.none(), st.integers(0, 4000)), st.one_of(st.none(), st.integers(1, 200)))
def test_a_grid_holds_as_many_sms_as_blocks_up_to_the_gpus(blocks, device_sms):
    held = SmWork(blocks, 1.0, device_sms).sms
    if blocks == 0:
        assert held == 0  # copy engines or the host: no SM, whatever the GPU
    elif blocks is None or device_sms is None:
        assert held is None
    else:
        assert held == min(blocks, device_sms) and 1 <= held <= device_sms


class Backend:
    """What ``Algorithm.state_sm_work`` reads of a backend."""

    def __init__(self, memory: Memory, n: int, grids: GridLimits | None) -> None:
        self.memory, self.node_size, self.size, self.grids = memory, n, n, grids


def test_the_communicator_states_sms_held_of_its_gpu():
    """ce-twoshot's fold of a 1 GiB float32 message on 4 ranks launches more blocks than an H100
    has SMs: it holds all 132; one-shot's fixed grid of 128 blocks holds 128; under a budget of
    16 every grid holds at most 16; host rows hold none."""
    f32, count = np.dtype("float32"), 1 << 28
    whole = Backend(Memory.CUDA, 4, GridLimits.of(H100_SMS, None))
    ce_work = algorithms.get("ce-twoshot").state_sm_work(whole, count, f32)
    assert ce_work.blocks > H100_SMS and ce_work.sms == H100_SMS and ce_work.device_sms == H100_SMS
    one = algorithms.get("oneshot").state_sm_work(whole, 1024, f32)
    assert one.sms == one.blocks == GridLimits.of(H100_SMS, None).direct_blocks <= H100_SMS
    budget = Backend(Memory.CUDA, 4, GridLimits.of(H100_SMS, 16))
    calls = (("ce-twoshot", count), ("twoshot", count), ("oneshot", 1024), ("oneshot-ll", 1024))
    for name, elements in calls:
        work = algorithms.get(name).state_sm_work(budget, elements, f32)
        assert work.sms is not None and work.sms <= 16, name
    host = algorithms.get("mpi-twoshot").state_sm_work(Backend(Memory.HOST, 4, None), 1024, f32)
    assert host.blocks == host.sms == 0 and host.device_sms is None
