"""Where a GPU ring call is stuck, from its flags: ``stall.ring_stall`` and ``stall_error``;
and when it is: ``stall.ProgressClock`` (the timeout bounds the time without progress).

The watchdog reads this rank's two FULL flags (written by the previous rank after each copy into
our slot) and two FREE flags (written by the next rank after each fold of its slot) and asks
which operation of the call's issue order waits on a value those flags do not hold yet. The
expectations here replay the script against the waits of the ring protocol (see
mpiring/ring/pipeline.py): a send of transfer seq waits for ``free[seq % 2] >= seq - 2`` unless
``seq - 2 < FIRST_SEQ``; a fold of seq waits for ``full[seq % 2] >= seq``.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring.core.errors import MpiringTimeoutError
from mpiring.node.timeouts import ProgressClock
from mpiring.ring.schedule import FIRST_SEQ, RingPlan, Transfer, rank_script
from mpiring.ring.stall import ring_stall, stall_error

HINT = "the hint of the watchdog"


@st.composite
def plans(draw: st.DrawFn, min_size: int = 2) -> tuple[RingPlan, int]:
    """A ring plan and one of its ranks."""
    size = draw(st.integers(min_size, 8))
    plan = RingPlan(size, draw(st.integers(0, 5000)), draw(st.integers(1, 8)))
    return plan, draw(st.integers(0, size - 1))


# Large bases too: the counter grows forever (below the release value 0x3F3F...3F, ~2**61.98).
bases = st.one_of(st.integers(FIRST_SEQ, 12), st.integers(FIRST_SEQ, 2**60))


def need(is_send: bool, seq: int) -> tuple[str, int, int] | None:
    """The wait of one operation, as (flag, slot, value it must reach), or None when it waits for nothing."""
    if is_send:
        return None if seq - 2 < FIRST_SEQ else ("free", seq % 2, seq - 2)
    return ("full", seq % 2, seq)


def settled_flags(plan: RingPlan, rank: int, base: int, k: int) -> dict[str, list[int]]:
    """The flags a rank sees when every call before this one completed, the waits of the first ``k``
    operations of this call were satisfied, and nothing more was signalled."""
    # Calls before this one used seqs 1 .. base-1 and completed: each slot's flags hold its last use.
    last = [max((s for s in range(max(FIRST_SEQ, base - 2), base) if s % 2 == slot), default=0)
            for slot in range(2)]
    flags = {"full": list(last), "free": list(last)}
    for is_send, tr in rank_script(plan, rank)[:k]:
        wait = need(is_send, base + tr.index)
        if wait is not None:
            name, slot, value = wait
            flags[name][slot] = max(flags[name][slot], value)
    return flags


def first_blocked(plan: RingPlan, rank: int, base: int, flags: dict[str, list[int]],
                  start: int = 0) -> int | None:
    """Position in the script of the first operation at or after ``start`` that the flags do not let pass."""
    script = rank_script(plan, rank)
    for pos in range(start, len(script)):
        is_send, tr = script[pos]
        wait = need(is_send, base + tr.index)
        if wait is not None and flags[wait[0]][wait[1]] < wait[2]:
            return pos
    return None


def as_args(flags: dict[str, list[int]]) -> tuple[tuple[int, int], tuple[int, int]]:
    return tuple(flags["full"]), tuple(flags["free"])


def expected_stall(plan: RingPlan, rank: int, base: int,
                   pos: int | None) -> tuple[bool, Transfer, int] | None:
    """What ring_stall returns for the operation at script position ``pos`` (None: no stall)."""
    if pos is None:
        return None
    is_send, tr = rank_script(plan, rank)[pos]
    return is_send, tr, base + tr.index


# -- ring_stall --------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(plan_rank=plans(), base=bases, data=st.data())
def test_stall_after_a_prefix(plan_rank: tuple[RingPlan, int], base: int, data: st.DataObject) -> None:
    """Flags that satisfied exactly the first k operations: the stall is the first operation at or
    after k that they do not let pass, and there is one unless k covers the whole script (the last
    operation is the fold of the highest seq, which nothing before it signals)."""
    plan, rank = plan_rank
    script = rank_script(plan, rank)
    k = data.draw(st.integers(0, len(script)), label="k")
    flags = settled_flags(plan, rank, base, k)
    assert first_blocked(plan, rank, base, flags) in (None, *range(k, len(script))), "prefix not satisfied"
    pos = first_blocked(plan, rank, base, flags, start=k)
    assert (pos is None) == (k == len(script))
    got = ring_stall(plan, rank, base, *as_args(flags))
    assert got == expected_stall(plan, rank, base, pos), f"k={k} flags={flags}"


@settings(max_examples=300, deadline=None)
@given(plan_rank=plans(), base=bases, data=st.data())
def test_stall_for_arbitrary_flags(plan_rank: tuple[RingPlan, int], base: int, data: st.DataObject) -> None:
    """Any flag values, also ones no run produces (a fold's flag far ahead of a send's): the first
    operation in issue order whose wait they do not satisfy."""
    plan, rank = plan_rank
    top = base + plan.num_transfers
    flag = st.integers(max(0, base - 3), top + 1)
    flags = {"full": [data.draw(flag), data.draw(flag)], "free": [data.draw(flag), data.draw(flag)]}
    pos = first_blocked(plan, rank, base, flags)
    assert ring_stall(plan, rank, base, *as_args(flags)) == expected_stall(plan, rank, base, pos)


@settings(max_examples=200, deadline=None)
@given(plan_rank=plans(), base=bases)
def test_flags_at_zero(plan_rank: tuple[RingPlan, int], base: int) -> None:
    """Nothing signalled yet: the first fold, or an earlier send that reuses a slot, is stuck."""
    plan, rank = plan_rank
    script = rank_script(plan, rank)
    pos = next(i for i, (is_send, tr) in enumerate(script)
               if not is_send or base + tr.index - 2 >= FIRST_SEQ)
    assert ring_stall(plan, rank, base, (0, 0), (0, 0)) == expected_stall(plan, rank, base, pos)


@pytest.mark.parametrize(
    ("batches", "base", "is_send", "index"),
    [
        (1, 1, False, 0),  # send 0 (seq 1) is a first use; fold 0 waits for full[1] >= 1
        (2, 1, False, 0),  # sends 0 and 1 (seqs 1, 2) are first uses; then fold 0
        (1, 2, False, 0),  # send 0 (seq 2) is a first use; fold 0 waits for full[0] >= 2
        (2, 2, True, 1),  # send 1 (seq 3) reuses slot 1 after seq 1: waits for free[1] >= 1
        (1, 3, True, 0),  # send 0 (seq 3) reuses slot 1 after seq 1
        (3, 1000, True, 0),
    ],
)
def test_flags_at_zero_examples(batches: int, base: int, is_send: bool, index: int) -> None:
    """Worked by hand from the issue order send 0, [send 1,] fold 0, ..."""
    plan = RingPlan(4, 100, batches)
    got = ring_stall(plan, 1, base, (0, 0), (0, 0))
    assert got == (is_send, plan.transfer(1, index), base + index)


@settings(max_examples=100, deadline=None)
@given(plan_rank=plans(), base=bases)
def test_huge_flags_mean_no_stall(plan_rank: tuple[RingPlan, int], base: int) -> None:
    """Flags beyond every seq (the watchdog's release value among them) satisfy every wait."""
    plan, rank = plan_rank
    for huge in (base + plan.num_transfers, 0x3F3F3F3F3F3F3F3F):
        assert ring_stall(plan, rank, base, (huge, huge), (huge, huge)) is None


def test_one_short_of_the_last_fold() -> None:
    """Every flag at its final value except the full flag of the last transfer's slot, one short."""
    plan, rank, base = RingPlan(3, 60, 2), 2, 41
    last = base + plan.num_transfers - 1
    full = [last, last - 1] if last % 2 == 0 else [last - 1, last]
    full[last % 2] -= 1
    got = ring_stall(plan, rank, base, tuple(full), (last, last))
    assert got == (False, plan.transfer(rank, plan.num_transfers - 1), last)


@settings(max_examples=50, deadline=None)
@given(count=st.integers(0, 5000), batches=st.integers(1, 8), base=bases)
def test_a_ring_of_one_never_stalls(count: int, batches: int, base: int) -> None:
    """A ring of one copies its input: nothing waits for a peer, whatever the flags."""
    plan = RingPlan(1, count, batches)
    assert ring_stall(plan, 0, base, (0, 0), (0, 0)) is None
    err = stall_error(plan, 0, base, (0, 0), (0, 0), 3.0, HINT)
    assert err.peer is None and "no wait for a peer is pending" in str(err)


# -- stall_error -------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(plan_rank=plans(), base=bases, data=st.data(),
       timeout=st.sampled_from([0.5, 2.0, 300.0]))
