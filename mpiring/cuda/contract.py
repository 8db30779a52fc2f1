"""The host side of the host/device contract, mirrored from ``csrc/contract.cuh`` and
``csrc/status.cuh``. Pure: numpy only, no CuPy.

* :data:`CONTROL` is ``struct Ctl``, the direct kernels' table of addresses, which
  :class:`mpiring.cuda.direct_kernels.DirectKernels` fills and copies into the staging once;
* the status block's word indices, STATE values and KIND codes (the algorithm that reported)
  are the ``ST_*`` constants that kernels write into pinned host memory and
  :mod:`mpiring.cuda.status` reads back.

Both sides spell the numbers out; ``tests/test_cuda_contract.py`` checks every ``static_assert``
of ``contract.cuh`` against :data:`CONTROL` and every ``ST_*`` constant against this module.
"""

from __future__ import annotations

import numpy as np

from ..core.descriptor import CALL as DESC_CALL  # agree.cuh's DESC_* (mpiring.core.descriptor packs them)
from ..core.descriptor import DISAGREED as DESC_DISAGREED
from ..core.descriptor import REJECTED as DESC_REJECTED
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
    ("status", "<u8"),  # this rank's host status block
    ("twoshot_bytes", "<i8"),  # bytes per two-shot staging half
    ("timeout_ns", "<i8"),  # how long a barrier may wait for a peer
    ("rank", "<i4"), ("size", "<i4"), ("blocks", "<i4"), ("pad", "<i4"),
    ("ll", "<u8", (MAXR, 2)),  # rank r's two oneshot-ll slots
    ("ll_headers", "<u8", (MAXR,)),  # rank r's header lines [slot][source rank][2] (agree.cuh)
    ("ll_state", "<u8"),  # this rank's GPU-checked calls begun and started blocks (agree.cuh)
    ("ll_row_bytes", "<i8"),  # bytes of one source rank's row in a oneshot-ll slot
])

# Status block: word indices (ST_STATE ... ST_STEP: a failure; ST_MM_*: calls skipped because
# the ranks disagreed) and its length in words (ST_WORDS).
STATE, KIND, PEER, SEQ, BLOCK, STEP = range(6)
MM_COUNT, MM_KIND, MM_PEER, MM_CALL, MM_THEIRS, MM_MINE = 8, 9, 10, 11, 12, 14  # THEIRS, MINE: two words
WORDS = 16
# STATE values (ST_HEALTHY, ST_TIMED_OUT, ST_ABORTED).
HEALTHY, TIMED_OUT, ABORTED = 0, 1, 2
# KIND values (ST_KIND_RING, ...): the algorithm whose kernel reported.
KIND_RING, KIND_ONESHOT, KIND_TWOSHOT, KIND_ONESHOT_LL, KIND_NOTICE, KIND_CE_TWOSHOT = 1, 2, 3, 4, 5, 6
KINDS = {KIND_RING: "ring", KIND_ONESHOT: "oneshot", KIND_TWOSHOT: "twoshot", KIND_ONESHOT_LL: "oneshot-ll",
         KIND_NOTICE: "notice", KIND_CE_TWOSHOT: "ce-twoshot"}
CODE_ONESHOT_LL = 10  # the oneshot-ll row's wire code (algorithms/direct.py uses it), spelt out
# in agree.cuh to find its lines
__all__ = ["CODE_ONESHOT_LL", "CONTROL", "DESC_CALL", "DESC_DISAGREED", "DESC_REJECTED", "DIRECT_THREADS",
           "KINDS", "LL_LINES", "LL_THREADS", "MAXR", "WORDS"]
