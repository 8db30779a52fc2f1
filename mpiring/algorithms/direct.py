"""``oneshot``, ``twoshot`` and ``oneshot-ll``: one kernel launch each, every NVLink at once,
push only.

* one-shot: every rank stores its input into all peers' slots, flag barrier, every rank
  reduces all rows locally in rank order (small messages: latency);
* oneshot-ll: one-shot without the barrier: every 16-byte line carries 8 bytes of data and
  the call's flag, so each line is reduced as soon as every rank's copy of it arrived; the
  call's descriptor travels along and a mismatch is found by the kernel (the smallest
  messages: up to 64 KiB on 8 ranks, 128 KiB on 4, 256 KiB on 2);
* two-shot: reduce-scatter by pushing shards to their owners, barrier, all-gather by pushing
  the reduced shards, barrier (medium messages: bandwidth).

Each reduces every element in rank order (rank 0's value, then rank 1's folded in, ...), in
float32 for 2-byte floats, rounded once: ``rank_ordered``, the rows of ``reproducible=True``.
Each carries the call's descriptor (``Call.desc``) and checks on the GPU that every rank runs the
same call before it writes any output (``gpu_check``: ``csrc/agree.cuh``). The kernels are
``mpiring/cuda/csrc/direct.cu`` and ``oneshot_ll.cu``; the launcher ``mpiring.cuda.direct_kernels``,
which the GPU context holds (``GpuBackend.direct``); this module launches it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from ..cuda.contract import CODE_ONESHOT_LL  # the kernels know this row by its code
from ..cuda.launcher import StreamLaunch
from ..cuda.layout import StagingLayout
from .base import GPU, Algorithm, Call, CallShape, SmWork

if TYPE_CHECKING:
    from ..context.base import Backend
    from ..context.gpu import GpuBackend


def _launch(kind: str) -> Callable[[Backend, Call], None]:
    """``run`` of the ``kind`` kernel ("oneshot", "twoshot", "oneshot_ll"): one launch on the
    caller's (ordered) stream, carrying the call's descriptor (its peers' kernels compare it
    with theirs before any output is written)."""

    def run(backend: Backend, call: Call) -> None:
        gpu = cast("GpuBackend", backend)  # the rows serve GPU memory only
        recv = call.recv
        if kind == "oneshot_ll":
            gpu.direct.launch_ll(call.source.address, recv.address, recv.count, recv.dtype, call.op,
                                 call.desc, gpu.ordered_stream())
        else:
            gpu.direct.launch(kind, call.source.address, recv.address, recv.count, recv.dtype,
                              call.op, call.desc, gpu.ordered_stream())
    return run


def _bind(kind: str) -> Callable[[Backend, Call], Callable[[], None]]:
    """``bind`` of the ``kind`` kernel: the launch ``run`` makes, with every argument fixed, as
    a callable that enqueues it again on the caller's (ordered) stream with one driver call
    (the eager fast path, :mod:`mpiring.call.replay`)."""

    def bind(backend: Backend, call: Call) -> Callable[[], None]:
        gpu = cast("GpuBackend", backend)
        recv = call.recv
        launch = gpu.direct.bind(kind, call.source.address, recv.address, recv.count, recv.dtype,
                                 call.op, call.desc)
        return StreamLaunch(launch, gpu.ordered_stream)  # which the compiled replay recognizes
    return bind


def oneshot_limit(backend: Backend) -> int | None:
    """The largest message, in bytes, the one-shot kernel takes: every rank's input fits in
    each peer's one-shot slots."""
    return cast("GpuBackend", backend).direct.oneshot_limit


def oneshot_ll_limit(backend: Backend) -> int | None:
    """The largest message, in bytes, the oneshot-ll kernel takes (its line rows; an SM budget
    lowers it)."""
    return cast("GpuBackend", backend).direct.ll_limit


