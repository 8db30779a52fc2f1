"""The CUDA sources of the tools' own measuring kernels (``tools/csrc/``): the gate and the empty
kernel of :mod:`tools.enqueue` (the gate also holds :mod:`tools.ce_patterns`' copies), the
folds of :mod:`tools.starve`, the rank-ordered fold of :mod:`tools.ce_patterns` and the barriers
of :mod:`tools.barrier_cost`. Pure: the modules that
launch them compile them (CuPy, or NVRTC for a context-independent library), and
``tests/tools/test_tools_kernels.py`` compiles every file in CI with every kernel named here, so
a typo fails there and not on the GPU machine. (The library's kernels: ``mpiring/cuda/csrc``.)
"""

from __future__ import annotations

from pathlib import Path

CSRC = Path(__file__).with_name("csrc")

# Each compilation unit and the extern "C" kernels its launcher looks up by name.
KERNELS: dict[str, tuple[str, ...]] = {"barrier_cost.cu": ("barriers",),
                                       "ce_patterns.cu": ("fold_ranked",),
                                       "enqueue.cu": ("empty", "gate"),
                                       "starve.cu": ("fold", "fold_chunks")}


def source(name: str) -> str:
    """The text of ``csrc/<name>``, one of :data:`KERNELS` (no includes: handed to the compiler as is)."""
    if name not in KERNELS:
        raise KeyError(f"no tools kernel source {name!r} (known: {', '.join(KERNELS)})")
    return (CSRC / name).read_text(encoding="utf-8")
