"""What ``algorithm="auto"`` runs, by rank count and message size: its tuning table.

The choice comes from a tuning table measured on the machine (``python -m mpiring.bench.tune``
writes one); a table for the reference machine (4 and 2 H200s on NVLink) ships with the
package. ``MPIRING_TUNING_FILE`` points at another table. Rank counts the table does not
cover use the built-in rule below. Everything here is pure: no MPI, no GPU.

File format (JSON)::

    {"format": 1, "machine": "...", "measured": "...", "dtype": "float32", "op": "sum",
     "tables": {"4": [[262144, "oneshot"], [67108864, "twoshot"], [null, "ring"]]}}

Each table lists ``[max_bytes, algorithm]`` in increasing ``max_bytes``; the first entry
whose ``max_bytes`` is at least the message size wins; ``null`` means "any size".
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import InvalidArgumentError

FORMAT = 1
SHIPPED = "tuning-h200.json"

Entry = tuple[int | None, str]


@dataclass(frozen=True)
class TuningTable:
    """Per rank count, ``(max_bytes or None, algorithm)`` entries in increasing size."""

    tables: dict[int, tuple[Entry, ...]]
    machine: str = ""
    measured: str = ""
    meta: dict = field(default_factory=dict, compare=False)

    def choose(self, world_size: int, nbytes: int) -> str:
        """The algorithm for a message of ``nbytes`` on ``world_size`` ranks."""
        entries = self.tables.get(world_size)
        if not entries:
            return builtin_choice(world_size, nbytes)
        for max_bytes, algo in entries:
            if max_bytes is None or nbytes <= max_bytes:
                return algo
        return entries[-1][1]


def _candidates() -> tuple[str, ...]:
    """The rows auto may pick on GPUs (the table's ``auto`` column)."""
    from . import auto_candidates  # the table imports nothing from here: no cycle at run time

    return auto_candidates()


def builtin_choice(world_size: int, nbytes: int) -> str:
    """The rule for rank counts no table covers: one-shot for small messages (latency),
    two-shot for medium ones (all links at once), the copy-engine ring for large ones."""
    if world_size <= 1:
        return "ring"
    if nbytes <= (256 << 10) // max(1, world_size // 4):
        return "oneshot"
    if nbytes <= 64 << 20:
        return "twoshot"
    return "ring"


def parse(data: dict, source: str = "tuning table") -> TuningTable:
    """Validate a decoded JSON table; errors name the file and the problem."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise InvalidArgumentError(f"{source}: not an mpiring tuning table of format {FORMAT}")
    tables: dict[int, tuple[Entry, ...]] = {}
    for key, rows in dict(data.get("tables", {})).items():
        try:
            world = int(key)
        except ValueError:
            raise InvalidArgumentError(f"{source}: rank count {key!r} is not an integer") from None
        entries: list[Entry] = []
        last = -1
        for row in rows:
            if not isinstance(row, (list, tuple)) or len(row) != 2:
                raise InvalidArgumentError(f"{source}: entry {row!r} for {world} ranks is not "
                                           "[max_bytes, algorithm]")
            max_bytes, algo = row
            if algo not in _candidates():
                raise InvalidArgumentError(f"{source}: unknown algorithm {algo!r} for {world} ranks "
                                           f"(choose from {', '.join(_candidates())})")
            if max_bytes is not None:
                if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= last:
                    raise InvalidArgumentError(f"{source}: sizes for {world} ranks must be increasing "
                                               f"integers, got {max_bytes!r} after {last}")
                last = max_bytes
            elif row is not rows[-1]:
                raise InvalidArgumentError(f"{source}: only the last entry for {world} ranks may "
                                           "have no size limit")
            entries.append((max_bytes, algo))
        if entries:
            tables[world] = tuple(entries)
    return TuningTable(tables, str(data.get("machine", "")), str(data.get("measured", "")),
                       {k: v for k, v in data.items() if k not in ("tables", "format")})


def to_json(table: TuningTable) -> dict:
    """The JSON form of ``table`` (inverse of :func:`parse`)."""
    out = dict(table.meta)
    out.update(format=FORMAT, machine=table.machine, measured=table.measured)
    out["tables"] = {str(w): [[m, a] for m, a in entries] for w, entries in sorted(table.tables.items())}
    return out


def load(path: str | os.PathLike | None = None) -> TuningTable:
    """The table at ``path``, else at ``MPIRING_TUNING_FILE``, else the shipped one."""
    path = path or os.environ.get("MPIRING_TUNING_FILE") or None
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise InvalidArgumentError(f"cannot read the tuning table {path}: {err}") from None
        source = str(path)
    else:
        text = resources.files("mpiring").joinpath("data", SHIPPED).read_text()
        source = f"mpiring/data/{SHIPPED}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidArgumentError(f"{source} is not valid JSON: {err}") from None
    return parse(data, source)


def from_timings(times: Iterable[tuple[int, int, str, float]]) -> dict[int, tuple[Entry, ...]]:
    """Build tables from measurements ``(world_size, nbytes, algorithm, seconds)``: at every
    measured size the fastest algorithm wins until the next measured size; runs of the same
    winner merge, and the largest size's winner covers everything beyond."""
    best: dict[int, dict[int, tuple[float, str]]] = {}
    for world, nbytes, algo, seconds in times:
        if algo not in _candidates():
            raise InvalidArgumentError(f"cannot tune with algorithm {algo!r}")
        sizes = best.setdefault(int(world), {})
        if nbytes not in sizes or seconds < sizes[nbytes][0]:
            sizes[int(nbytes)] = (float(seconds), algo)
    tables: dict[int, tuple[Entry, ...]] = {}
    for world, sizes in best.items():
        tables[world] = _merge([(n, sizes[n][1]) for n in sorted(sizes)])
    return tables


def _merge(winners: Sequence[tuple[int, str]]) -> tuple[Entry, ...]:
    entries: list[list] = []
    for nbytes, algo in winners:
        if entries and entries[-1][1] == algo:
            entries[-1][0] = nbytes
        else:
            entries.append([nbytes, algo])
    if entries:
        entries[-1][0] = None
    return tuple((m, a) for m, a in entries)
