"""Result rows and their files: CSV (one row per algo x size x batches x placement), JSON Lines
(the same rows, one JSON object a line) and JSON (the same rows plus a metadata block). Pure
code apart from file I/O.

Every row names the code that measured it (``mpiring``: the version, ``commit``: see
:func:`mpiring.bench.metadata.source_commit`) and says whether its repetitions spread too far
for its median to repeat (``noisy``: :func:`spread_is_wide`).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, NamedTuple


@dataclass
class Row:
    """One benchmark point of one collective (``size_bytes``: the whole buffer, as nccl-tests;
    ``count``: nccl-tests' count, one rank's block for reduce_scatter and allgather; see
    :mod:`mpiring.bench.collectives`). Times are the slowest rank's per-iteration figures in
    microseconds over the timed repetitions; bandwidths in GB/s (1e9 bytes/s), computed
    from the median time; ``speedup`` = baseline median time / this median time.

    ``resolved``: for ``auto``, the algorithm it runs at this size (empty where the
    communicator cannot say). The ``gemm_*``/``ar_*`` fields come from ``--overlap gemm``
    (see :mod:`mpiring.bench.overlap`): per-GEMM and per-allreduce times alone and at the same
    time, and their ratios (``*_slowdown`` = time with the other / time alone).

    The makespan of each ``--overlap`` shape (:data:`MAKESPAN_COLUMNS`; gemm: ``t_*``,
    ``overlap_*``; train: ``train_*``), the slowest rank's medians over the repetitions of a
    fixed work of ``*_gemms`` GEMMs and ``*_calls`` allreduce calls, equal for every algorithm
    at a size: ``t_gemm_us`` the GEMMs alone, ``t_ar_us`` the calls alone, ``t_both_us`` both
    from one start until both streams are done (microseconds, totals, not per call);
    ``overlap_eff`` = (t_gemm + t_ar - t_both) / min(t_gemm, t_ar). ``ar_sms``: the SMs the
    allreduce holds (empty: all it wants, or unknown), ``ar_sms_source`` says which and why.

    ``stated_sms`` and ``fold_traffic``: what the row itself states of one allreduce at this
    size (``Algorithm.sm_work``, :class:`mpiring.algorithms.SmWork`: for ``auto``, its pick's):
    the SMs its largest grid holds (0: copy engines or the host do all the work; at most the
    GPU's SMs), and the bytes its reduction kernels read plus write per byte of the message, per
    rank; ``stated_blocks``: that grid's thread blocks. Empty where the row states nothing (NCCL,
    MPI, other libraries' rows), for the other collectives, and for rows that did not run.
    ``replayed``: for mpiring's own rows timed eagerly, the share of the timed repetitions'
    calls (after the probe and warm-up) that were replayed (``Communicator.stats()``;
    :mod:`mpiring.call.replay`) on the rank where it is lowest: 1.0 where every one was; 0 on
    host arrays, which never replay, and for rows without a bound launch (the ring, ``nccl``)
    or checked on the host; empty for other libraries' rows and in graphs.

    ``noisy``: the slowest repetition took more than :data:`SPREAD_LIMIT` times the fastest
    (``max_us / min_us``; None where not timed), so the median may not repeat: the table marks
    its time with ``~``. ``mpiring`` and ``commit``: the code that measured the row (set when it
    is written to the run's files; empty in rows read from older files).
    """

    size_bytes: int
    count: int
    dtype: str
    op: str
    algo: str
    batches: str  # as asked: "-" (not applicable), "auto", or a number
    placement: str  # "out" or "in"
    nranks: int
    status: str  # ok, fail, error, unavailable, inapplicable (shown n/a), skipped
    check: str  # OK, FAIL, off, -
    collective: str = "allreduce"  # or reduce_scatter, allgather (size: the whole buffer)
    wrong: int | None = None  # wrong elements over all ranks (nccl-tests' #wrong); None: unchecked
    time_us: float | None = None  # median
    mean_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    std_us: float | None = None
    algbw_gbs: float | None = None
    busbw_gbs: float | None = None
    speedup: float | None = None
    baseline: str = ""
    iters: int | None = None
    warmup: int | None = None
    reps: int | None = None
    slowest_rank: int | None = None
    batches_used: int | None = None  # the mini-batch count the calls ran with
    resolved: str = ""  # auto's pick at this size
    gemm_alone_us: float | None = None
    gemm_overlap_us: float | None = None
    gemm_slowdown: float | None = None
    ar_alone_us: float | None = None
    ar_overlap_us: float | None = None
    ar_slowdown: float | None = None
    overlap_gemms: int | None = None  # gemm shape: GEMMs of the makespan's work
    overlap_calls: int | None = None  # ... and allreduce calls
    t_gemm_us: float | None = None  # T_gemm: those GEMMs alone
    t_ar_us: float | None = None  # T_ar: those calls alone
    t_both_us: float | None = None  # T_both: both from one start, until both are done
    overlap_eff: float | None = None  # (T_gemm + T_ar - T_both) / min(T_gemm, T_ar)
    train_gemms: int | None = None  # train shape: the same figures
    train_calls: int | None = None
    train_t_gemm_us: float | None = None
    train_t_ar_us: float | None = None
    train_t_both_us: float | None = None
    train_eff: float | None = None
    ar_sms: int | None = None  # SMs the allreduce holds (None: all it wants, or unknown)
    ar_sms_source: str = ""  # where ar_sms comes from (mpiring.bench.overlap.sm_hold)
    stated_sms: int | None = None  # the row's own statement (Algorithm.sm_work): SMs its largest grid holds
    stated_blocks: int | None = None  # ... that grid's thread blocks
    fold_traffic: float | None = None  # ... and its folds' memory traffic per byte, per rank
    replayed: float | None = None  # share of the timed calls replayed (lowest rank; eager mpiring rows)
    noisy: bool | None = None  # max_us / min_us > SPREAD_LIMIT: the median may not repeat
    mpiring: str = ""  # the version of mpiring that measured the row
    commit: str = ""  # its commit (metadata.source_commit): "<sha>[-dirty]", or "unknown"
    note: str = ""  # the last column: free text

    @property
    def timed(self) -> bool:
        return self.status == "ok" and self.time_us is not None


class MakespanColumns(NamedTuple):
    """The Row fields of one --overlap shape's makespan."""

    gemms: str
    calls: str
    t_gemm: str
    t_ar: str
    t_both: str
    eff: str


MAKESPAN_COLUMNS = {
    "gemm": MakespanColumns("overlap_gemms", "overlap_calls", "t_gemm_us", "t_ar_us", "t_both_us",
                            "overlap_eff"),
    "train": MakespanColumns("train_gemms", "train_calls", "train_t_gemm_us", "train_t_ar_us",
                             "train_t_both_us", "train_eff"),
}

SPREAD_LIMIT = 2.0  # noisy: the slowest repetition took more than this many times the fastest


def spread_is_wide(row: Row, limit: float = SPREAD_LIMIT) -> bool | None:
    """Whether ``row``'s repetitions spread too far for its median to mean much: the slowest
    (``max_us``) took more than ``limit`` times the fastest (``min_us``). None for a row
    without both times (not timed)."""
    if row.min_us is None or row.max_us is None or not row.min_us > 0:
        return None
    return bool(row.max_us > limit * row.min_us)


FIELDS = [f.name for f in fields(Row)]
_BOOL_FIELDS = {"noisy"}
_INT_FIELDS = {"size_bytes", "count", "nranks", "iters", "warmup", "reps", "slowest_rank",
               "batches_used", "wrong", "ar_sms", "stated_sms", "stated_blocks",
               *(c for cols in MAKESPAN_COLUMNS.values() for c in (cols.gemms, cols.calls))}
_REQUIRED = ("size_bytes", "count", "dtype", "op", "algo", "batches", "placement", "nranks",
             "status", "check")
_FLOAT_FIELDS = {"time_us", "mean_us", "min_us", "max_us", "std_us", "algbw_gbs", "busbw_gbs",
                 "speedup", "gemm_alone_us", "gemm_overlap_us", "gemm_slowdown", "ar_alone_us",
                 "ar_overlap_us", "ar_slowdown", "replayed", "fold_traffic",
                 *(c for cols in MAKESPAN_COLUMNS.values() for c in cols[2:])}


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def row_dict(row: Row) -> dict[str, Any]:
    return {k: _clean(v) for k, v in asdict(row).items()}


def _parse(name: str, text: str) -> Any:
    if name in _BOOL_FIELDS:
        return {"True": True, "False": False, "": None}[text]
    if name in _INT_FIELDS:
        return int(text) if text != "" else None
    if name in _FLOAT_FIELDS:
        return float(text) if text != "" else None
    return text


def csv_record(row: Row) -> dict[str, Any]:
    """``row`` as one CSV record: None and non-finite numbers as empty cells."""
    return {k: "" if v is None else v for k, v in row_dict(row).items()}


def write_csv(path: str | Path, rows: list[Row]) -> Path:
    path = Path(path)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow(csv_record(row))
    return path


def read_csv(path: str | Path) -> list[Row]:
    """The rows of an mpiring.bench CSV, also one cut short: a run killed while writing leaves
    a last line without all its cells, which is dropped (see :func:`read_csv_counted`)."""
    return read_csv_counted(path)[0]


def read_csv_counted(path: str | Path) -> tuple[list[Row], int]:
    """The complete rows of an mpiring.bench CSV, and how many incomplete ones were dropped.
    Columns this version does not know are ignored; ones it added since are left at their
    defaults, so older files read too."""
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [n for n in ("size_bytes", "algo", "busbw_gbs", "time_us")
                   if n not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path} is not an mpiring.bench CSV (no column {missing[0]})")
        present = set(reader.fieldnames or [])
        rows, dropped = [], 0
        while True:
            try:
                rec = next(reader)
            except StopIteration:
                break
            except csv.Error:  # a quoted cell cut at the end of the file
                dropped += 1
                break
            cut = None in rec or any(rec.get(k) is None for k in present)  # too many / few cells
            if cut or any(not rec.get(k) for k in _REQUIRED if k in present):
                dropped += 1
                continue
            try:
                known = {k: _parse(k, v) for k, v in rec.items() if k in FIELDS}
                rows.append(Row(**known))
            except (TypeError, ValueError, KeyError):  # a number cut in the middle, a missing field
                dropped += 1
    return rows, dropped


def write_json(path: str | Path, rows: list[Row], metadata: dict[str, Any]) -> Path:
    path = Path(path)
    doc = {"metadata": metadata, "fields": FIELDS, "results": [row_dict(r) for r in rows]}
    path.write_text(json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n")
    return path


def jsonl_line(row: Row) -> str:
    """``row`` as one line of a JSON Lines file (non-finite numbers as null), newline included."""
    return json.dumps(row_dict(row), allow_nan=False, default=str) + "\n"


def read_jsonl(path: str | Path) -> tuple[list[Row], int]:
    """The rows of an mpiring.bench JSON Lines file, and how many lines were dropped: a run
    killed while writing may leave a last line cut short, and every complete line before it
    is a row. Keys this version does not know are ignored."""
    rows, dropped = [], 0
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            rows.append(Row(**{k: v for k, v in rec.items() if k in FIELDS}))
        except (ValueError, TypeError):  # a cut line, or one without a required field
            dropped += 1
    return rows, dropped


def read_json(path: str | Path) -> tuple[list[Row], dict[str, Any]]:
    doc = json.loads(Path(path).read_text())
    rows = [Row(**{k: v for k, v in rec.items() if k in FIELDS}) for rec in doc["results"]]
    return rows, doc.get("metadata", {})
