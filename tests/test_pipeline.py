"""RingPipeline's calls into a transport: sequence numbers, slots, waits and posts, in issue order."""

from __future__ import annotations

import numpy as np
import pytest

from mpiring.core.errors import MpiringTimeoutError
from mpiring.core.ops import Op
from mpiring.ring.pipeline import RingPipeline
from mpiring.ring.schedule import FIRST_SEQ, SLOTS, Phase, RingPlan, Source, issue_order
from mpiring.ring.transports.base import CallBuffers, RingTransport


class RecordingTransport(RingTransport):
    """Records every call the pipeline makes; moves no data."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size, self.slot_bytes = rank, size, 4096
        self.calls: list[tuple] = []

    def begin(self, call: CallBuffers) -> None:
        self.calls.append(("begin", call.in_place))

    def end(self) -> None:
        self.calls.append(("end",))

    def wait_slot_free(self, slot: int, seq: int) -> None:
        self.calls.append(("wait_free", slot, seq))

    def send(self, slot: int, source: Source, start: int, count: int) -> None:
        self.calls.append(("send", slot, source, start, count))

    def post_slot_full(self, slot: int, seq: int) -> None:
        self.calls.append(("post_full", slot, seq))

    def wait_slot_full(self, slot: int, seq: int) -> None:
        self.calls.append(("wait_full", slot, seq))

    def fold(self, slot: int, start: int, count: int, reduce: bool, out_start: int) -> None:
        self.calls.append(("fold", slot, start, count, reduce, out_start))

    def mark_sent(self, index: int) -> None:
        self.calls.append(("mark_sent", index))

    def wait_sent(self, index: int) -> None:
        self.calls.append(("wait_sent", index))

    def post_slot_free(self, slot: int, seq: int) -> None:
        self.calls.append(("post_free", slot, seq))

    def copy_input(self) -> None:
        self.calls.append(("copy_input",))

    def slot_capacity(self, dtype: np.dtype) -> int:
        return self.slot_bytes // np.dtype(dtype).itemsize

    def close(self) -> None:
        self.calls.append(("close",))


def call_buffers(count: int, in_place: bool) -> CallBuffers:
    """Buffers of one float64 call."""
    recv = np.zeros(count)
    return CallBuffers(None if in_place else np.ones(count), recv, count, recv.dtype, Op.SUM)


def expected_calls(plan: RingPlan, rank: int, base: int, in_place: bool) -> list[tuple]:
    """The transport calls pipeline.py's rules demand for one run starting at ``base``."""
    calls: list[tuple] = [("begin", in_place)]
    for kind, t in issue_order(plan):
        tr = plan.transfer(rank, t)
        seq = base + t
        slot = seq % SLOTS
        if kind == "send":
            if seq - SLOTS >= FIRST_SEQ:
                calls.append(("wait_free", slot, seq - SLOTS))
            calls.append(("send", slot, tr.source, tr.send_start, tr.send_count))
            if plan.compact:
                calls.append(("mark_sent", t))
            calls.append(("post_full", slot, seq))
        else:
            calls.append(("wait_full", slot, seq))
            if plan.compact:
                calls.append(("wait_sent", t))
            calls.append(("fold", slot, tr.recv_start, tr.recv_count, tr.reduce, tr.out_start))
            calls.append(("post_free", slot, seq))
    return [*calls, ("end",)]


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize(("size", "rank"), [(2, 0), (2, 1), (3, 2), (4, 1), (6, 5)])
def test_pipeline_follows_protocol_across_calls(size: int, rank: int, in_place: bool) -> None:
    """Three runs back to back: sequence numbers continue, slots alternate, first uses never wait."""
    link = RecordingTransport(rank, size)
    pipe = RingPipeline(link)
    assert pipe.next_seq == FIRST_SEQ
    for count, batches in [(37, 1), (1000, 3), (5, 2)]:
        plan = RingPlan(size, count, batches)
        base = pipe.next_seq
        link.calls.clear()
        pipe.run(plan, call_buffers(count, in_place))
        assert link.calls == expected_calls(plan, rank, base, in_place)
        assert pipe.next_seq == base + plan.num_transfers
    waits = [c for c in expected_calls(RingPlan(size, 1000, 3), rank, FIRST_SEQ, in_place)
             if c[0] == "wait_free"]
    assert waits and waits[0] == ("wait_free", 1, 1), "the third transfer is the first to wait"


