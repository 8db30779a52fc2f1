"""The host side of the host/device contract, mirrored from ``csrc/contract.cuh`` and
``csrc/status.cuh``. Pure: numpy only, no CuPy.

* :data:`CONTROL` is ``struct Ctl``, the direct kernels' table of addresses, which
  :class:`mpiring.cuda.direct.DirectKernels` fills and copies into the staging once;
* the status block's word indices, STATE values and KIND codes (the algorithm that reported)
  are the ``ST_*`` constants that kernels write into pinned host memory and
  :mod:`mpiring.cuda.status` reads back.

Both sides spell the numbers out; ``tests/test_cuda_contract.py`` checks every ``static_assert``
of ``contract.cuh`` against :data:`CONTROL` and every ``ST_*`` constant against this module.
"""

from __future__ import annotations

import numpy as np

from .layout import MAX_RANKS

MAXR = MAX_RANKS  # MAXR in contract.cuh: rows of every per-rank table
DIRECT_THREADS = 512  # DIRECT_THREADS in contract.cuh: the direct kernels' __launch_bounds__
LL_THREADS = 512  # LL_THREADS in contract.cuh: oneshot-ll's __launch_bounds__
LL_LINES = 2  # LL_LINES in contract.cuh: 16-byte lines (8 bytes of payload each) per thread

# struct Ctl, field by field, in order (offsets and size are asserted in contract.cuh).
CONTROL = np.dtype([
    ("flags", "<u8", (MAXR,)),  # rank r's flag table [src][block], as mapped here
    ("oneshot", "<u8", (MAXR, 2)),  # rank r's two one-shot slots
    ("twoshot_in", "<u8", (MAXR,)),  # rank r's two-shot input staging
    ("twoshot_out", "<u8", (MAXR,)),  # rank r's two-shot output staging
    ("aborts", "<u8", (MAXR,)),  # rank r's abort word
    ("counters", "<u8"),  # this rank's per-block barrier counters
    ("status", "<u8"),  # this rank's host status block
    ("twoshot_bytes", "<i8"),  # bytes per two-shot staging half
    ("timeout_ns", "<i8"),  # how long a barrier may wait for a peer
    ("rank", "<i4"), ("size", "<i4"), ("blocks", "<i4"), ("pad", "<i4"),
    ("ll", "<u8", (MAXR, 2)),  # rank r's two oneshot-ll slots
    ("ll_headers", "<u8", (MAXR,)),  # rank r's oneshot-ll header lines [slot][source rank]
    ("ll_state", "<u8"),  # this rank's oneshot-ll call count and finished-block count
    ("ll_row_bytes", "<i8"),  # bytes of one source rank's row in a oneshot-ll slot
])

# Status block: word indices (ST_STATE ... ST_MINE) and its length in words (ST_WORDS).
STATE, KIND, PEER, SEQ, BLOCK, STEP, THEIRS, MINE = range(8)
WORDS = 8
# STATE values (ST_HEALTHY, ST_TIMED_OUT, ST_ABORTED, ST_MISMATCH).
HEALTHY, TIMED_OUT, ABORTED, MISMATCH = 0, 1, 2, 3
# KIND values (ST_KIND_RING, ...): the algorithm whose kernel reported.
KIND_RING, KIND_ONESHOT, KIND_TWOSHOT, KIND_ONESHOT_LL = 1, 2, 3, 4
KINDS = {KIND_RING: "ring", KIND_ONESHOT: "oneshot", KIND_TWOSHOT: "twoshot", KIND_ONESHOT_LL: "oneshot-ll"}
