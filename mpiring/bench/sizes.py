"""Message sizes: parsing ("1K", "8G"), printing ("64 MiB") and the nccl-tests sweep.

Pure code: no MPI, no device. Units are binary, as in nccl-tests: K = 1024 bytes.
"""

from __future__ import annotations

import math
import re

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_NAMES = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)

# Default sweeps: the paper's range on GPUs, a smaller one for host memory.
GPU_DEFAULT = ("1K", "8G")
HOST_DEFAULT = ("1K", "64M")
MAX_POINTS = 10_000


def parse_size(text: str | int) -> int:
    """Bytes in ``text``: ``"4096"``, ``"1K"``, ``"1KB"``, ``"1KiB"``, ``"1.5M"``, ``"8G"``.

    Suffixes are binary (K = 1024), as in nccl-tests; a fraction must give whole bytes.
    """
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise ValueError(
                f"cannot read size {text!r}: use bytes with an optional K, M, G or T suffix "
                "(binary units), e.g. 512, 1K, 64M, 8G"
            )
        number, unit = m.group(1), m.group(2).upper()
        scaled = float(number) * UNITS[unit]
        if not scaled.is_integer():
            raise ValueError(f"size {text!r} is not a whole number of bytes")
        value = int(scaled)
    if value < 0:
        raise ValueError(f"size {text!r} is negative")
    return value


def format_size(nbytes: int) -> str:
    """A short binary-unit label: ``1 KiB``, ``1.5 MiB``, ``8 GiB``, ``100 B``."""
    for name, unit in _NAMES:
        if nbytes >= unit:
            value = nbytes / unit
            text = f"{value:.4g}" if not value.is_integer() else str(int(value))
            return f"{text} {name}"
    return f"{nbytes} B"


def sweep(minbytes: int, maxbytes: int, stepfactor: float | None = 2,
          stepbytes: int | None = None) -> list[int]:
    """Sizes from ``minbytes`` up to ``maxbytes`` inclusive, stepping like nccl-tests:
    multiplied by ``stepfactor`` (``-f``), or, when ``stepbytes`` is given (``-i``), increased
    by ``stepbytes``."""
    if minbytes < 1:
        raise ValueError(f"minimum size must be at least 1 byte, got {minbytes}")
    if maxbytes < minbytes:
        raise ValueError(f"maximum size {maxbytes} is below the minimum size {minbytes}")
    if stepbytes is not None and stepfactor is not None:
        raise ValueError("give a step factor (-f) or a step in bytes (-i), not both")
    if stepbytes is not None:
        if stepbytes < 1:
            raise ValueError(f"step in bytes must be at least 1, got {stepbytes}")
        npoints = (maxbytes - minbytes) // stepbytes + 1
    else:
        if stepfactor is None:
            stepfactor = 2
        if not stepfactor > 1 or not math.isfinite(stepfactor):
            raise ValueError(f"step factor must be greater than 1, got {stepfactor}")
        npoints = int(math.log(maxbytes / minbytes, stepfactor)) + 2
    if npoints > MAX_POINTS:
        raise ValueError(f"that sweep has {npoints} sizes, more than {MAX_POINTS}: widen the step")
    factor = 2.0 if stepfactor is None else float(stepfactor)
    sizes, size = [], minbytes
    while size <= maxbytes:
        sizes.append(size)
        if stepbytes is not None:
            size += stepbytes
        else:
            size = max(size + 1, int(size * factor))
    return sizes


def element_counts(sizes: list[int], itemsize: int) -> list[tuple[int, int]]:
    """``(bytes, count)`` per size for elements of ``itemsize`` bytes: the count rounds down,
    sizes below one element are dropped and sizes that round to the same count kept once."""
    out, seen = [], set()
    for size in sizes:
        count = size // itemsize
        if count < 1 or count in seen:
            continue
        seen.add(count)
        out.append((count * itemsize, count))
    return out
