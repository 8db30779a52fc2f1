"""What ``algorithm="auto"`` runs, by machine, rank count, message size and kind of call: its
tuning table. Pure: no MPI, no GPU (:mod:`mpiring.auto.tuning` finds the files, :mod:`mpiring.auto.machine`
tells the machine).

A table is measured on one kind of machine (``mpiring-tune`` measures this one) and
says which: the GPU model and the link between the node's GPUs (a
:class:`~mpiring.auto.machine.MachineKey` adds the ranks on the node). Per rank count it holds up to
three ladders of ``[max_bytes, algorithm]``: ``eager``, for calls made from Python one by one
(bound by the host, 15-30 µs each on an H200), and ``graph``, for calls replayed from a CUDA
graph (bound by the GPU, ~5 µs), whose winners differ; and ``overlap``, for calls the caller
says run beside compute: the algorithm with the smallest *makespan* when the allreduce runs
beside a GEMM on another stream (``T_both`` of ``python -m mpiring.bench --overlap gemm``,
measured by ``mpiring-tune --overlap``), which is not always the fastest alone: an
algorithm that moves data with the copy engines may lose alone and still hide best, since it
leaves the GEMM its SMs. ``graph`` and ``overlap`` are optional: eager serves in their place.
An overlap pick that cannot be captured gives way, inside a capture, to the graph choice.

Format 2 (JSON), what the tuner writes::

    {"format": 2, "gpu": "NVIDIA H200", "link": "nvlink", "dtype": "float32", "op": "sum",
     "runs": {"2": {...where, when and from what it was measured...}},
     "tables": {"2": {"eager": [[2048, "nccl"], [536870912, "twoshot"], [null, "ring"]],
                      "graph": [[1048576, "oneshot"], [null, "twoshot"]],
                      "overlap": [[268435456, "ring"], [null, "nccl"]],
                      "overlap_from": 67108864}}}

``"gpu"`` or ``"link"`` left out (or null) means "any". Format 1, written before machine keys,
still reads: a table for any GPU and link, eager entries only::

    {"format": 1, "tables": {"4": [[262144, "oneshot"], [67108864, "twoshot"], [null, "ring"]]}}

Each ladder lists entries in increasing ``max_bytes``; the first whose ``max_bytes`` is at
least the message size wins; ``null`` means "any size"; the last entry covers larger sizes even
with a limit. Algorithm names are rows of the algorithm table marked ``auto``
(:func:`mpiring.algorithms.auto_candidates`); graph entries must be rows that can be captured,
overlap entries may be any (the ring too); either needs eager entries for its rank count.
``overlap_from`` (optional, with overlap entries) is the smallest size measured beside compute,
where that sweep began above the eager one: below it nothing says what hides best, and an
overlapped call picks as any other (a makespan run of 64 MiB to 1 GiB must not send an 8 KiB
call to the ring).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import settings
from ..core.errors import InvalidArgumentError

if TYPE_CHECKING:
    from .machine import MachineKey

FORMAT = 2  # what to_json writes
FORMATS = (1, 2)  # what parse reads
SHIPPED = "tuning-h200.json"
EAGER, GRAPH, OVERLAP = "eager", "graph", "overlap"
LADDERS = (EAGER, GRAPH, OVERLAP)
OVERLAP_FROM = "overlap_from"  # per rank count: the smallest size the overlap entries measured

Entry = tuple[int | None, str]
Entries = tuple[Entry, ...]


def pick(entries: Entries, nbytes: int) -> str:
    """The algorithm of the first entry whose limit holds ``nbytes`` (the last one past all)."""
    for max_bytes, algo in entries:
        if max_bytes is None or nbytes <= max_bytes:
            return algo
    return entries[-1][1]


@dataclass(frozen=True)
class TuningTable:
    """One kind of machine's table: per rank count, eager entries (``tables``) and, optionally,
    graph entries (``graph``) and overlap entries (``overlap``: the smallest makespan beside a
    GEMM, from the size ``overlap_from`` holds, else every size); ``gpu``/``link`` None: any."""

    tables: dict[int, Entries]
    machine: str = ""
    measured: str = ""
    meta: dict = field(default_factory=dict, compare=False)
    graph: dict[int, Entries] = field(default_factory=dict)
    gpu: str | None = None
    link: str | None = None
    overlap: dict[int, Entries] = field(default_factory=dict)
    overlap_from: dict[int, int] = field(default_factory=dict)

    def choose(self, world_size: int, nbytes: int, graph: bool = False,
               overlap: bool = False) -> str:
        """The algorithm for a message of ``nbytes`` on ``world_size`` ranks; ``graph``: while
        a CUDA graph is being captured (the graph entries, else the eager ones); ``overlap``:
        the call runs beside compute (the overlap entries, where this rank count has them and
        from the smallest size they measured, unless a capture is running and their pick cannot
        be captured: then as ``graph``)."""
        if overlap:
            ladder = self.overlap.get(world_size)
            if ladder and nbytes >= self.overlap_from.get(world_size, 0):
                algo = pick(ladder, nbytes)
                if not graph or _capturable(algo):
                    return algo
        entries = (self.graph.get(world_size) if graph else None) or self.tables.get(world_size)
        if not entries:
            return builtin_choice(world_size, nbytes)
        return pick(entries, nbytes)

    def differs(self, world_size: int, nbytes: int, overlap: bool = False) -> bool:
        """Whether a call of ``nbytes`` (beside compute: ``overlap``) picks otherwise while a
        graph is being captured (only then need the dispatcher ask whether one is)."""
        if not self.graph.get(world_size) and not (overlap and self.overlap.get(world_size)):
            return False
        return (self.choose(world_size, nbytes, graph=True, overlap=overlap)
                != self.choose(world_size, nbytes, overlap=overlap))

    def has_overlap(self, world_size: int) -> bool:
        """Whether ``world_size`` ranks have overlap entries (without, ``overlap=True`` picks
        as eager and graph calls do)."""
        return bool(self.overlap.get(world_size))

    def sm_budget(self, world_size: int) -> int | None:
        """The SM budget this rank count's entries were measured under (``mpiring-tune
        --sm-budget N`` records it in ``runs``); None: none, as in tables written before budgets
        existed. A budget changes the winners: a two-shot held to 16 SMs is ~5x slower alone."""
        return _run_budget((self.meta.get("runs") or {}).get(str(world_size)))

    def covers(self, key: MachineKey) -> bool:
        """Whether this table serves the machine ``key`` (its model, link and rank count)."""
        return (key.ranks in self.tables and self.gpu in (None, key.gpu)
                and self.link in (None, key.link))

    def describe_machine(self) -> str:
        """``NVIDIA H200, nvlink, 2 and 4 ranks`` (``any GPU``, ``any link`` where unsaid)."""
        counts = sorted(self.tables)
        ranks = (" and ".join(map(str, counts)) if len(counts) < 3
                 else ", ".join(map(str, counts[:-1])) + f" and {counts[-1]}")
        return (f"{self.gpu or 'any GPU'}, {self.link or 'any link'}, "
                f"{ranks or 'no'} rank{'' if counts == [1] else 's'}")


def _candidates() -> tuple[str, ...]:
    """The rows auto may pick on GPUs (the table's ``auto`` column)."""
    from ..algorithms import auto_candidates  # the table imports nothing from here: no cycle at run time

    return auto_candidates()


def _capturable(name: str) -> bool:
    from ..algorithms import get

    return get(name).graph_capturable


def builtin_choice(world_size: int, nbytes: int) -> str:
    """The rule for machines no table covers: one-shot for small messages (latency),
    two-shot for medium ones (all links at once), the copy-engine ring for large ones."""
    if world_size <= 1:
        return "ring"
    if nbytes <= (256 << 10) // max(1, world_size // 4):
        return "oneshot"
    if nbytes <= 64 << 20:
        return "twoshot"
    return "ring"


def _label(data: dict, name: str, source: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{source}: {name!r} must be a non-empty string (or null for "
                                   f"any), got {value!r}")
    return value


def _run_budget(run: Any) -> int | None:
    """A ``runs`` entry's ``sm_budget``: the tuner's flat entry, or the eager sweep's (shipped)."""
    if not isinstance(run, dict):
        return None
    if "sm_budget" not in run and isinstance(run.get(EAGER), dict):
        run = run[EAGER]
    budget = run.get("sm_budget")
    return budget if isinstance(budget, int) and not isinstance(budget, bool) else None


def _check_runs(runs: Any, source: str) -> None:
    """``runs`` maps rank counts to what was measured; a recorded ``sm_budget`` is null or a
    positive number of SMs (auto looks tables up by it: a typo must not pass as "no budget")."""
    if runs is None:
        return
    if not isinstance(runs, dict):
        raise InvalidArgumentError(f"{source}: \"runs\" must map rank counts to what was measured")
    for key, run in runs.items():
        for entry in (run, *(run.values() if isinstance(run, dict) else ())):
            budget = entry.get("sm_budget") if isinstance(entry, dict) else None
            if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)
                                       or budget < 1):
                raise InvalidArgumentError(f"{source}: runs for {key} ranks: sm_budget {budget!r} "
                                           "is not a positive number of SMs (or null: none)")