@pytest.mark.parametrize(("in_place", "want"), [(False, ["begin", "copy_input", "end"]),
                                                 (True, ["begin", "end"])])
def test_pipeline_ring_of_one(in_place: bool, want: list[str]) -> None:
    """A ring of one copies the input (out of place only) and uses no sequence numbers."""
    link = RecordingTransport(0, 1)
    pipe = RingPipeline(link)
    pipe.run(RingPlan(1, 100, 3), call_buffers(100, in_place))
    assert [c[0] for c in link.calls] == want
    assert pipe.next_seq == FIRST_SEQ


@pytest.mark.parametrize("phase", [Phase.REDUCE_SCATTER, Phase.ALLGATHER])
@pytest.mark.parametrize(("size", "rank"), [(2, 1), (4, 2)])
def test_pipeline_runs_single_phases(size: int, rank: int, phase: Phase) -> None:
    """A phase is a plan like any other: its own steps, sequence numbers continuing."""
    link = RecordingTransport(rank, size)
    pipe = RingPipeline(link)
    plan = RingPlan(size, 60, 2, phase)
    pipe.run(plan, call_buffers(60, True))
    assert link.calls == expected_calls(plan, rank, FIRST_SEQ, True)
    assert pipe.next_seq == FIRST_SEQ + 2 * (size - 1)


def test_compact_plan_orders_every_fold_after_its_own_send() -> None:
    """Rule 4: in a compact reduce-scatter each fold t waits for send t, which came before it."""
    link = RecordingTransport(1, 4)
    plan = RingPlan(4, 64, 2, Phase.REDUCE_SCATTER, compact=True)
    RingPipeline(link).run(plan, call_buffers(16, False))
    assert link.calls == expected_calls(plan, 1, FIRST_SEQ, False)
    names = [c[:2] for c in link.calls]
    for t in range(plan.num_transfers):
        assert names.index(("mark_sent", t)) < names.index(("wait_sent", t))


class StuckTransport(RecordingTransport):
    """Times out at the ``stuck``-th wait (slot free or slot full) of a call."""

    def __init__(self, rank: int, size: int, stuck: int) -> None:
        super().__init__(rank, size)
        self.stuck, self.waits = stuck, 0

    def _wait(self) -> None:
        self.waits += 1
        if self.waits == self.stuck:
            raise MpiringTimeoutError(self.rank, 1.0, "rank 9 to do something", peer=9)

    def wait_slot_free(self, slot: int, seq: int) -> None:
        self._wait()

    def wait_slot_full(self, slot: int, seq: int) -> None:
        self._wait()


@pytest.mark.parametrize(("size", "rank"), [(2, 1), (4, 2)])
def test_a_timed_out_wait_is_located_at_its_transfer(size: int, rank: int) -> None:
    """A wait that times out inside a ring call raises with where it happened: the transfer's
    step and phase, batch, and whether its send (waiting for a free slot) or its fold (waiting
    for a full one) was stuck, at the transfer's sequence number; every wait of the call."""
    plan = RingPlan(size, 1000, 3)
    script = [c for c in expected_calls(plan, rank, FIRST_SEQ, False) if c[0] in ("wait_free", "wait_full")]
    by_seq = {FIRST_SEQ + t: plan.transfer(rank, t) for t in range(plan.num_transfers)}
    for k, (kind, _slot, waited) in enumerate(script, 1):
        seq = waited + SLOTS if kind == "wait_free" else waited  # a send waits for the slot's last use
        tr = by_seq[seq]
        with pytest.raises(MpiringTimeoutError) as caught:
            RingPipeline(StuckTransport(rank, size, k)).run(plan, call_buffers(1000, False))
        err = caught.value
        phase = "reduce-scatter" if tr.reduce else "all-gather"
        step = f"{tr.step + 1} of {plan.steps} ({phase})"
        assert (err.algorithm, err.step, err.seq, err.peer) == ("ring", step, seq, 9)
        assert (f"in the ring algorithm, step {step}, batch {tr.batch + 1} of {plan.batches}, "
                f"{'send' if kind == 'wait_free' else 'fold'} of transfer seq {seq}") in str(err)
