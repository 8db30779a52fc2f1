"""How a rank's GPU work reports a failure to its host: a few words of pinned host memory.

Kernels that give up (a flag barrier past the timeout, or a communicator aborted by a peer)
write what they saw into this rank's status block, which lives in page-locked host memory
mapped into the GPU: the host reads it with a plain load, no CUDA call, so checking it costs
nothing on the hot path. The first report wins; later ones only ever repeat true facts.

:func:`status_error` (pure) turns the words into the exception the caller sees.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import MpiringError, MpiringTimeoutError, PeerFailedError

# Word indices of the status block, shared with the kernels' source (STATUS_SOURCE).
STATE, KIND, PEER, SEQ, BLOCK, STEP = range(6)
WORDS = 8
# STATE values.
HEALTHY, TIMED_OUT, ABORTED = 0, 1, 2
# KIND values: the algorithm whose kernel reported.
KINDS = {1: "ring", 2: "oneshot", 3: "twoshot"}

STATUS_SOURCE = r"""
#define ST_STATE 0
#define ST_KIND 1
#define ST_PEER 2
#define ST_SEQ 3
#define ST_BLOCK 4
#define ST_STEP 5
#define ST_TIMED_OUT 1
#define ST_ABORTED 2
// Record a failure in the host status block (first report wins: the fields are written
// before STATE, behind a system fence, so the host never reads a half-written report).
__device__ __forceinline__ void report(long long* status, int state, int kind, long long peer,
                                       unsigned long long seq, int step) {
  volatile long long* s = (volatile long long*)status;
  if (s[ST_STATE] != 0) return;
  s[ST_KIND] = kind; s[ST_PEER] = peer; s[ST_SEQ] = (long long)seq;
  s[ST_BLOCK] = blockIdx.x; s[ST_STEP] = step;
  __threadfence_system();
  s[ST_STATE] = state;
}
"""

ABORT_HINT = ("the peer may have crashed, hung or skipped the call (raise MPIRING_TIMEOUT if its work is "
              "just slow); this communicator now refuses further use")


def status_error(words: Sequence[int], rank: int, timeout: float) -> MpiringError | None:
    """The error a status block reports, or None while it is healthy."""
    state = int(words[STATE])
    if state == HEALTHY:
        return None
    algorithm = KINDS.get(int(words[KIND]), "unknown")
    peer, seq = int(words[PEER]), int(words[SEQ])
    if state == ABORTED:
        return PeerFailedError(
            f"rank {rank}: rank {peer} aborted this communicator after a timeout of its own (its "
            f"error names the rank it waited for), seen here in the {algorithm} algorithm; the "
            "calls in flight did not complete, their outputs are undefined, and this "
            "communicator refuses further use"
        )
    step = _step(algorithm, int(words[STEP]))
    where = f"in the {algorithm} algorithm, {step} (barrier seq {seq}, block {int(words[BLOCK])})"
    err = MpiringTimeoutError(rank, timeout, f"rank {peer} to reach the same barrier", peer=peer,
                              hint=ABORT_HINT)
    return err.locate(where, algorithm=algorithm, step=step, seq=seq)


def _step(algorithm: str, step: int) -> str:
    if algorithm == "twoshot":
        phase = ("after the scatter", "after the reduction")[step % 2]
        return f"barrier {step % 2 + 1} of 2 ({phase}) of chunk {step // 2 + 1}"
    return "the barrier after the push"