def test_stall_error_names_peer_and_transfer(plan_rank: tuple[RingPlan, int], base: int,
                                             data: st.DataObject, timeout: float) -> None:
    """A blocked send waits for the next rank to free the slot, a blocked fold for the previous rank
    to fill it; the error names that rank, the transfer's seq, step and batch."""
    plan, rank = plan_rank
    script = rank_script(plan, rank)
    k = data.draw(st.integers(0, len(script) - 1), label="k")
    flags = settled_flags(plan, rank, base, k)
    is_send, tr, seq = expected_stall(plan, rank, base, first_blocked(plan, rank, base, flags, start=k))
    err = stall_error(plan, rank, base, *as_args(flags), timeout, HINT)
    assert type(err) is MpiringTimeoutError
    slot = seq % 2
    if is_send:
        peer, waiting = (rank + 1) % plan.size, f"to free slot {slot} (seq {seq - 2})"
    else:
        peer, waiting = (rank - 1) % plan.size, f"to fill slot {slot} (seq {seq})"
    phase = "reduce-scatter" if tr.step < plan.size - 1 else "all-gather"
    step = f"{tr.step + 1} of {2 * (plan.size - 1)} ({phase})"
    assert (err.rank, err.timeout, err.peer, err.algorithm, err.seq, err.step) == (
        rank, timeout, peer, "ring", seq, step)
    message = str(err)
    for fragment in (
        f"rank {rank} timed out after {timeout:g} s in the ring algorithm, step {step}, ",
        f"batch {tr.batch + 1} of {plan.batches}, {'send' if is_send else 'fold'} of transfer seq {seq}",
        f"waiting for rank {peer} {waiting}",
        HINT,
    ):
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_stall_error_full_message_for_a_send() -> None:
    """One error in full: rank 0 of 3, base 7, one batch; send 0 (seq 7) waits for free[1] >= 5."""
    plan = RingPlan(3, 30, 1)
    err = stall_error(plan, 0, 7, (0, 0), (0, 0), 1.5, HINT)
    assert str(err) == (
        "rank 0 timed out after 1.5 s in the ring algorithm, step 1 of 4 (reduce-scatter), batch 1 "
        "of 1, send of transfer seq 7, waiting for rank 1 to free slot 1 (seq 5); " + HINT)
    assert (err.peer, err.seq) == (1, 7)


