"""Host transport: numpy receive slots and counters in node shared memory.

It runs the same pipeline and protocol as the CUDA IPC transport, doing each enqueued
operation at once, so CI without a GPU exercises the real schedule, sequence numbers and
slot reuse across processes. It also serves users who allreduce host arrays.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...node.signals import FREE, FULL, PAYLOAD_ALIGN, SharedBoard
from ...node.timeouts import TimeoutPolicy
from ..schedule import Source
from .base import CallBuffers, RingTransport


def slot_bytes_for(asked: int) -> int:
    """The slot size used for ``asked`` bytes: whole pages, at least one."""
    return asked - asked % PAYLOAD_ALIGN or PAYLOAD_ALIGN


class HostTransport(RingTransport):
    """Two receive slots of ``slot_bytes`` per rank in the payload of a shared-memory board
    (borrowed: the communicator owns and closes it), of at least ``2 * slot_bytes``.
    ``names[p]``: the communicator rank at place ``p`` of the board, for errors."""

    def __init__(self, board: SharedBoard, slot_bytes: int, timeouts: TimeoutPolicy,
                 names: Sequence[int] | None = None) -> None:
        self.rank, self.size = board.rank, board.size
        self.slot_bytes = slot_bytes_for(slot_bytes)
        if board.payload_bytes < 2 * self.slot_bytes:
            raise ValueError("the board's payload cannot hold two slots")
        self.board = board
        self.next = (self.rank + 1) % self.size
        self.prev = (self.rank - 1) % self.size
        self.names = list(names) if names is not None else list(range(self.size))
        self.waiter = timeouts.waiter(self.names[self.rank])
        self._views: dict[np.dtype, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        self._call: CallBuffers | None = None

    def slot_capacity(self, dtype: np.dtype) -> int:
        return self.slot_bytes // np.dtype(dtype).itemsize

    def _slots(self, dtype: np.dtype) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(own slots, next rank's slots) viewed as ``dtype``; made once per dtype."""
        views = self._views.get(dtype)
        if views is None:
            def split(payload: np.ndarray) -> list[np.ndarray]:
                b = self.slot_bytes
                return [payload[k * b:(k + 1) * b].view(dtype) for k in range(2)]
            views = (split(self.board.payloads[self.rank]), split(self.board.payloads[self.next]))
            self._views[dtype] = views
        return views

    def begin(self, call: CallBuffers) -> None:
        self._call = call
        self._input = call.recv if call.in_place else call.send
        self._own, self._peer = self._slots(call.dtype)

    def end(self) -> None:
        self._call = None

    def wait_slot_free(self, slot: int, seq: int) -> None:
        self.waiter.counter_at_least(
            self.board, self.next, FREE[slot], seq,
            lambda: f"rank {self.names[self.next]} to free slot {slot} (seq {seq})",
            peer=self.names[self.next],
        )

    def send(self, slot: int, source: Source, start: int, count: int) -> None:
        src = self._input if source is Source.INPUT else self._call.recv
        np.copyto(self._peer[slot][:count], src[start:start + count])

    def post_slot_full(self, slot: int, seq: int) -> None:
        self.board.post(self.next, FULL[slot], seq)

    def wait_slot_full(self, slot: int, seq: int) -> None:
        self.waiter.counter_at_least(
            self.board, self.rank, FULL[slot], seq,
            lambda: f"rank {self.names[self.prev]} to fill slot {slot} (seq {seq})",
            peer=self.names[self.prev],
        )

    def fold(self, slot: int, start: int, count: int, reduce: bool, out_start: int) -> None:
        out = self._call.recv[out_start:out_start + count]
        data = self._own[slot][:count]
        if reduce:
            self._call.op.ufunc(self._input[start:start + count], data, out=out)
        else:
            np.copyto(out, data)

    def post_slot_free(self, slot: int, seq: int) -> None:
        self.board.post(self.rank, FREE[slot], seq)

    def copy_input(self) -> None:
        np.copyto(self._call.recv, self._call.send)

    def close(self, abandon: bool = False) -> None:
        """Drop the views of the board (its owner closes it) and what a failed call left bound."""
        self._views.clear()
        self._own = self._peer = None
        self._call = self._input = None
