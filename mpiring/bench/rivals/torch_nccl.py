"""Rival ``torch``: ``torch.distributed.all_reduce`` over the NCCL process group of
:mod:`.torch_session`, on torch tensors that alias the bench's buffers (DLPack: no copy).

torch's all_reduce works in place only, so out of place the row times what a torch user must
do to keep the input: ``recv.copy_(send)`` then ``all_reduce(recv)``; in place, the
``all_reduce(recv)`` alone. Every reduction (sum, prod, max, min) and every element type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import Rival, RivalContext
from .torch_session import TorchSession, torch_missing


class TorchAllReduce(Rival):
    name = "torch"

    def __init__(self) -> None:
        self.session: TorchSession | None = None
        self.op: Any = None

    def available(self) -> str | None:
        return torch_missing()

    def setup(self, world: Any, ctx: RivalContext) -> None:
        self.session = TorchSession.acquire(world, ctx)
        ops = self.session.dist.ReduceOp
        self.op = {"sum": ops.SUM, "prod": ops.PRODUCT, "max": ops.MAX, "min": ops.MIN}[ctx.op]

    def describe(self) -> str:
        return self.session.describe() if self.session else ""

    def prepare(self, bufs: Any, in_place: bool) -> Callable[[], None]:
        session = self.session
        assert session is not None, "setup() first"
        all_reduce, op, group = session.dist.all_reduce, self.op, session.group
        recv = session.tensor(bufs.recv)
        if in_place:
            def run() -> None:
                all_reduce(recv, op=op, group=group)
        else:
            send = session.tensor(bufs.send)

            def run() -> None:
                recv.copy_(send)
                all_reduce(recv, op=op, group=group)
        return session.on_current(run)

    def capture(self, stream: Any, call: Callable[[], None], k: int) -> Any:
        assert self.session is not None
        return self.session.capture(stream, call, k)

    def close(self) -> None:
        if self.session is not None:
            self.session.release()
            self.session = None
