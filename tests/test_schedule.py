"""The pure ring schedule: chunking, transfers, issue order, batch choice, and a protocol model."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import reduce

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring.core.ops import Op
from mpiring.ring.schedule import (
    FIRST_SEQ,
    SLOTS,
    RingPlan,
    Source,
    Transfer,
    choose_batches,
    chunk_bounds,
    default_batches,
    issue_order,
)

POISON = np.int64(-(2**62) + 12345)  # never a result of the small inputs below
OPS = list(Op)
SIZES = range(1, 7)
BATCHES = range(1, 6)

MIB = 1 << 20


def counts_for(n: int, b: int) -> list[int]:
    """Every count up to two full rounds of chunks and a few more, plus some that divide nothing."""
    return sorted(set(range(2 * n * b + 4)) | {97, 1000 + n * b + 1, 4099})


def make_inputs(n: int, count: int, op: Op, seed: int) -> list[np.ndarray]:
    """One int64 input per rank; products use small non-zero factors so nothing hides."""
    rng = np.random.default_rng(seed)
    if op is Op.PROD:
        return [rng.choice(np.array([-2, -1, 1, 2, 3]), size=count) for _ in range(n)]
    return [rng.integers(-1000, 1000, size=count, dtype=np.int64) for _ in range(n)]


def expected(inputs: list[np.ndarray], op: Op) -> np.ndarray:
    """The true reduction of every rank's input."""
    return reduce(op.ufunc, inputs)


def simulate(plan: RingPlan, inputs: list[np.ndarray], op: Op, in_place: bool) -> list[np.ndarray]:
    """Play ``plan`` transfer by transfer for all ranks: everyone sends, then everyone folds."""
    n = plan.size
    outs = [x.copy() if in_place else np.full_like(x, POISON) for x in inputs]
    ins = outs if in_place else inputs
    if plan.num_transfers == 0 and not in_place:  # a ring of one copies its input
        outs[0][:] = inputs[0]
    for t in range(plan.num_transfers):
        trs = [plan.transfer(r, t) for r in range(n)]
        slots = [np.full(plan.max_chunk, POISON) for _ in range(n)]
        for r, tr in enumerate(trs):
            dst = (r + 1) % n
            assert tr.send_count == trs[dst].recv_count <= plan.max_chunk
            src = ins[r] if tr.source is Source.INPUT else outs[r]
            slots[dst][: tr.send_count] = src[tr.send_start : tr.send_start + tr.send_count]
        for r, tr in enumerate(trs):
            part = slice(tr.recv_start, tr.recv_start + tr.recv_count)
            assert tr.out_start == tr.recv_start  # only a compact plan moves the output
            data = slots[r][: tr.recv_count]
            outs[r][part] = op.ufunc(ins[r][part], data) if tr.reduce else data
    return outs


def check_simulation(n: int, b: int, count: int, op: Op, in_place: bool, seed: int = 0) -> None:
    """Every rank ends with the exact reduction, element by element."""
    plan = RingPlan(n, count, b)
    inputs = make_inputs(n, count, op, seed)
    want = expected(inputs, op)
    originals = [x.copy() for x in inputs]
    outs = simulate(plan, inputs, op, in_place)
    for r, out in enumerate(outs):
        bad = np.flatnonzero(out != want)
        assert bad.size == 0, (
            f"n={n} b={b} count={count} {op.name} in_place={in_place}: rank {r} wrong at "
            f"{bad[:10].tolist()} (got {out[bad[:10]].tolist()}, want {want[bad[:10]].tolist()})"
        )
        if not in_place:
            np.testing.assert_array_equal(inputs[r], originals[r], err_msg="input was modified")


# -- the simulator -----------------------------------------------------------------------


@pytest.mark.parametrize("b", BATCHES)
@pytest.mark.parametrize("n", SIZES)
def test_simulated_ring_is_exact(n: int, b: int) -> None:
    """Exhaustive: every size, batch count, op and small count, out of place and in place."""
    for count in counts_for(n, b):
        for op in OPS:
            for in_place in (False, True):
                check_simulation(n, b, count, op, in_place, seed=count)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 16),
    b=st.integers(1, 16),
    count=st.integers(0, 10**5),
    op=st.sampled_from(OPS),
    in_place=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_simulated_ring_property(n: int, b: int, count: int, op: Op, in_place: bool, seed: int) -> None:
    """Beyond the exhaustive range: big rings, many batches, counts up to 10^5."""
    check_simulation(n, b, count, op, in_place, seed)


