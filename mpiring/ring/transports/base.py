"""The seam between the ring pipeline and the memory it moves.

A transport speaks in asynchronous terms, like a CUDA stream: every method *enqueues* work
and may return before it ran. A transport on streams (CUDA IPC) enqueues on a copy stream
and a fold stream; the host transport simply does the work at once. Either way the pipeline
(``mpiring.ring.pipeline``) owns the order of calls, and the transport guarantees only this:

* work enqueued by ``send``/``post_slot_full``/``wait_slot_free`` runs in call order (the
  "copy queue"), and so does work enqueued by ``fold``/``post_slot_free``/``wait_slot_full``
  (the "fold queue");
* ``send`` runs after every ``fold`` enqueued before it (it may read a folded chunk);
* a ``fold`` preceded by ``wait_sent(t)`` runs after the send of transfer ``t`` (compact plans);
* ``wait_*`` returns once the matching ``post_*`` of the peer has been *enqueued* (host
  order), and makes its queue wait until that posted work has *run* (device order).

Signals carry sequence numbers: slot ``seq % 2`` holds the data of use ``seq``. A slot use is
"full" when the previous rank's copy into it has run, and "free" when this rank's fold of it
has run. Counters only grow, so a stale signal can never be read as a fresh one, between
steps or between calls.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.ops import Op
from ..schedule import Source


@dataclass(frozen=True)
class CallBuffers:
    """The buffers of one allreduce call, as the transport's own array type, flat and typed."""

    send: Any
    recv: Any
    count: int
    dtype: np.dtype
    op: Op
    stream: Any = None  # the caller's stream (device transports), None on the host

    @property
    def in_place(self) -> bool:
        return self.send is None


class RingTransport(ABC):
    """Moves chunks into the next rank's receive slots and folds this rank's slots into the output."""

    rank: int
    size: int
    slot_bytes: int

    @abstractmethod
    def begin(self, call: CallBuffers) -> None:
        """Bind the buffers of a call; later work runs after work the caller queued before."""

    @abstractmethod
    def end(self) -> None:
        """Finish a call: work the caller queues after this sees the result."""

    @abstractmethod
    def wait_slot_free(self, slot: int, seq: int) -> None:
        """Copy queue: wait until the next rank has folded use ``seq`` of its slot ``slot``."""

    @abstractmethod
    def send(self, slot: int, source: Source, start: int, count: int) -> None:
        """Copy queue: copy ``count`` elements of ``source`` from ``start`` into the next rank's slot."""

    @abstractmethod
    def post_slot_full(self, slot: int, seq: int) -> None:
        """Copy queue: tell the next rank its slot ``slot`` holds use ``seq`` once the copy has run."""

    @abstractmethod
    def wait_slot_full(self, slot: int, seq: int) -> None:
        """Fold queue: wait until the previous rank's copy of use ``seq`` into ``slot`` has run."""

    @abstractmethod
    def fold(self, slot: int, start: int, count: int, reduce: bool, out_start: int) -> None:
        """Fold queue: ``out[out_start:+count] = in[start:+count] (op) slot`` (or ``= slot``)."""

    def mark_sent(self, index: int) -> None:  # noqa: B027 - host transports do each step at once
        """Copy queue: the send of transfer ``index`` was just enqueued (see :meth:`wait_sent`)."""

    def wait_sent(self, index: int) -> None:  # noqa: B027 - host transports do each step at once
        """Fold queue: wait until the send of transfer ``index`` has run. A compact plan's fold
        overwrites the piece of the output that this send reads (``RingPlan.fold_after_send``);
        a transport that runs each step at once, in issue order, has nothing to wait for."""

    @abstractmethod
    def post_slot_free(self, slot: int, seq: int) -> None:
        """Fold queue: tell the previous rank slot ``slot`` may be overwritten once the fold has run."""

    @abstractmethod
    def copy_input(self) -> None:
        """Copy the whole input to the output (a ring of one rank, out of place)."""

    @abstractmethod
    def slot_capacity(self, dtype: np.dtype) -> int:
        """Elements of ``dtype`` one receive slot holds."""

    @abstractmethod
    def close(self, abandon: bool = False) -> None:
        """Collective: release what the transport holds, after peers are done with it; with
        ``abandon`` (after a failure, when peers may be gone) local only."""