def test_stall_error_full_message_for_a_fold() -> None:
    """Rank 0 of 3 in the all-gather: the previous rank (2) has not filled the slot."""
    plan, base = RingPlan(3, 30, 1), 7
    # transfers 0..3 have seqs 7..10; everything up to fold 2 (seq 9) passed, fold 3 (seq 10) waits
    err = stall_error(plan, 0, base, (8, 9), (8, 7), 1.5, HINT)
    assert str(err) == (
        "rank 0 timed out after 1.5 s in the ring algorithm, step 4 of 4 (all-gather), batch 1 of 1, "
        "fold of transfer seq 10, waiting for rank 2 to fill slot 0 (seq 10); " + HINT)
    assert (err.peer, err.seq, err.step) == (2, 10, "4 of 4 (all-gather)")


@settings(max_examples=100, deadline=None)
@given(plan_rank=plans(), base=bases)
def test_stall_error_without_a_stall(plan_rank: tuple[RingPlan, int], base: int) -> None:
    """All waits satisfied: the GPU itself is busy or hung; no peer is named."""
    plan, rank = plan_rank
    huge = base + plan.num_transfers
    err = stall_error(plan, rank, base, (huge, huge), (huge, huge), 2.0, HINT)
    assert type(err) is MpiringTimeoutError
    assert (err.rank, err.peer, err.algorithm, err.seq) == (rank, None, "ring", None)
    message = str(err)
    assert "no wait for a peer is pending" in message
    assert f"in the ring algorithm, transfers seq {base}..{huge - 1}," in message
    assert "waiting for rank" not in message
    assert message.startswith(f"rank {rank} timed out after 2 s")


def watch(moves: list[float], end: float, timeout: float, samples: int, poll: float,
          blind: bool = False) -> float | None:
    """A watcher as the GPU watchdog runs one: every ``poll`` s it looks when the clock says so
    (seeing how many ``moves`` happened so far, or nothing if ``blind``) and gives up on a look
    that saw nothing new once the clock expired; when it gave up, or None by ``end``."""
    clock = ProgressClock(timeout, 0.0, samples)
    for i in range(int(end / poll) + 1):
        now = i * poll
        if clock.due(now):
            seen = None if blind else sum(1 for m in moves if m <= now)
            if not clock.saw(seen, now) and clock.expired(now):
                return now
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0.01, 1.6), min_size=0, max_size=30), st.sampled_from([1, 2, 4, 8]))
def test_the_clock_gives_up_only_after_a_timeout_without_progress(gaps: list[float], samples: int) -> None:
    """Moves spaced by ``gaps`` (timeouts of 1), then none: the watcher never gives up within a
    timeout of a move (nor of the start), and gives up at most timeout * (1 + 1 / samples),
    plus a poll, after the last move it could see before."""
    timeout, poll = 1.0, 0.01
    moves = [sum(gaps[:i + 1]) for i in range(len(gaps))]
    end = (moves[-1] if moves else 0.0) + 3 * timeout
    fired = watch(moves, end, timeout, samples, poll)
    assert fired is not None, "a stall of three timeouts was never noticed"
    last = max([0.0, *(m for m in moves if m <= fired)])
    assert fired - last > timeout, f"gave up {fired - last:.3f} s after a move"
    latest = last + timeout * (1 + 1 / samples) + 2 * poll
    assert fired <= latest, f"gave up {fired - last:.3f} s after the last move"


def test_a_call_that_keeps_moving_is_never_given_up() -> None:
    """A move every 0.9 timeouts for 50 timeouts: never given up (the whole-call bound of
    before would have given up at 1)."""
    assert watch([0.9 * k for k in range(1, 56)], 50.0, 1.0, 4, 0.01) is None


def test_a_watcher_that_sees_nothing_gives_up_one_timeout_after_the_start() -> None:
    """Nothing to see (the event-signalled ring; flags that cannot be read): bounded as a whole."""
    fired = watch([0.5, 1.0, 1.5], 10.0, 1.0, 4, 0.01, blind=True)
    assert fired is not None and 1.0 < fired <= 1.02
