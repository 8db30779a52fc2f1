"""What rank 0 prints: a banner, an nccl-tests-like table streamed row by row under a live
progress bar, notes, and a summary. Other ranks construct a disabled reporter and print
nothing.

The table goes to stdout (plain text when piped: no colours, no wrapping); the progress bar
is live only on an interactive console (``--progress on`` forces it, e.g. under mpiexec,
which gives rank 0 a pipe).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from .results import Row
from .sizes import format_size


def fmt_time(us: float | None) -> str:
    if us is None or not math.isfinite(us):
        return "-"
    if us < 100:
        return f"{us:.2f}"
    if us < 100_000:
        return f"{us:.1f}"
    return f"{us:.0f}"


def fmt_bw(gbs: float | None) -> str:
    return "-" if gbs is None or not math.isfinite(gbs) else f"{gbs:.2f}"


def fmt_speedup(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}x"


def algo_label(row: Row) -> str:
    """The algorithm, with auto's pick at this size: ``auto:twoshot``."""
    return f"{row.algo}:{row.resolved}" if row.resolved else row.algo


_CHECK_STYLE = {"OK": "green", "FAIL": "bold red", "off": "yellow", "-": "dim"}
_STATUS_CHECK = {"error": "ERROR", "unavailable": "n/a", "inapplicable": "n/a", "skipped": "skip"}
QUIET = ("ok", "skipped", "unavailable", "inapplicable")  # statuses whose note is not printed


def _check_text(row: Row) -> Text:
    label = _STATUS_CHECK.get(row.status, row.check)
    style = {"ERROR": "bold red", "n/a": "dim", "skip": "yellow"}.get(label,
                                                                      _CHECK_STYLE.get(label, ""))
    return Text(label, style=style)


def _speedup_text(row: Row) -> Text:
    text = fmt_speedup(row.speedup)
    style = ""
    if row.speedup is not None and row.algo != row.baseline:
        style = "green" if row.speedup >= 1.0 else "yellow"
    return Text(text, style=style)


# (header, width, getter): the table's columns, nccl-tests' order where they overlap.
Column = tuple[str, int, Callable[[Row], Any]]


def columns(baseline: str, overlap: bool = False) -> list[Column]:
    """The table's columns; with ``overlap``, the two slowdowns of --overlap gemm too."""
    cols: list[Column] = [
        ("size", 9, lambda r: format_size(r.size_bytes)),
        ("count", 11, lambda r: str(r.count)),
        ("type", 8, lambda r: r.dtype),
        ("op", 4, lambda r: r.op),
        ("algo", 12, lambda r: Text(algo_label(r), style="bold" if r.algo == "ring" else "")),
        ("batches", 7, lambda r: r.batches if r.batches_used is None or r.batches != "auto"
                                 else f"auto:{r.batches_used}"),
        ("place", 5, lambda r: r.placement),
        ("time\n(us)", 9, lambda r: fmt_time(r.time_us)),
        ("min\n(us)", 9, lambda r: fmt_time(r.min_us)),
        ("max\n(us)", 9, lambda r: fmt_time(r.max_us)),
        ("std\n(us)", 8, lambda r: fmt_time(r.std_us)),
        ("algbw\n(GB/s)", 7, lambda r: fmt_bw(r.algbw_gbs)),
        ("busbw\n(GB/s)", 7, lambda r: fmt_bw(r.busbw_gbs)),
        (f"speed-up\nvs {baseline}" if baseline else "speed-up", 9, _speedup_text),
    ]
    if overlap:
        cols += [("GEMM\nslowdown", 8, lambda r: fmt_speedup(r.gemm_slowdown)),
                 ("allred.\nslowdown", 8, lambda r: fmt_speedup(r.ar_slowdown))]
    return cols + [("check", 5, _check_text)]


def table_width(cols: list[Column]) -> int:
    return sum(w for _, w, _ in cols) + len(cols)


def _table(cols: list[Column], header: bool) -> Table:
    t = Table(box=None, show_header=header, header_style="bold", pad_edge=False,
              padding=(0, 1, 0, 0), show_edge=False, expand=False)
    for i, (name, width, _) in enumerate(cols):
        t.add_column(name, width=width, justify="left" if 2 <= i <= 6 else "right",
                     no_wrap=True, overflow="ellipsis")
    return t


class Reporter:
    """Rank 0's console output; every method is a no-op when ``enabled`` is False."""

    def __init__(self, enabled: bool, progress: str = "auto", baseline: str = "",
                 overlap: bool = False) -> None:
        self.enabled = enabled
        self.cols = columns(baseline, overlap)
        self._progress: Progress | None = None
        self._task: Any = None
        if not enabled:
            return
        force = progress == "on"
        self.out = Console(highlight=False, soft_wrap=True,
                           force_terminal=True if force else None,
                           force_interactive=True if force else None)
        self._fit_width()
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.live = progress != "off" and self.out.is_interactive

    def _fit_width(self) -> None:
        # Never squeeze the table: a pipe reads as 80 columns, and so does the pseudo-terminal
        # Open MPI's mpirun gives rank 0, whatever the real terminal's width.
        self.out.width = max(self.out.width, table_width(self.cols))

    def set_baseline(self, baseline: str, overlap: bool = False) -> None:
        """The columns of this run: speed-up against ``baseline``, slowdowns with ``overlap``."""
        self.cols = columns(baseline, overlap)
        if self.enabled:
            self._fit_width()

    # -- plain output ------------------------------------------------------------------

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if self.enabled:
            console = self._progress.console if self._progress is not None else self.out
            console.print(*objects, **kwargs)

    def banner(self, title: str, lines: list[tuple[str, str]], note: str = "") -> None:
        if not self.enabled:
            return
        self.print(Text(title, style="bold"))
        if note:
            self.note(note, style="bold yellow")
        for key, value in lines:
            self.print(Text.assemble(("# ", "dim"), (f"{key:<12}", "cyan"), str(value)))

    def note(self, text: str, style: str = "yellow") -> None:
        self.print(Text("# " + text, style=style))

    def error(self, text: str) -> None:
        """An error message (stderr, and not only on rank 0's stdout)."""
        if self.enabled:
            self.err.print(Text(text, style="bold red"))

    # -- the table ---------------------------------------------------------------------

    def start(self, total: int) -> None:
        if not self.enabled:
            return
        self.print(_table(self.cols, header=True))
        if self.live:
            self._progress = Progress(
                TextColumn("[progress.description]{task.description}"),
                BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                console=self.out, transient=True, refresh_per_second=2)
            self._progress.start()
            self._task = self._progress.add_task("allreduce", total=total)

    def working_on(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text)

    def advance(self, n: int = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def row(self, row: Row) -> None:
        if not self.enabled:
            return
        t = _table(self.cols, header=False)
        t.add_row(*(getter(row) for _, _, getter in self.cols))
        self.print(t)
        if row.status not in QUIET and row.note:
            self.print(Text(f"#   {row.note}", style="red"))

    def section(self) -> None:
        """A blank line between sizes when several rows share one."""
        self.print("")

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
