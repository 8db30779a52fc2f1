"""The ring's phases played out in pure numpy: reduce-scatter alone (rank r ends with block r,
in a full-size output or a compact one), all-gather alone (from block r on rank r), and the
block layout they share with the allreduce. The simulator executes one transfer at a time for
all ranks (every send, then every fold) and reads and writes exactly the offsets the plan
gives, so a wrong offset, source or phase shows as a wrong element."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring.core.ops import Op
from mpiring.ring.schedule import Phase, RingPlan, Source, issue_order

POISON = np.int64(-(2**62) + 777)
OPS = list(Op)


def inputs_for(n: int, count: int, op: Op, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if op is Op.PROD:
        return [rng.choice(np.array([-2, -1, 1, 2, 3]), size=count) for _ in range(n)]
    return [rng.integers(-1000, 1000, size=count, dtype=np.int64) for _ in range(n)]


def play(plan: RingPlan, ins: list[np.ndarray], outs: list[np.ndarray], op: Op) -> None:
    """Run every transfer of ``plan``: sends read ``ins`` (INPUT) or ``outs`` (OUTPUT), folds
    write ``outs[out_start:]`` from ``ins[recv_start:]`` and the slot."""
    n = plan.size
    for t in range(plan.num_transfers):
        trs = [plan.transfer(r, t) for r in range(n)]
        slots = [np.full(plan.max_chunk, POISON) for _ in range(n)]
        for r, tr in enumerate(trs):
            nxt = (r + 1) % n
            assert tr.send_count == trs[nxt].recv_count <= plan.max_chunk
            src = ins[r] if tr.source is Source.INPUT else outs[r]
            slots[nxt][:tr.send_count] = src[tr.send_start:tr.send_start + tr.send_count]
        for r, tr in enumerate(trs):
            data = slots[r][:tr.recv_count]
            out = outs[r][tr.out_start:tr.out_start + tr.recv_count]
            if tr.reduce:
                out[:] = op.ufunc(ins[r][tr.recv_start:tr.recv_start + tr.recv_count], data)
            else:
                out[:] = data


def reduce_scatter(n: int, b: int, count: int, op: Op, compact: bool, seed: int) -> None:
    plan = RingPlan(n, count, b, Phase.REDUCE_SCATTER, compact=compact)
    ins = inputs_for(n, count, op, seed)
    want = np.array(ins[0]) if n == 1 else op.ufunc.reduce(np.stack(ins), axis=0)
    originals = [x.copy() for x in ins]
    size = count // n if compact else count
    outs = [np.full(size, POISON) for _ in range(n)]
    if n == 1:  # a ring of one copies (the transport's copy_input)
        outs[0][:] = ins[0]
    play(plan, ins, outs, op)
    for r in range(n):
        lo, hi = plan.blocks[r]
        got = outs[r] if compact else outs[r][lo:hi]
        bad = np.flatnonzero(got != want[lo:hi])
        assert bad.size == 0, (f"n={n} b={b} count={count} compact={compact}: rank {r} block wrong "
                               f"at {bad[:8]}")
        np.testing.assert_array_equal(ins[r], originals[r], err_msg="input was modified")


def allgather(n: int, b: int, count: int, seed: int) -> None:
    plan = RingPlan(n, count, b, Phase.ALLGATHER)
    full = np.random.default_rng(seed).integers(-1000, 1000, size=count)
    outs = []
    for r in range(n):
        out = np.full(count, POISON)
        lo, hi = plan.blocks[r]
        out[lo:hi] = full[lo:hi]  # what the caller puts there before the ring starts
        outs.append(out)
    play(plan, [np.full(count, POISON)] * n, outs, Op.SUM)  # an all-gather never reads the input
    for r in range(n):
        bad = np.flatnonzero(outs[r] != full)
        assert bad.size == 0, f"n={n} b={b} count={count}: rank {r} wrong at {bad[:8]}"


@pytest.mark.parametrize("b", range(1, 5))
@pytest.mark.parametrize("n", range(1, 6))
def test_reduce_scatter_leaves_block_r_on_rank_r(n: int, b: int) -> None:
    for count in sorted(set(range(0, 3 * n * b + 3)) | {97, 1001}):
        for op in OPS:
            reduce_scatter(n, b, count, op, compact=False, seed=count)
            if count % n == 0:
                reduce_scatter(n, b, count, op, compact=True, seed=count)


@pytest.mark.parametrize("b", range(1, 5))
@pytest.mark.parametrize("n", range(1, 6))
def test_allgather_from_block_r_on_rank_r(n: int, b: int) -> None:
    for count in sorted(set(range(0, 3 * n * b + 3)) | {97, 1001}):
        allgather(n, b, count, seed=count)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), b=st.integers(1, 9), m=st.integers(0, 3000), op=st.sampled_from(OPS),
       compact=st.booleans(), seed=st.integers(0, 2**31))
def test_reduce_scatter_property(n: int, b: int, m: int, op: Op, compact: bool, seed: int) -> None:
    reduce_scatter(n, b, n * m, op, compact, seed)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 12), b=st.integers(1, 9), count=st.integers(0, 30000), seed=st.integers(0, 2**31))
def test_allgather_property(n: int, b: int, count: int, seed: int) -> None:
    allgather(n, b, count, seed)


@pytest.mark.parametrize("phase", list(Phase))
def test_steps_per_phase(phase: Phase) -> None:
    plan = RingPlan(5, 100, 3, phase)
    assert plan.steps == (8 if phase is Phase.ALLREDUCE else 4)
    assert plan.num_transfers == plan.steps * 3
    assert plan.fold_after_send is False


def test_blocks_and_pieces_partition_the_message() -> None:
    plan = RingPlan(3, 17, 2)
    assert plan.blocks == ((0, 6), (6, 12), (12, 17))
    chunks = sorted(plan.chunk(b, j) for b in range(2) for j in range(3))
    covered = [i for start, n in chunks for i in range(start, start + n)]
    assert covered == list(range(17)) and plan.max_chunk == 3


def test_only_the_compact_reduce_scatter_orders_folds_after_sends() -> None:
    plan = RingPlan(4, 40, 2, Phase.REDUCE_SCATTER, compact=True)
    assert plan.fold_after_send
    # a fold overwrites the piece that the send of its own transfer reads: that is the hazard
    for t in range(plan.num_transfers):
        tr = plan.transfer(1, t)
        if tr.source is Source.OUTPUT:
            assert tr.send_start == tr.out_start


@pytest.mark.parametrize("kwargs", [dict(phase=Phase.ALLREDUCE, compact=True),
                                    dict(phase=Phase.ALLGATHER, compact=True),
                                    dict(phase=Phase.REDUCE_SCATTER, compact=True, count=10)])
def test_compact_needs_a_reduce_scatter_of_whole_blocks(kwargs: dict) -> None:
    args = dict(size=4, count=12, batches=2) | kwargs
    with pytest.raises(ValueError, match="compact"):
        RingPlan(**args)


def test_the_simulator_catches_a_wrong_output_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    real = RingPlan._out  # plant: a fold writes the piece of the other mini-batch

    def other_piece(self: RingPlan, batch: int, chunk: int, start: int) -> int:
        return real(self, (batch + 1) % self.batches, chunk, start)

    monkeypatch.setattr(RingPlan, "_out", other_piece)
    with pytest.raises(AssertionError, match="block wrong"):
        reduce_scatter(3, 2, 30, Op.SUM, compact=True, seed=1)


@pytest.mark.parametrize("phase", [Phase.REDUCE_SCATTER, Phase.ALLGATHER])
def test_issue_order_covers_single_phases(phase: Phase) -> None:
    plan = RingPlan(4, 100, 3, phase)
    order = issue_order(plan)
    assert sorted(t for kind, t in order if kind == "send") == list(range(plan.num_transfers))
    assert sorted(t for kind, t in order if kind == "fold") == list(range(plan.num_transfers))