def _entries(rows: Any, where: str, source: str, graph: bool = False) -> Entries:
    """One ladder, checked: ``where`` names it in errors (``4 ranks``, ``4 ranks (graph)``)."""
    if not isinstance(rows, list):
        raise InvalidArgumentError(f"{source}: the entries for {where} must be a list of "
                                   f"[max_bytes, algorithm], got {rows!r}")
    entries: list[Entry] = []
    last = -1
    for row in rows:
        if not isinstance(row, (list, tuple)) or len(row) != 2:
            raise InvalidArgumentError(f"{source}: entry {row!r} for {where} is not "
                                       "[max_bytes, algorithm]")
        max_bytes, algo = row
        if algo not in _candidates():
            raise InvalidArgumentError(f"{source}: unknown algorithm {algo!r} for {where} "
                                       f"(choose from {', '.join(_candidates())})")
        if graph and not _capturable(algo):
            raise InvalidArgumentError(f"{source}: {algo!r} cannot be captured into a CUDA graph, "
                                       f"so it cannot be a graph entry for {where}")
        if max_bytes is not None:
            if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= last:
                raise InvalidArgumentError(f"{source}: sizes for {where} must be increasing "
                                           f"integers, got {max_bytes!r} after {last}")
            last = max_bytes
        elif row is not rows[-1]:
            raise InvalidArgumentError(f"{source}: only the last entry for {where} may "
                                       "have no size limit")
        entries.append((max_bytes, algo))
    return tuple(entries)


