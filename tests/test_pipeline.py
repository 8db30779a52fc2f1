"""RingPipeline's calls into a transport: sequence numbers, slots, waits and posts, in issue order."""

from __future__ import annotations

import numpy as np
import pytest

from mpiring.ops import Op
from mpiring.pipeline import RingPipeline
from mpiring.schedule import FIRST_SEQ, SLOTS, RingPlan, Source, issue_order
from mpiring.transports.base import CallBuffers, RingTransport


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

    def fold(self, slot: int, start: int, count: int, reduce: bool) -> None:
        self.calls.append(("fold", slot, start, count, reduce))

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
            calls.append(("post_full", slot, seq))
        else:
            calls.append(("wait_full", slot, seq))
            calls.append(("fold", slot, tr.recv_start, tr.recv_count, tr.reduce))
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
