"""Graph capture without the garbage collector inside it.

While a stream is being captured into a CUDA graph, CUDA refuses calls it deems unsafe
(``cudaErrorStreamCaptureUnsupported``): in torch's ``thread_local`` mode and in the
``global`` mode, destroying a graph from the capturing thread is one of them, and a refused
call invalidates the capture. Python's cyclic garbage collector runs whenever allocations pass
its threshold, so it may free an earlier row's graph that sits in a reference cycle (a row
that raised keeps its graph alive through the exception's traceback) in the middle of another
row's capture. That happened in ``--graph`` runs at 4 ranks: one rank's capture broke right
after a row that raised (nccl-ring's n/a), its calls never ran, and the other ranks waited for
them forever. So every capture the bench makes runs inside :func:`capture_guard`: cycles are
collected first, and the collector stays off until the capture has ended.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def capture_guard() -> Iterator[None]:
    """Collect garbage now, then keep the collector off until the block ends (a capture)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
