"""Where a ring call is stuck, from the values of its flags: pure diagnosis for the timeout errors.

The GPU watchdog reads a stuck rank's ring flags and asks :func:`stall_error` which wait they
do not satisfy; the host pipeline uses :func:`locate` to say where a timed-out wait happened.
When a call is stuck is :class:`mpiring.node.timeouts.ProgressClock`'s rule: once it has gone
the timeout without progress. No MPI, no device.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.errors import MpiringTimeoutError
from .schedule import FIRST_SEQ, SLOTS, RingPlan, Transfer, rank_script


def locate(err: MpiringTimeoutError, plan: RingPlan, tr: Transfer, is_send: bool, seq: int) -> None:
    """Add to a timed-out wait where in the ring call it happened."""
    phase = "reduce-scatter" if tr.reduce else "all-gather"
    step = f"{tr.step + 1} of {plan.steps} ({phase})"
    where = (f"in the ring algorithm, step {step}, batch {tr.batch + 1} of {plan.batches}, "
             f"{'send' if is_send else 'fold'} of transfer seq {seq}")
    err.locate(where, algorithm="ring", step=step, seq=seq)


RingFlags = tuple[tuple[int, int], tuple[int, int]]  # (full[0], full[1]), (free[0], free[1])


def ring_stall(plan: RingPlan, rank: int, base: int, full: tuple[int, int],
               free: tuple[int, int]) -> tuple[bool, Transfer, int] | None:
    """Where a ring call of ``rank`` whose first transfer is ``base`` is stuck, given the
    latest values of its flags (``full[k]``/``free[k]``: what slot k's signals last said):
    ``(is_send, transfer, seq)`` of the first wait in issue order that they do not satisfy,
    or None if none is waiting. Flags only grow, so one value per slot says it all."""
    if plan.size == 1:
        return None
    for is_send, tr in rank_script(plan, rank):
        seq = base + tr.index
        slot = seq % SLOTS
        if is_send and seq - SLOTS >= FIRST_SEQ and free[slot] < seq - SLOTS:
            return True, tr, seq
        if not is_send and full[slot] < seq:
            return False, tr, seq
    return None


def stall_error(plan: RingPlan, rank: int, base: int, full: tuple[int, int], free: tuple[int, int],
                timeout: float, hint: str, names: Sequence[int] | None = None) -> MpiringTimeoutError:
    """The timeout error of a ring call stuck as the flags say (see :func:`ring_stall`).
    ``names[p]`` is the communicator rank at place ``p`` of the ring (default: the same numbers;
    a ring across one node of a communicator that spans several has other names)."""
    stall = ring_stall(plan, rank, base, full, free)
    name = list(names) if names is not None else list(range(plan.size))
    if stall is None:
        err = MpiringTimeoutError(name[rank], timeout, "the ring call to finish on the GPU (no wait for a "
                                  "peer is pending: the GPU itself is busy or hung)", hint=hint)
        return err.locate(f"in the ring algorithm, transfers seq {base}..{base + plan.num_transfers - 1}",
                          algorithm="ring")
    is_send, tr, seq = stall
    slot = seq % SLOTS
    nxt, prv = (rank + 1) % plan.size, (rank - 1) % plan.size
    if is_send:
        err = MpiringTimeoutError(name[rank], timeout, f"rank {name[nxt]} to free slot {slot} "
                                  f"(seq {seq - SLOTS})", peer=name[nxt], hint=hint)
    else:
        err = MpiringTimeoutError(name[rank], timeout, f"rank {name[prv]} to fill slot {slot} "
                                  f"(seq {seq})", peer=name[prv], hint=hint)
    locate(err, plan, tr, is_send, seq)
    return err
