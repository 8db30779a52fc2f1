"""Rank 0's result files of one run, written so that each is valid at every instant, whenever
and however the run ends (Ctrl-C, SIGTERM at a Slurm time limit, SIGKILL after it).

* ``<base>.jsonl`` (JSON Lines) and ``<base>.csv`` gain one line per row as its point
  completes, each pushed to the disk at once (flush + fsync): every complete line is a row,
  and a line cut short by a kill is the last one (:func:`~mpiring.bench.results.read_jsonl`
  and :func:`~mpiring.bench.results.read_csv` drop it).
* ``<base>.json`` (the rows so far plus the metadata) is written before the first point and
  rewritten as rows complete (at most every :data:`JSON_EVERY_S` seconds), at the end, and
  as soon as a signal arrives (``"complete": false`` and the signal's name). It is always
  replaced whole (written beside, synced, then renamed over the old one), so a reader never
  sees half of it. ``"complete": false`` with ``"interrupted": null`` means the run was still
  going when the file was last written (running, or killed without a chance to say so).

Every row is stamped with the code that measured it (``mpiring``, ``commit``: the metadata's
:func:`~mpiring.bench.metadata.provenance`). :meth:`ResultFiles.finish` may be called from the
interrupt watcher's thread while the main thread appends: one lock orders them.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from ..core.install import pip_install
from .results import FIELDS, Row, csv_record, jsonl_line, row_dict

JSON_EVERY_S = 1.0  # the JSON is rewritten after a row at most this often (and always at the end)


def _sync(f: IO[str]) -> None:
    """Push ``f``'s lines to the operating system and on to the disk."""
    f.flush()
    os.fsync(f.fileno())


def write_json_atomically(path: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` to ``path`` so that ``path`` always holds a whole JSON document: into a
    temporary file beside it, synced, then renamed over it (``os.replace``)."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as f:
        f.write(json.dumps(doc, indent=2, allow_nan=False, default=str) + "\n")
        _sync(f)
    os.replace(tmp, path)
    return path


class ResultFiles:
    """``<base>.csv`` and ``<base>.jsonl`` growing row by row, ``<base>.json`` rewritten as
    they grow, at the end and at an interrupt (module docstring)."""

    def __init__(self, base: str | Path, metadata: dict[str, Any]) -> None:
        self.base = str(base)
        self.csv_path = Path(self.base + ".csv")
        self.jsonl_path = Path(self.base + ".jsonl")
        self.json_path = Path(self.base + ".json")
        self.metadata = metadata
        self.rows: list[Row] = []
        self.version = str(metadata.get("mpiring") or "")
        self.commit = str(metadata.get("commit") or "")
        self._lock = threading.Lock()
        self._csv: IO[str] | None = None
        self._jsonl: IO[str] | None = None
        self._writer: Any = None
        self._interrupted = ""  # the signal that cut the run short, once one has
        self._json_at = 0.0  # time.monotonic() of the last JSON write

    @property
    def paths(self) -> list[Path]:
        """The files of this run that exist so far (figures aside)."""
        return [p for p in (self.csv_path, self.jsonl_path, self.json_path) if p.exists()]

    def open(self) -> None:
        """Create the directory, the CSV with its header, the empty JSON Lines file and a first
        JSON (before measuring: a directory that cannot be written fails the run before any
        time is spent)."""
        self.csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._csv = self.csv_path.open("w", newline="")
        self._writer = csv.DictWriter(self._csv, fieldnames=FIELDS)
        self._writer.writeheader()
        _sync(self._csv)
        self._jsonl = self.jsonl_path.open("w")
        _sync(self._jsonl)
        with self._lock:
            self._write_json(complete=False)

    def add(self, row: Row) -> None:
        """Stamp ``row`` with the code's version and commit, append it to the CSV and the JSON
        Lines file and push both to the disk at once; rewrite the JSON if the last write is
        :data:`JSON_EVERY_S` old."""
        row = replace(row, mpiring=self.version, commit=self.commit)
        with self._lock:
            self.rows.append(row)
            if self._writer is not None and self._csv is not None:
                self._writer.writerow(csv_record(row))
                _sync(self._csv)
            if self._jsonl is not None:
                self._jsonl.write(jsonl_line(row))
                _sync(self._jsonl)
            if self._jsonl is not None and time.monotonic() - self._json_at >= JSON_EVERY_S:
                self._write_json(complete=False)

    def finish(self, interrupted: str = "", **extra: Any) -> Path:
        """Write the JSON of the rows so far: ``interrupted`` names the signal that cut the run
        short ("" for a run that completed; once a signal is named, later calls keep it).
        ``extra`` goes into the metadata."""
        with self._lock:
            self._interrupted = interrupted or self._interrupted
            return self._write_json(complete=not self._interrupted, **extra)

    def _write_json(self, complete: bool, **extra: Any) -> Path:
        """The JSON as things stand (the caller holds the lock)."""
        meta = dict(self.metadata, **extra)
        meta["complete"] = complete
        meta["interrupted"] = self._interrupted or None
        meta["rows_written"] = len(self.rows)
        doc = {"metadata": meta, "fields": FIELDS, "results": [row_dict(r) for r in self.rows]}
        write_json_atomically(self.json_path, doc)
        self._json_at = time.monotonic()
        return self.json_path

    def close(self) -> None:
        with self._lock:
            for f in (self._csv, self._jsonl):
                if f is not None:
                    f.close()
            self._csv, self._jsonl, self._writer = None, None, None


def missing_dependencies(plot: bool) -> str:
    """Before any measuring: what the command cannot import ("" when all is there). The
    console needs ``rich``; figures need ``matplotlib`` (``--no-plot`` does without)."""
    problems = []
    for module, why in (("rich", "the console output"), ("matplotlib", "the figures")):
        if module == "matplotlib" and not plot:
            continue
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - absent or broken: say which and why
            problems.append(f"{module} ({why}): {type(err).__name__}: {err}")
    if not problems:
        return ""
    hint = f"install the bench extra: {pip_install('bench')}"
    if plot and all(p.startswith("matplotlib") for p in problems):
        hint += ", or pass --no-plot to write the CSV and JSON without figures"
    return "cannot import " + "; ".join(problems) + f": {hint}"