def test_simulator_catches_a_wrong_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator must fail when the schedule sends the wrong chunk."""
    real = RingPlan.transfer

    def off_by_one(self: RingPlan, rank: int, index: int) -> Transfer:
        tr = real(self, rank, index)
        if index == self.num_transfers - 1 and rank == 0:
            return Transfer(**{**tr.__dict__, "reduce": not tr.reduce})
        return tr

    monkeypatch.setattr(RingPlan, "transfer", off_by_one)
    with pytest.raises(AssertionError, match="rank 0 wrong at"):
        check_simulation(3, 2, 60, Op.SUM, False)


# -- chunking ----------------------------------------------------------------------------


@pytest.mark.parametrize("parts", [1, 2, 3, 5, 7, 16, 64])
def test_chunk_bounds_partition(parts: int) -> None:
    """Chunks are contiguous, cover range(count) exactly once, and differ in size by at most one."""
    for count in [*range(0, 3 * parts + 2), 1000, 10**5 + 7]:
        bounds = chunk_bounds(count, parts)
        assert len(bounds) == parts
        assert bounds[0][0] == 0 and bounds[-1][1] == count
        for (_, stop), (start, _) in zip(bounds[:-1], bounds[1:], strict=True):
            assert stop == start
        sizes = [stop - start for start, stop in bounds]
        assert min(sizes) >= 0 and max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True), "larger chunks come first"
        assert sum(sizes) == count


@pytest.mark.parametrize("b", BATCHES)
@pytest.mark.parametrize("n", SIZES)
def test_plan_chunks_cover_every_element_once(n: int, b: int) -> None:
    """plan.chunk(batch, j) partitions the message; max_chunk is the largest chunk."""
    for count in counts_for(n, b):
        plan = RingPlan(n, count, b)
        covered = np.zeros(count, dtype=np.int64)
        sizes = []
        for m in range(b):
            for j in range(n):
                start, size = plan.chunk(m, j)
                assert plan.chunk(m, j - n) == (start, size), "ring chunk indices wrap around"
                covered[start : start + size] += 1
                sizes.append(size)
        assert (covered == 1).all()
        assert max(sizes) == plan.max_chunk
        assert max(sizes) - min(sizes) <= 1


def ring_chunk_of(plan: RingPlan, batch: int, start: int, count: int) -> int:
    """The ring chunk index of a (start, count) range inside ``batch`` (non-empty chunks only)."""
    hits = [j for j in range(plan.size) if plan.chunk(batch, j) == (start, count)]
    assert len(hits) == 1
    return hits[0]


@pytest.mark.parametrize("b", BATCHES)
@pytest.mark.parametrize("n", SIZES)
def test_transfer_structure(n: int, b: int) -> None:
    """Sends meet receives, steps and batches are step-major, and dependencies are the right folds."""
    for count in counts_for(n, b):
        plan = RingPlan(n, count, b)
        assert plan.steps == 2 * (n - 1) and plan.num_transfers == plan.steps * b
        per_rank = [plan.transfers(r) for r in range(n)]
        all_nonempty = count >= n * b
        for r, trs in enumerate(per_rank):
            nxt = per_rank[(r + 1) % n]
            for t, tr in enumerate(trs):
                assert (tr.index, tr.step, tr.batch) == (t, t // b, t % b)
                assert (tr.send_start, tr.send_count) == (nxt[t].recv_start, nxt[t].recv_count)
                assert tr.reduce == (tr.step < n - 1)
                if tr.step == 0:
                    assert tr.source is Source.INPUT and tr.depends_on is None
                else:
                    dep = trs[tr.depends_on]
                    assert tr.source is Source.OUTPUT
                    assert (dep.batch, dep.step) == (tr.batch, tr.step - 1)
                    assert (tr.send_start, tr.send_count) == (dep.recv_start, dep.recv_count)
                    if all_nonempty:  # ranges are unambiguous: the latest fold of that chunk
                        writers = [u for u in range(t) if (trs[u].recv_start, trs[u].recv_count)
                                   == (tr.send_start, tr.send_count)]
                        assert writers[-1] == tr.depends_on
            if all_nonempty:
                for m in range(b):
                    mine = [tr for tr in trs if tr.batch == m]
                    scatter = [ring_chunk_of(plan, m, tr.recv_start, tr.recv_count)
                               for tr in mine if tr.reduce]
                    gather = [ring_chunk_of(plan, m, tr.recv_start, tr.recv_count)
                              for tr in mine if not tr.reduce]
                    assert sorted(scatter) == sorted(set(range(n)) - {r})
                    owned = (r + 1) % n
                    assert not scatter or scatter[-1] == owned, "last fold finishes the owned chunk"
                    assert sorted(gather) == sorted(set(range(n)) - {owned})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": 0, "count": 5, "batches": 1}, "ring size must be >= 1, got 0"),
        ({"size": 2, "count": -1, "batches": 1}, "element count must be >= 0, got -1"),
        ({"size": 2, "count": 5, "batches": 0}, "mini-batch count must be >= 1, got 0"),
    ],
)
def test_plan_rejects_bad_shapes(kwargs: dict[str, int], message: str) -> None:
    """A plan with no ranks, a negative count or no batches names the problem."""
    with pytest.raises(ValueError, match=message):
        RingPlan(**kwargs)


@pytest.mark.parametrize("rank", [-1, 3])
def test_transfers_reject_outside_rank(rank: int) -> None:
    """Asking for a rank outside the ring names it."""
    with pytest.raises(ValueError, match=f"rank {rank} is outside a ring of 3"):
        RingPlan(3, 10, 1).transfers(rank)


# -- issue order -------------------------------------------------------------------------


def check_issue_order(plan: RingPlan) -> None:
    """Every send and fold once, in order; sends after their source fold, at most one ahead."""
    order = issue_order(plan)
    total, b = plan.num_transfers, plan.batches
    sends = [t for kind, t in order if kind == "send"]
    folds = [t for kind, t in order if kind == "fold"]
    assert {kind for kind, _ in order} <= {"send", "fold"}
    assert sends == list(range(total)) and folds == list(range(total))
    position = {item: i for i, item in enumerate(order)}
    for t in range(total):
        dep = plan.transfer(0, t).depends_on
        if dep is not None:
            assert position[("fold", dep)] < position[("send", t)], f"send {t} before fold {dep}"
        if t >= 2:
            assert position[("fold", t - 2)] < position[("send", t)], f"send {t} is two ahead"
        assert position[("send", t)] < position[("fold", t)], "a fold never precedes its own send"
        if t + 1 < total:  # the overlap that batching buys: next send before this fold
            assert (position[("send", t + 1)] < position[("fold", t)]) == (b >= 2)


@pytest.mark.parametrize("b", range(1, 9))
@pytest.mark.parametrize("n", SIZES)
def test_issue_order(n: int, b: int) -> None:
    """Issue order rules for every small ring."""
    check_issue_order(RingPlan(n, 10 * n * b, b))


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 16), b=st.integers(1, 16), count=st.integers(0, 10**5))
def test_issue_order_property(n: int, b: int, count: int) -> None:
    """Issue order rules for big rings."""
    check_issue_order(RingPlan(n, count, b))


# -- batch choice ------------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(
    count=st.integers(0, 10**7),
    size=st.integers(1, 16),
    slot=st.integers(1, 10**6),
    requested=st.none() | st.integers(1, 64),
    default=st.integers(1, 8),
)
def test_choose_batches_property(count: int, size: int, slot: int, requested: int | None,
                                 default: int) -> None:
    """The result fits a slot, honours a request, and is no bigger than it must be."""
    nb = choose_batches(count, size, slot, requested, default)
    assert nb >= 1
    plan = RingPlan(size, count, nb)
    assert plan.max_chunk <= slot
    needed = max(1, -(-count // (size * slot)))
    assert nb >= needed
    if requested is not None:
        assert nb == max(requested, needed)
    else:
        assert nb <= max(default, needed)
        if count:
            assert (nb - 1) * size < count, "no mini-batch is empty"
        if count >= size * default and needed <= default:
            assert nb == default


@pytest.mark.parametrize(
    ("args", "want"),
    [
        ((0, 4, 100, None, 4), 1),
        ((0, 4, 100, 3, 4), 3),
        ((3, 4, 100, None, 4), 1),  # fewer elements than ranks: one mini-batch
        ((16, 4, 100, None, 8), 4),  # lowered: four elements per rank
        ((1000, 4, 100, None, 1), 3),  # raised: 1000 / (4 * 100) chunks must fit a slot
        ((1000, 4, 100, 1, 1), 3),
        ((1000, 4, 100, 5, 1), 5),
        ((800, 4, 100, None, 1), 2),  # exactly full slots
        ((801, 4, 100, None, 1), 3),
    ],
)
def test_choose_batches_examples(args: tuple, want: int) -> None:
    """Hand-checked batch counts."""
    assert choose_batches(*args) == want


def test_choose_batches_rejects_bad_arguments() -> None:
    """Empty slots and non-positive requests name the problem."""
    with pytest.raises(ValueError, match="at least one element, got 0"):
        choose_batches(10, 2, 0, None, 1)
    with pytest.raises(ValueError, match="mini-batch count must be >= 1, got 0"):
        choose_batches(10, 2, 5, 0, 1)
    with pytest.raises(ValueError, match="mini-batch count must be >= 1, got -2"):
        choose_batches(10, 2, 5, None, -2)


@pytest.mark.parametrize("per_rank, want", [(0, 1), (1, 1), (4096, 1), (32 * MIB - 1, 1), (32 * MIB, 2),
                                             (1 << 30, 2)])
@pytest.mark.parametrize("size", [1, 2, 4, 8])
def test_default_batches_split_from_32_mib_per_rank(per_rank: int, size: int, want: int) -> None:
    """Below 32 MiB per rank a message runs as one mini-batch, from there as two (extra
    mini-batches pay only for large messages: the measurement is in default_batches)."""
    assert default_batches(per_rank * size, size) == want


@settings(max_examples=300, deadline=None)
@given(a=st.integers(0, 1 << 40), b=st.integers(0, 1 << 40), size=st.integers(1, 16))
def test_default_batches_monotone(a: int, b: int, size: int) -> None:
    """Bigger messages never get fewer batches, and never absurdly many."""
    lo, hi = sorted((a, b))
    assert 1 <= default_batches(lo, size) <= default_batches(hi, size) <= 16


@pytest.mark.parametrize("nbytes", [0, 1 << 20, 1 << 30])
def test_default_batches_size_zero(nbytes: int) -> None:
    """A ring size of zero is treated as one rank."""
    assert default_batches(nbytes, 0) == default_batches(nbytes, 1)


# -- protocol model ----------------------------------------------------------------------


class Deadlock(AssertionError):
    """No rank can make progress while some still have work."""


class Overwrite(AssertionError):
    """A slot was written before its reader folded the previous use."""


OrderFn = Callable[[RingPlan], list[tuple[str, int]]]


def play(
    n: int,
    plans: list[RingPlan],
    rng: random.Random,
    order: OrderFn = issue_order,
    writer_waits: bool = True,
) -> None:
    """Run consecutive calls on ``n`` model ranks with pipeline.py's sequence and slot rules.

    Ranks advance in random bursts; sends wait until the next rank freed use ``seq - 2`` of the
    slot, folds until the slot is full with use ``seq``. Data really moves, so results are checked.
    """
    full = [[0] * SLOTS for _ in range(n)]  # FULL counters in each rank's row
    free = [[0] * SLOTS for _ in range(n)]
    slot_use: list[list[tuple[int, bool] | None]] = [[None] * SLOTS for _ in range(n)]
    slot_data: list[list[np.ndarray | None]] = [[None] * SLOTS for _ in range(n)]
    programs: list[list[tuple[int, str, int, int]]] = [[] for _ in range(n)]
    base = FIRST_SEQ
    inputs, outputs = [], []
    for c, plan in enumerate(plans):
        assert plan.size == n
        for r in range(n):
            programs[r] += [(c, kind, t, base + t) for kind, t in order(plan)]
        base += plan.num_transfers
        xs = make_inputs(n, plan.count, Op.SUM, seed=c)
        inputs.append(xs)
        outputs.append([np.full_like(x, POISON) for x in xs])
    pc = [0] * n

    def enabled(r: int) -> bool:
        if pc[r] == len(programs[r]):
            return False
        _, kind, _, seq = programs[r][pc[r]]
        slot = seq % SLOTS
        if kind == "send":
            return not writer_waits or seq - SLOTS < FIRST_SEQ or free[(r + 1) % n][slot] >= seq - SLOTS
        return full[r][slot] >= seq

    def step(r: int) -> None:
        c, kind, t, seq = programs[r][pc[r]]
        plan, slot = plans[c], seq % SLOTS
        tr = plan.transfer(r, t)
        if kind == "send":
            dst = (r + 1) % n
            held = slot_use[dst][slot]
            if held is not None and not held[1]:
                raise Overwrite(f"rank {r} overwrote use {held[0]} of rank {dst}'s slot {slot} with {seq}")
            src = inputs[c][r] if tr.source is Source.INPUT else outputs[c][r]
            slot_data[dst][slot] = src[tr.send_start : tr.send_start + tr.send_count].copy()
            slot_use[dst][slot] = (seq, False)
            full[dst][slot] = seq
        else:
            assert slot_use[r][slot] == (seq, False), f"rank {r} folds {slot_use[r][slot]}, not {seq}"
            data = slot_data[r][slot]
            assert data is not None and data.size == tr.recv_count
            part = slice(tr.recv_start, tr.recv_start + tr.recv_count)
            out = outputs[c][r]
            out[part] = inputs[c][r][part] + data if tr.reduce else data
            slot_use[r][slot] = (seq, True)
            free[r][slot] = seq
        pc[r] += 1

    while any(pc[r] < len(programs[r]) for r in range(n)):
        ready = [r for r in range(n) if enabled(r)]
        if not ready:
            raise Deadlock(f"no rank can move; program counters {pc}")
        r = rng.choice(ready)
        for _ in range(rng.randint(1, 6)):
            step(r)
            if not enabled(r):
                break
    for c in range(len(plans)):
        want = expected(inputs[c], Op.SUM)
        for r in range(n):
            np.testing.assert_array_equal(outputs[c][r], want, err_msg=f"call {c} rank {r}")


@pytest.mark.parametrize("b", range(1, 7))
@pytest.mark.parametrize("n", range(2, 7))
def test_protocol_model(n: int, b: int) -> None:
    """Random interleavings of back-to-back calls never deadlock nor overwrite a busy slot."""
    for seed in range(25):
        rng = random.Random(seed * 1000 + n * 10 + b)
        plans = [RingPlan(n, rng.randint(0, 5 * n * b), rng.choice([b, 1, b + 1]))
                 for _ in range(3)]
        plans[0] = RingPlan(n, rng.randint(n * b, 5 * n * b), b)
        play(n, plans, rng)


def sends_two_ahead(plan: RingPlan) -> list[tuple[str, int]]:
    """A greedy order that issues send t+2 before fold t."""
    total = plan.num_transfers
    order = [("send", t) for t in range(min(2, total))]
    for t in range(total):
        if t + 2 < total:
            order.append(("send", t + 2))
        order.append(("fold", t))
    return order


def test_model_detects_lookahead_two_deadlock() -> None:
    """The model finds the deadlock issue_order's docstring warns about."""
    with pytest.raises(Deadlock):
        play(3, [RingPlan(3, 300, 4)], random.Random(1), order=sends_two_ahead)


def test_model_detects_overwrite_without_free_wait() -> None:
    """Without the writer's wait, some interleaving overwrites a slot before it is folded."""
    caught = 0
    for seed in range(40):
        try:
            play(3, [RingPlan(3, 300, 2)], random.Random(seed), writer_waits=False)
        except Overwrite:
            caught += 1
    assert caught > 0
