"""How a rank's GPU work reports a failure to its host: a few words of pinned host memory.

Kernels that give up (a flag barrier past the timeout, or a communicator aborted by a peer)
write what they saw into this rank's status block, which lives in page-locked host memory
mapped into the GPU: the host reads it with a plain load, no CUDA call, so checking it costs
nothing on the hot path. The first report wins; later ones only ever repeat true facts.

:func:`status_error` (pure) turns the words into the exception the caller sees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core import descriptor
from ..core.errors import (
    MpiringError,
    MpiringTimeoutError,
    PeerArgumentError,
    PeerFailedError,
    RankMismatchError,
)

# The words' layout and values: one place for the host (contract.py), mirrored by the kernels'
# csrc/status.cuh (ST_*), which also holds report() and report_mismatch(), the device side.
from .contract import (
    ABORTED,
    BLOCK,
    HEALTHY,
    KIND,
    KINDS,
    MM_CALL,
    MM_COUNT,
    MM_KIND,
    MM_MINE,
    MM_PEER,
    MM_THEIRS,
    PEER,
    SEQ,
    STATE,
    STEP,
    TIMED_OUT,
    WORDS,
)

__all__ = ["ABORTED", "ABORT_HINT", "BLOCK", "HEALTHY", "KIND", "KINDS", "PEER", "SEQ", "STATE", "STEP",
           "TIMED_OUT", "WORDS", "skipped_error", "status_error"]

AGREE_STEP = -1  # STEP_AGREE in agree.cuh: a wait for a peer's call descriptor
ABORT_HINT = ("the peer may have crashed, hung or skipped the call (raise MPIRING_TIMEOUT if its work is "
              "just slow); this communicator now refuses further use")


def status_error(words: Sequence[int], rank: int, timeout: float) -> MpiringError | None:
    """The failure a status block reports (a wait past the timeout, an abort), or None."""
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
    # SEQ: the GPU call number for the direct kernels (csrc/direct.cu, agree.cuh); the ring's barrier seq
    number = "call" if algorithm in ("oneshot", "twoshot", "oneshot-ll", "notice") else "barrier seq"
    what = "call" if int(words[STEP]) == AGREE_STEP or algorithm in ("oneshot-ll", "notice") else "barrier"
    where = f"in the {algorithm} algorithm, {step} ({number} {seq}, block {int(words[BLOCK])})"
    err = MpiringTimeoutError(rank, timeout, f"rank {peer} to reach the same {what}", peer=peer,
                              hint=ABORT_HINT)
    return err.locate(where, algorithm=algorithm, step=step, seq=seq)


def _step(algorithm: str, step: int) -> str:
    if step == AGREE_STEP:
        return "the agreement check (the wait for the peer's call descriptor)"
    if algorithm == "twoshot":
        phase = ("after the scatter", "after the reduction")[step % 2]
        return f"barrier {step % 2 + 1} of 2 ({phase}) of chunk {step // 2 + 1}"
    if algorithm in ("oneshot-ll", "notice"):
        return "the wait for the peers' lines"
    return "the barrier after the push"


def skipped_error(words: Sequence[int], rank: int, raised: int,
                  describe: Callable[[str, int], str]) -> tuple[MpiringError | None, int]:
    """The error for the calls the GPU-side agreement check skipped since ``raised`` of them
    were raised, and the new count (the caller keeps it): ``(None, raised)`` if there are none.
    ``describe(field, code)``: how a descriptor field reads in the error ("float32", "oneshot").

    Reads the count, the details, then the count again (a kernel may be writing a newer
    report meanwhile: then it reads again)."""
    for _ in range(100):
        count = int(words[MM_COUNT])
        if count == raised:
            return None, raised
        details = [int(w) for w in words[MM_KIND:MM_MINE + 2]]
        if int(words[MM_COUNT]) == count:
            break
    kind, peer, call = details[0], details[MM_PEER - MM_KIND], details[MM_CALL - MM_KIND]
    theirs = descriptor.unpack(details[MM_THEIRS - MM_KIND:MM_THEIRS - MM_KIND + 2])
    mine = descriptor.unpack(details[MM_MINE - MM_KIND:MM_MINE - MM_KIND + 2])
    algorithm = KINDS.get(kind, "unknown")
    skipped = count - raised
    more = (f" ({skipped} calls were skipped since this rank last raised such an error; this was "
            "the latest)") if skipped > 1 else ""
    tail = (f"; the call wrote no output on any rank{more}. The calls after it ran normally, and this "
            "communicator stays usable")
    if theirs["kind"] == descriptor.REJECTED:
        err: MpiringError = PeerArgumentError(
            f"rank {rank}: allreduce skipped on the GPU (call {call} of the {algorithm} kernel): rank "
            f"{peer} rejected its arguments (its own error says why){tail}")
    else:
        how = " (its row checks on the host, which found the difference)" if \
            theirs["kind"] == descriptor.DISAGREED else ""
        diffs = [f"{field} (this rank {describe(field, mine[field])}, rank {peer} "
                 f"{describe(field, theirs[field])})"
                 for field in ("count", "dtype", "op", "algorithm", "collective", "batches", "memory",
                               "in_place")
                 if mine[field] != theirs[field]]
        err = RankMismatchError(
            f"rank {rank}: ranks called allreduce with different arguments, found on the GPU by the "
            f"{algorithm} kernel (call {call}): {'; '.join(diffs) or 'descriptors differ'}{how}. Every "
            f"rank must pass the same count, dtype, op and algorithm{tail}")
    err.gpu_call = call  # type: ignore[attr-defined]
    return err, count