def oneshot_sm_work(shape: CallShape) -> SmWork:
    """One-shot holds its fixed grid (``GridLimits.direct_blocks``). Its fold (step 2 of
    ``csrc/direct.cu``) reads the ``n`` rows (its own from its input, the peers' from its own
    slot, which they pushed into: local memory) and writes one: ``n + 1`` bytes per byte. The
    push of step 1 (1 read, ``n - 1`` stores into peers) is no fold and not counted."""
    blocks = None if shape.grids is None else shape.grids.direct_blocks
    return SmWork(blocks, shape.ranks + 1.0 if shape.count else None)


def twoshot_sm_work(shape: CallShape) -> SmWork:
    """Two-shot holds its fixed grid (``GridLimits.direct_blocks``). Its fold (step 2 of
    ``csrc/direct.cu``) reduces this rank's shard (``1 / n`` of the message on average over the
    ranks): it reads the ``n`` copies (its own from its input, the peers' from its staging: local)
    and stores the result ``n`` times, into its output and into every peer's output staging
    (``n - 1`` of them remote stores over NVLink): ``n / n + n / n = 2`` bytes per byte. The
    push of step 1 and the gather copies of step 3 are not counted."""
    blocks = None if shape.grids is None else shape.grids.direct_blocks
    return SmWork(blocks, 2.0 if shape.count else None)


def oneshot_ll_sm_work(shape: CallShape) -> SmWork:
    """oneshot-ll holds the grid ``ll_shape`` gives the call (None over its budget's limit). Its
    fold (step 3 of ``csrc/oneshot_ll.cu``) reads the ``n`` copies, its own from its input and
    each peer's as 16-byte lines of 8 payload bytes (twice the bytes), writes the result and
    clears every peer line it read: ``1 + 2 (n - 1)`` read, ``1 + 2 (n - 1)`` written, ``4n - 2``
    bytes per byte where the message is whole lines (a last partial line still moves 16 bytes)."""
    blocks = None if shape.grids is None else shape.grids.ll_blocks(shape.count, shape.itemsize)
    if not shape.count:
        return SmWork(blocks, None)
    lines = -(-shape.nbytes // StagingLayout.LL_PAYLOAD)
    moved = 2 * shape.nbytes + 2 * (shape.ranks - 1) * StagingLayout.LL_LINE * lines
    return SmWork(blocks, moved / shape.nbytes)


ONESHOT = Algorithm(
    "oneshot", 5, GPU, _launch("oneshot"),
    summary="one kernel: every rank stores its input into all peers' slots, flag barrier, every "
            "rank reduces all rows locally",
    best_for="small messages (latency)",
    graph_capturable=True, limit=oneshot_limit, auto=True, gpu_check=True, bind=_bind("oneshot"),
    rank_ordered=True, sm_work=oneshot_sm_work,
)
TWOSHOT = Algorithm(
    "twoshot", 6, GPU, _launch("twoshot"),
    summary="one kernel: reduce-scatter by pushing shards to their owners, flag barrier, "
            "all-gather by pushing reduced shards, flag barrier",
    best_for="medium messages",
    graph_capturable=True, auto=True, gpu_check=True, bind=_bind("twoshot"), rank_ordered=True,
    sm_work=twoshot_sm_work,
)
ONESHOT_LL = Algorithm(
    "oneshot-ll", CODE_ONESHOT_LL, GPU, _launch("oneshot_ll"),
    summary="one kernel, no barrier: every rank stores its input into all peers' slots as 16-byte "
            "lines of data and flag, and reduces each line as soon as every rank's copy arrived",
    best_for="the smallest messages (latency), up to 64 KiB on 8 ranks, 128 KiB on 4, 256 KiB on 2",
    graph_capturable=True, limit=oneshot_ll_limit, auto=True, gpu_check=True,
    bind=_bind("oneshot_ll"), rank_ordered=True, sm_work=oneshot_ll_sm_work,
)
