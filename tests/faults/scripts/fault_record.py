"""What a rank of a fault job saw, kept where the test can read it even if the rank dies later:
``$MPIRING_FAULT_OUT/rank<r>.json``, rewritten atomically after every event. Shared by the host
fault script (tests/faults/scripts/fault.py) and the GPU one (tests/gpu/scripts/gpu_fault.py)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from mpi4py import MPI

rank = MPI.COMM_WORLD.rank
out_dir = Path(os.environ["MPIRING_FAULT_OUT"])
state: dict[str, Any] = {"rank": rank, "pid": os.getpid(), "events": [], "recorded": False}


def save() -> None:
    """Write this rank's record atomically (a reader never sees half a file)."""
    path = out_dir / f"rank{rank}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    tmp.replace(path)


def event(**facts: Any) -> None:
    state["events"].append(facts)
    save()


def wait_for(ranks: list[int], limit: float) -> None:
    """Wait (bounded) until ``ranks`` have recorded their outcome: outside MPI, since MPI may
    end the job as soon as one survivor touches MPI again while a peer is dead."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done = 0
        for r in ranks:
            with contextlib.suppress(OSError, ValueError, KeyError):  # not written yet, or mid-write
                done += json.loads((out_dir / f"rank{r}.json").read_text())["recorded"]
        if done == len(ranks):
            return
        time.sleep(0.02)


def close(comm: Any) -> None:
    """Close ``comm`` and record the outcome and how long it took."""
    start = time.monotonic()
    try:
        comm.close()
        outcome = "ok"
    except Exception as err:  # recorded for the test to judge
        outcome = f"{type(err).__name__}: {err}"
    state["close"] = {"outcome": outcome, "elapsed": time.monotonic() - start}
    save()
