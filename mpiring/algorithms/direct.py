"""``oneshot`` and ``twoshot``: one kernel launch each, every NVLink at once, push only.

* one-shot: every rank stores its input into all peers' slots, flag barrier, every rank
  reduces all rows locally in rank order (small messages: latency);
* two-shot: reduce-scatter by pushing shards to their owners, barrier, all-gather by pushing
  the reduced shards, barrier (medium messages: bandwidth).

The kernels are ``mpiring/cuda/csrc/direct.cu``; the launcher ``mpiring.cuda.direct``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import GPU, Algorithm, Call

if TYPE_CHECKING:
    from ..backends.base import Backend


def run_oneshot(backend: Backend, call: Call) -> None:
    backend.run_direct("oneshot", call)


def run_twoshot(backend: Backend, call: Call) -> None:
    backend.run_direct("twoshot", call)


def oneshot_limit(backend: Backend) -> int | None:
    return backend.oneshot_limit


ONESHOT = Algorithm(
    "oneshot", 5, GPU, run_oneshot,
    summary="one kernel: every rank stores its input into all peers' slots, flag barrier, every "
            "rank reduces all rows locally",
    best_for="small messages (latency)",
    graph_capturable=True, limit=oneshot_limit, auto=True,
)
TWOSHOT = Algorithm(
    "twoshot", 6, GPU, run_twoshot,
    summary="one kernel: reduce-scatter by pushing shards to their owners, flag barrier, "
            "all-gather by pushing reduced shards, flag barrier",
    best_for="medium messages",
    graph_capturable=True, auto=True,
)