def _rank_count(key: Any, source: str) -> int:
    try:
        world = int(key)
    except ValueError:
        raise InvalidArgumentError(f"{source}: rank count {key!r} is not an integer") from None
    if world < 1:
        raise InvalidArgumentError(f"{source}: rank count {key!r} must be at least 1")
    return world


def parse(data: Any, source: str = "tuning table") -> TuningTable:
    """Validate a decoded JSON table (format 1 or 2); errors name the file and the problem."""
    fmt = data.get("format") if isinstance(data, dict) else None
    if fmt not in FORMATS or isinstance(fmt, bool):
        raise InvalidArgumentError(f"{source}: not an mpiring tuning table of format 1 or 2 "
                                   f"(its \"format\" is {fmt!r})")
    raw = data.get("tables", {})
    if not isinstance(raw, dict):
        raise InvalidArgumentError(f"{source}: \"tables\" must map rank counts to entries")
    eager: dict[int, Entries] = {}
    extra: dict[str, dict[int, Entries]] = {GRAPH: {}, OVERLAP: {}}
    overlap_from: dict[int, int] = {}
    for key, value in raw.items():
        world = _rank_count(key, source)
        ladders = {EAGER: value} if fmt == 1 else value
        if fmt == 2 and (not isinstance(value, dict) or EAGER not in value):
            raise InvalidArgumentError(f"{source}: the table for {world} ranks must be "
                                       '{"eager": [...], "graph": [...], "overlap": [...]} '
                                       "(graph and overlap optional)")
        unknown = sorted(set(ladders) - {*LADDERS, OVERLAP_FROM})
        if unknown:
            raise InvalidArgumentError(f"{source}: unknown key {unknown[0]!r} in the table for "
                                       f"{world} ranks (expected {EAGER!r}, {GRAPH!r}, "
                                       f"{OVERLAP!r} or {OVERLAP_FROM!r})")
        entries = _entries(ladders[EAGER], f"{world} ranks", source)
        if entries:
            eager[world] = entries
        for kind in (GRAPH, OVERLAP):
            if ladders.get(kind) is None:
                continue
            entries = _entries(ladders[kind], f"{world} ranks ({kind})", source,
                               graph=kind == GRAPH)
            if entries and world not in eager:
                raise InvalidArgumentError(f"{source}: {world} ranks have {kind} entries but no "
                                           "eager ones (eager serves the other calls)")
            if entries:
                extra[kind][world] = entries
        start = ladders.get(OVERLAP_FROM)
        if start is not None:
            if isinstance(start, bool) or not isinstance(start, int) or start < 1:
                raise InvalidArgumentError(f"{source}: {OVERLAP_FROM} for {world} ranks must be a "
                                           f"size in bytes of at least 1, got {start!r}")
            if world not in extra[OVERLAP]:
                raise InvalidArgumentError(f"{source}: {world} ranks have {OVERLAP_FROM} but no "
                                           "overlap entries")
            overlap_from[world] = start
    _check_runs(data.get("runs"), source)
    gpu, link = (None, None) if fmt == 1 else (_label(data, "gpu", source), _label(data, "link", source))
    meta = {k: v for k, v in data.items() if k not in ("tables", "format", "gpu", "link")}
    return TuningTable(eager, str(data.get("machine", "")), str(data.get("measured", "")), meta,
                       extra[GRAPH], gpu, link, extra[OVERLAP], overlap_from)


