"""NVLink multicast stays off: on the shared machines neither NCCL (NVLS) nor torch's symmetric
memory may create multicast objects. Set before torch or NCCL initialise (they read the
variables once); :func:`multicast_off` is called by ``python -m mpiring.bench`` at start and by
every rival's set-up."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# variable: the value that keeps multicast off
OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def multicast_off(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set the variables of :data:`OFF` where absent, and override one that would turn
    multicast on; returns a note per override (a value given on purpose is not silently lost)."""
    env = os.environ if environ is None else environ
    notes = []
    for name, value in OFF.items():
        was = env.get(name)
        if was is not None and was.strip() != value:
            notes.append(f"{name}={was} overridden to {value}: NVLink multicast stays off")
        env[name] = value
    return notes
