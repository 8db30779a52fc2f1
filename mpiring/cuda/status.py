"""How a rank's GPU work reports a failure to its host: a few words of pinned host memory.

Kernels that give up (a flag barrier past the timeout, or a communicator aborted by a peer)
write what they saw into this rank's status block, which lives in page-locked host memory
mapped into the GPU: the host reads it with a plain load, no CUDA call, so checking it costs
nothing on the hot path. The first report wins; later ones only ever repeat true facts.

:func:`status_error` (pure) turns the words into the exception the caller sees.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import MpiringError, MpiringTimeoutError, PeerFailedError, RankMismatchError

# The words' layout and values: one place for the host (contract.py), mirrored by the kernels'
# csrc/status.cuh (ST_*), which also holds report(), the device side of this block.
from .contract import (
    ABORTED,
    BLOCK,
    HEALTHY,
    KIND,
    KINDS,
    MINE,
    MISMATCH,
    PEER,
    SEQ,
    STATE,
    STEP,
    THEIRS,
    TIMED_OUT,
    WORDS,
)

__all__ = ["ABORTED", "ABORT_HINT", "BLOCK", "HEALTHY", "KIND", "KINDS", "MINE", "MISMATCH", "PEER", "SEQ",
           "STATE", "STEP", "THEIRS", "TIMED_OUT", "WORDS", "status_error"]

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
    if state == MISMATCH:
        return _mismatch(words, rank, algorithm, peer)
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


def _mismatch(words: Sequence[int], rank: int, algorithm: str, peer: int) -> RankMismatchError:
    """A peer's call descriptor differed from this rank's (oneshot-ll carries both)."""
    from ..agreement import describe_field
    from .direct import split_descriptor

    theirs, mine = split_descriptor(int(words[THEIRS])), split_descriptor(int(words[MINE]))
    diffs = [f"{field} (this rank {describe_field(field, mine[field])}, rank {peer} "
             f"{describe_field(field, theirs[field])})"
             for field in mine if mine[field] != theirs[field]]
    return RankMismatchError(
        f"rank {rank}: ranks called allreduce with different arguments, found on the GPU by the "
        f"{algorithm} kernel: {'; '.join(diffs) or 'descriptors differ'}. Every rank must pass the "
        "same count, dtype, op and algorithm; the call wrote no output on this rank, and this "
        "communicator now refuses further use"
    )