def loads(text: str, source: str) -> TuningTable:
    """Parse the JSON text of a table file; errors name ``source``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidArgumentError(f"{source} is not valid JSON: {err}") from None
    return parse(data, source)


def to_json(table: TuningTable) -> dict:
    """The JSON form of ``table``, format 2 (inverse of :func:`parse`)."""
    out = dict(table.meta)
    out.update(format=FORMAT, gpu=table.gpu, link=table.link, machine=table.machine,
               measured=table.measured)
    out["tables"] = {str(w): {EAGER: _rows(entries),
                              **({GRAPH: _rows(table.graph[w])} if w in table.graph else {}),
                              **({OVERLAP: _rows(table.overlap[w])} if w in table.overlap
                                 else {}),
                              **({OVERLAP_FROM: table.overlap_from[w]} if w in table.overlap_from
                                 else {})}
                     for w, entries in sorted(table.tables.items())}
    return out


def _rows(entries: Entries) -> list[list]:
    return [[m, a] for m, a in entries]


def load(path: str | os.PathLike | None = None) -> TuningTable:
    """The table at ``path``, else at ``MPIRING_TUNING_FILE``, else the shipped one."""
    path = path or settings.text("MPIRING_TUNING_FILE")
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise InvalidArgumentError(f"cannot read the tuning table {path}: {err}") from None
        return loads(text, str(path))
    text = resources.files("mpiring").joinpath("data", SHIPPED).read_text()
    return loads(text, f"mpiring/data/{SHIPPED}")


# A size whose fastest candidate differs from the common winner of the sizes on both sides
# goes to that winner where its time there is within this fraction of the fastest: one noisy
# point must not carve a one-size entry into the ladder (4 x H200, eager 8 KiB: oneshot-ll's
# median 10.7 us in a run where its own minimum, and its time at 4 and 16 KiB, were 7.0-7.5 us).
NOISE = 0.05


def from_timings(times: Iterable[tuple[int, int, str, float]]) -> dict[int, Entries]:
    """Build tables from measurements ``(world_size, nbytes, algorithm, seconds)``: at every
    measured size the fastest algorithm wins until the next measured size, except that a size
    between two sizes won by the same algorithm goes to it where it is within :data:`NOISE` of
    the fastest there; runs of the same winner merge, and the largest size's winner covers
    everything beyond."""
    measured: dict[int, dict[int, dict[str, float]]] = {}
    for world, nbytes, algo, seconds in times:
        if algo not in _candidates():
            raise InvalidArgumentError(f"cannot tune with algorithm {algo!r}")
        at = measured.setdefault(int(world), {}).setdefault(int(nbytes), {})
        at[algo] = min(float(seconds), at.get(algo, float("inf")))
    tables: dict[int, Entries] = {}
    for world, sizes in measured.items():
        ordered = [sizes[n] for n in sorted(sizes)]
        winners = [min(sorted(at), key=at.__getitem__) for at in ordered]  # ties: by name
        for i in range(1, len(winners) - 1):
            around, at = winners[i - 1], ordered[i]
            if (winners[i + 1] == around != winners[i] and around in at
                    and at[around] <= (1 + NOISE) * at[winners[i]]):
                winners[i] = around
        tables[world] = _merge(list(zip(sorted(sizes), winners, strict=True)))
    return tables


def overlap_starts(times: Iterable[tuple[int, int, str, float]],
                   overlap_times: Iterable[tuple[int, int, str, float]]) -> dict[int, int]:
    """Per rank count, ``overlap_from`` of the overlap entries built from ``overlap_times``
    (makespans) beside eager entries from ``times``: their smallest size, where it is above the
    eager one's (below it nothing was measured beside compute); none where the sweeps began
    alike."""
    def smallest(measured: Iterable[tuple[int, int, str, float]]) -> dict[int, int]:
        out: dict[int, int] = {}
        for world, nbytes, _, _ in measured:
            out[int(world)] = min(int(nbytes), out.get(int(world), int(nbytes)))
        return out

    eager, beside = smallest(times), smallest(overlap_times)
    return {world: start for world, start in beside.items() if start > eager.get(world, 0)}


def _merge(winners: Sequence[tuple[int, str]]) -> Entries:
    entries: list[list] = []
    for nbytes, algo in winners:
        if entries and entries[-1][1] == algo:
            entries[-1][0] = nbytes
        else:
            entries.append([nbytes, algo])
    if entries:
        entries[-1][0] = None
    return tuple((m, a) for m, a in entries)
