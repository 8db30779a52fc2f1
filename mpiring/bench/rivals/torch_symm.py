"""Rivals ``torch-symm-1shot`` and ``torch-symm-2shot``: torch's SymmetricMemory all-reduce
kernels (``torch.ops.symm_mem``), one row each, as mpiring has ``oneshot`` and ``twoshot``.

The kernels read their input from a symmetric buffer (``torch.distributed._symmetric_memory``
``empty`` + ``rendezvous``), and the bench's data, like a user's, lives in ordinary memory, so
each call begins by putting the input there, and **that copy is timed**: the row times what a
user with ordinary tensors must do. Each call:

* 1shot: ``one_shot_all_reduce_copy_out(symm, send, "sum", group, recv)`` where torch has it
  (the copy-in fused into the kernel), else ``symm.copy_(send)`` +
  ``one_shot_all_reduce_out(symm, "sum", group, recv)``;
* 2shot: ``symm.copy_(send)`` + ``two_shot_all_reduce_out(symm, "sum", group, recv)`` where
  torch has it and the world size is 2, 4 or 8 (its only sizes), else
  ``two_shot_all_reduce_(symm, ...)`` in place + ``recv.copy_(symm)`` (the copy-out timed too).

In place, ``send`` is ``recv``. The kernels reduce with "sum" only, float32 and bfloat16 only
(the registry refuses the rest), and a message of a whole number of 4-byte words (else the
point is n/a). One symmetric buffer of the run's largest point is made at set-up and shared by
both rows; points use its first ``count`` elements. ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` is
set before it is made (:mod:`.env`), and no multimem op is called.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from ...core.errors import InvalidArgumentError
from ..measure import agree
from .base import Rival, RivalContext, element_count, missing
from .env import multicast_off
from .torch_session import TORCH_HINT, TorchSession, torch_missing

NEEDED = {"1shot": ("one_shot_all_reduce_out",), "2shot": ("two_shot_all_reduce_",)}
TWO_SHOT_OUT_SIZES = (2, 4, 8)  # two_shot_all_reduce_out's kernels (DISPATCH_WORLD_SIZES_NO_DEFAULT)
_BUFFERS: dict[str, Any] = {}  # the shared symmetric buffer (and its handle) of the run
# How a call runs, by what this torch has (see the module docstring).
PLANS = {"1shot-fused": "one_shot_all_reduce_copy_out (copy-in fused into the kernel)",
         "1shot": "symm.copy_(send) + one_shot_all_reduce_out",
         "2shot-out": "symm.copy_(send) + two_shot_all_reduce_out",
         "2shot-inplace": "symm.copy_(send) + two_shot_all_reduce_ + recv.copy_(symm)"}


def has_op(ops: Any, name: str) -> bool:
    """Whether ``torch.ops.symm_mem`` has ``name`` (the namespace raises for a missing op)."""
    try:
        getattr(ops, name)
    except (AttributeError, RuntimeError):
        return False
    return True


def plan(variant: str, has: Callable[[str], bool], size: int) -> str:
    """The key of :data:`PLANS` a call of ``variant`` runs with, given which ops torch ``has``
    and the world ``size``."""
    if variant == "1shot":
        return "1shot-fused" if has("one_shot_all_reduce_copy_out") else "1shot"
    return "2shot-out" if has("two_shot_all_reduce_out") and size in TWO_SHOT_OUT_SIZES \
        else "2shot-inplace"


class TorchSymm(Rival):
    def __init__(self, variant: str) -> None:
        if variant not in NEEDED:
            raise ValueError(f"variant {variant!r}: choose 1shot or 2shot")
        self.variant = variant
        self.name = f"torch-symm-{variant}"
        self.session: TorchSession | None = None
        self.ops: Any = None
        self.plan = ""

    def available(self) -> str | None:
        multicast_off()
        why = torch_missing() or missing("torch.distributed._symmetric_memory", TORCH_HINT)
        if why:
            return why
        import torch
        import torch.distributed._symmetric_memory  # noqa: F401 - registers torch.ops.symm_mem

        lacking = [n for n in NEEDED[self.variant] if not has_op(torch.ops.symm_mem, n)]
        if lacking:
            return (f"torch {torch.__version__} has no torch.ops.symm_mem.{lacking[0]} (a newer "
                    "torch has it)")
        return None

    def setup(self, world: Any, ctx: RivalContext) -> None:
        self.session = TorchSession.acquire(world, ctx)
        import torch

        self.ops = torch.ops.symm_mem
        if "buffer" not in _BUFFERS or _BUFFERS["count"] < ctx.max_count:
            agree(world, lambda: self._make_buffer(ctx))
        _BUFFERS["users"] = _BUFFERS.get("users", 0) + 1
        self.plan = plan(self.variant, lambda name: has_op(self.ops, name), ctx.size)

    def _make_buffer(self, ctx: RivalContext) -> None:
        import torch
        import torch.distributed._symmetric_memory as symm_mem

        session = self.session
        assert session is not None
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[ctx.dtype.name]
        _BUFFERS.pop("buffer", None)
        buffer = symm_mem.empty(ctx.max_count, dtype=dtype, device=session.device)
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:  # needed before torch 2.8, deprecated since
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                enable(session.group_name)
        _BUFFERS["handle"] = symm_mem.rendezvous(buffer, session.group_name)
        _BUFFERS["buffer"], _BUFFERS["count"] = buffer, ctx.max_count

    def describe(self) -> str:
        if self.session is None:
            return ""
        symm_mem = __import__("torch.distributed._symmetric_memory", fromlist=["get_backend"])
        get_backend = getattr(symm_mem, "get_backend", None)
        backend = f", backend {get_backend(self.session.device)}" if get_backend else ""
        return f"{self.session.describe()}; {PLANS[self.plan]}{backend}"

    def prepare(self, bufs: Any, in_place: bool) -> Callable[[], None]:
        session, ops = self.session, self.ops
        assert session is not None, "setup() first"
        count = element_count(bufs.recv)
        nbytes = count * bufs.gen.dtype.itemsize
        if nbytes % 4:
            raise InvalidArgumentError(f"torch.ops.symm_mem takes whole 4-byte words: "
                                       f"{count} elements are {nbytes} bytes")
        symm = _BUFFERS["buffer"][:count]
        recv = session.tensor(bufs.recv)
        send = recv if in_place else session.tensor(bufs.send)
        group = session.group_name
        if self.plan == "1shot-fused":
            def run() -> None:
                ops.one_shot_all_reduce_copy_out(symm, send, "sum", group, recv)
        elif self.plan == "1shot":
            def run() -> None:
                symm.copy_(send)
                ops.one_shot_all_reduce_out(symm, "sum", group, recv)
        elif self.plan == "2shot-out":
            def run() -> None:
                symm.copy_(send)
                ops.two_shot_all_reduce_out(symm, "sum", group, recv)
        else:
            def run() -> None:
                symm.copy_(send)
                ops.two_shot_all_reduce_(symm, "sum", group)
                recv.copy_(symm)
        return session.on_current(run)

    def capture(self, stream: Any, call: Callable[[], None], k: int) -> Any:
        assert self.session is not None
        return self.session.capture(stream, call, k)

    def close(self) -> None:
        if self.session is None:
            return
        _BUFFERS["users"] = _BUFFERS.get("users", 1) - 1
        if _BUFFERS["users"] <= 0:
            self.session.torch.cuda.synchronize(self.session.device)
            _BUFFERS.clear()
        self.session.release()
        self.session = None
