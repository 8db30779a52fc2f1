"""What a collective call is once every rank agreed on it: which collective (:class:`Collective`)
and its checked arguments (:class:`Call`), as every layer from the per-memory context up to the
algorithms receives it. Pure: no MPI, no device."""

from __future__ import annotations

import enum
from typing import NamedTuple

from .buffers import Buffer
from .ops import Op


class Collective(enum.IntEnum):
    """The collectives a row may implement; the values are the agreement check's wire codes."""

    ALLREDUCE = 1
    REDUCE_SCATTER = 2  # Reduce_scatter_block
    ALLGATHER = 3

    @property
    def label(self) -> str:
        return {1: "allreduce", 2: "Reduce_scatter_block", 3: "Allgather"}[self.value]


class Call(NamedTuple):
    """One allreduce as an algorithm receives it: checked, agreed on by every rank.
    (Immutable; built once per call, so a NamedTuple: cheaper than a frozen dataclass.)"""

    send: Buffer | None  # None: in place (the input is recv)
    recv: Buffer
    op: Op
    batches: int | None  # mini-batches asked for (batched algorithms), None: their default
    # The call's descriptor as it travels on the GPU (mpiring.core.descriptor): what the kernels of
    # a row that checks on the GPU compare with their peers' before they write any output.
    desc: tuple[int, int] = (0, 0)

    @property
    def source(self) -> Buffer:
        """The input: ``send``, or ``recv`` when in place."""
        return self.recv if self.send is None else self.send
