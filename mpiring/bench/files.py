"""Rank 0's result files of one run, written so that they survive the run being cut short.

* The CSV is created (with its header) before the first point, and every row is appended
  and flushed as its point completes: a run killed at a time limit keeps every finished row,
  and ``python -m mpiring.bench.plot`` redraws from it.
* The JSON (the same rows plus the metadata) is written at the end, or when the run is
  interrupted, with ``"complete": false`` and the signal; it is replaced in one step
  (written beside, then renamed), so a reader never sees half of it.

:meth:`ResultFiles.finish` may be called from the interrupt watcher's thread while the main
thread appends: one lock orders them.
"""

from __future__ import annotations

import csv
import importlib
import os
import threading
from pathlib import Path
from typing import IO, Any

from .results import FIELDS, Row, csv_record, write_json


class ResultFiles:
    """``<base>.csv`` growing row by row, and ``<base>.json`` at the end or at an interrupt."""

    def __init__(self, base: str | Path, metadata: dict[str, Any]) -> None:
        self.base = str(base)
        self.csv_path = Path(self.base + ".csv")
        self.json_path = Path(self.base + ".json")
        self.metadata = metadata
        self.rows: list[Row] = []
        self._lock = threading.Lock()
        self._csv: IO[str] | None = None
        self._writer: Any = None

    def open(self) -> None:
        """Create the directory and the CSV with its header (before measuring: a directory
        that cannot be written fails the run before any time is spent)."""
        self.csv_path.parent.mkdir(parents=True, exist_ok=True)
        self._csv = self.csv_path.open("w", newline="")
        self._writer = csv.DictWriter(self._csv, fieldnames=FIELDS)
        self._writer.writeheader()
        self._csv.flush()

    def add(self, row: Row) -> None:
        """Append ``row`` to the CSV and push it to the operating system at once."""
        with self._lock:
            self.rows.append(row)
            if self._writer is not None and self._csv is not None:
                self._writer.writerow(csv_record(row))
                self._csv.flush()

    def finish(self, interrupted: str = "", **extra: Any) -> Path:
        """Write the JSON of the rows so far; ``interrupted`` names the signal that cut the
        run short ("" for a run that completed). ``extra`` goes into the metadata."""
        with self._lock:
            meta = dict(self.metadata, **extra)
            meta["complete"] = not interrupted
            meta["interrupted"] = interrupted or None
            meta["rows_written"] = len(self.rows)
            tmp = self.json_path.with_name(self.json_path.name + ".tmp")
            write_json(tmp, list(self.rows), meta)
            os.replace(tmp, self.json_path)
            if self._csv is not None:
                self._csv.flush()
            return self.json_path

    def close(self) -> None:
        with self._lock:
            if self._csv is not None:
                self._csv.close()
                self._csv, self._writer = None, None


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
    hint = "install the bench extra: pip install 'mpiring[bench]'"
    if plot and all(p.startswith("matplotlib") for p in problems):
        hint += ", or pass --no-plot to write the CSV and JSON without figures"
    return "cannot import " + "; ".join(problems) + f": {hint}"
