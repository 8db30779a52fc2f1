"""Process-wide counts of the GPU resources mpiring holds, so that leaks can be measured.

Every place that creates one of these counts it up, and the matching release counts it down;
:func:`live_resources` is what the lifecycle tests compare before and after.
"""

from __future__ import annotations

from collections import Counter

KINDS = ("staging", "ipc_mappings", "events", "streams", "host_status", "watchdogs")
LIVE: Counter[str] = Counter()


def live_resources() -> dict[str, int]:
    """How many of each resource kind mpiring holds right now, in this process."""
    return {kind: LIVE[kind] for kind in KINDS}
