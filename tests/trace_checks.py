"""What the ring timeline's tests check of one traced call (mpiring.trace), on the host, on GPUs
and in tools/timeline's files alike."""

from __future__ import annotations

from collections.abc import Sequence

from mpiring.ring.transports.tracing import FOLD_STEP, SEND, WAIT_FULL, Span


def span_problems(spans: Sequence[Span], ranks: int, label: str) -> list[str]:
    """What is wrong with one call's spans on a ring of ``ranks`` ranks: every transfer sent once
    in one run of seqs, folded and waited for once each, and no span before the call or
    ending before it starts."""
    if ranks == 1:
        return [] if not spans else [f"{label}: a ring of one has spans {list(spans)[:3]}"]
    sends = sorted(s.seq for s in spans if s.step == SEND)
    problems = []
    if not sends or sends != list(range(sends[0], sends[0] + len(sends))):
        problems.append(f"{label}: send seqs {sends[:6]}... are not one run")
    for step in (FOLD_STEP, WAIT_FULL):
        if sorted(s.seq for s in spans if s.step == step) != sends:
            problems.append(f"{label}: {step} seqs differ from the sends'")
    if any(s.end < s.start or s.start < 0 for s in spans):
        problems.append(f"{label}: a span ends before it starts, or before the call")
    return problems
