"""``oneshot``, ``twoshot`` and ``oneshot-ll``: one kernel launch each, every NVLink at once,
push only.

* one-shot: every rank stores its input into all peers' slots, flag barrier, every rank
  reduces all rows locally in rank order (small messages: latency);
* oneshot-ll: one-shot without the barrier: every 16-byte line carries 8 bytes of data and
  the call's flag, so each line is reduced as soon as every rank's copy of it arrived; the
  call's descriptor travels along and a mismatch is found by the kernel (the smallest
  messages, up to 64 KiB);
* two-shot: reduce-scatter by pushing shards to their owners, barrier, all-gather by pushing
  the reduced shards, barrier (medium messages: bandwidth).

Each reduces every element in rank order (rank 0's value, then rank 1's folded in, ...), in
float32 for 2-byte floats, rounded once: ``rank_ordered``, the rows of ``reproducible=True``.
Each carries the call's descriptor (``Call.desc``) and checks on the GPU that every rank runs the
same call before it writes any output (``gpu_check``: ``csrc/agree.cuh``). The kernels are
``mpiring/cuda/csrc/direct.cu`` and ``oneshot_ll.cu``; the launcher ``mpiring.cuda.direct_kernels``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..cuda.contract import CODE_ONESHOT_LL  # the kernels know this row by its code
from .base import GPU, Algorithm, Call

if TYPE_CHECKING:
    from ..backends.base import Backend


def run_oneshot(backend: Backend, call: Call) -> None:
    backend.run_direct("oneshot", call)


def run_twoshot(backend: Backend, call: Call) -> None:
    backend.run_direct("twoshot", call)


def run_oneshot_ll(backend: Backend, call: Call) -> None:
    backend.run_oneshot_ll(call)


def bind_oneshot(backend: Backend, call: Call) -> Callable[[], None]:
    return backend.bind_direct("oneshot", call)


def bind_twoshot(backend: Backend, call: Call) -> Callable[[], None]:
    return backend.bind_direct("twoshot", call)


def bind_oneshot_ll(backend: Backend, call: Call) -> Callable[[], None]:
    return backend.bind_direct("oneshot_ll", call)


def oneshot_limit(backend: Backend) -> int | None:
    return backend.oneshot_limit


def oneshot_ll_limit(backend: Backend) -> int | None:
    return backend.oneshot_ll_limit


ONESHOT = Algorithm(
    "oneshot", 5, GPU, run_oneshot,
    summary="one kernel: every rank stores its input into all peers' slots, flag barrier, every "
            "rank reduces all rows locally",
    best_for="small messages (latency)",
    graph_capturable=True, limit=oneshot_limit, auto=True, gpu_check=True, bind=bind_oneshot,
    rank_ordered=True,
)
TWOSHOT = Algorithm(
    "twoshot", 6, GPU, run_twoshot,
    summary="one kernel: reduce-scatter by pushing shards to their owners, flag barrier, "
            "all-gather by pushing reduced shards, flag barrier",
    best_for="medium messages",
    graph_capturable=True, auto=True, gpu_check=True, bind=bind_twoshot, rank_ordered=True,
)
ONESHOT_LL = Algorithm(
    "oneshot-ll", CODE_ONESHOT_LL, GPU, run_oneshot_ll,
    summary="one kernel, no barrier: every rank stores its input into all peers' slots as 16-byte "
            "lines of data and flag, and reduces each line as soon as every rank's copy arrived",
    best_for="the smallest messages (latency), up to 64 KiB",
    graph_capturable=True, limit=oneshot_ll_limit, auto=True, gpu_check=True,
    bind=bind_oneshot_ll, rank_ordered=True,
)
