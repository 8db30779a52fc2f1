"""Set-up agreement: which set-up parameter differs on which ranks. Pure code, no MPI.

Every rank contributes one mapping of the parameters that shape shared memory or the schedule
(slot sizes, the batches rule, the algorithm table, the check setting, ...) to one allgather of
set-up (:func:`mpiring.node.groups.make_groups`); every rank then runs :func:`check_setup` on the same
list, so every rank raises the same :class:`~mpiring.core.errors.SetupError`, naming each parameter
that differs and the ranks behind each value::

    slot_bytes differs across ranks: 1048576 on ranks 0,2; 65536 on rank 1

A rank that rejected its own arguments contributes the error's text under :data:`REJECTED`
(empty when it did not): it still takes part in set-up, so that its peers raise at once
instead of waiting for it until the timeout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .errors import SetupError

REJECTED = "rejected"  # this rank's own argument error, or "" (see the module docstring)


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 1`` or ``ranks 0,2``."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ",".join(map(str, ranks))


def show(value: object) -> str:
    return "default" if value is None else str(value)


def disagreements(per_rank: Sequence[Mapping[str, object]]) -> list[str]:
    """One line per parameter whose value is not the same on every rank (in the order the
    parameters first appear), plus one per rank that rejected its arguments; [] if all agree.
    A parameter missing on a rank counts as the value ``"absent"``."""
    lines = [f"rank {r} rejected its arguments ({text})"
             for r, values in enumerate(per_rank) if (text := values.get(REJECTED))]
    keys: list[str] = []
    for values in per_rank:
        keys += [k for k in values if k not in keys and k != REJECTED]
    for key in keys:
        holders: dict[str, list[int]] = {}
        for r, values in enumerate(per_rank):
            holders.setdefault(show(values.get(key, "absent")), []).append(r)
        if len(holders) > 1:
            parts = "; ".join(f"{value} on {ranks_text(ranks)}" for value, ranks in holders.items())
            lines.append(f"{key} differs across ranks: {parts}")
    return lines


def check_setup(per_rank: Sequence[Mapping[str, object]]) -> None:
    """Raise :class:`SetupError` naming every disagreement (the same error on every rank)."""
    lines = disagreements(per_rank)
    if lines:
        raise SetupError(
            "mpiring.Communicator set-up: " + "; ".join(lines) + ". Every rank must create the "
            "communicator with the same set-up parameters (arguments and MPIRING_* variables)"
        )
