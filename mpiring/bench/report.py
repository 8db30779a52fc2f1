"""What rank 0 prints: a banner, an nccl-tests-like table streamed row by row under a live
progress bar, notes, and a summary; or, with ``--nccl-tests``, nccl-tests' own text table
(:mod:`mpiring.bench.nccl_format`). Other ranks construct a disabled reporter and print
nothing.

Colours, cursor codes and the live progress bar appear only on a terminal
(:func:`is_terminal`): anything else gets plain text, so logs hold no control sequences.
Under Open MPI rank 0 writes into a pseudo-terminal even when ``mpirun``'s output goes to a
file, so there ``--progress auto`` counts as no terminal; ``--progress on`` forces them.

The console is rich's (the bench extra). Where rich is not installed, as for ``mpiring-tune``
without that extra, :mod:`.plain` prints the same text without colours and without the bar.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table
    from rich.text import Text
else:
    try:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text
    except ImportError:  # mpiring-tune without the bench extra: plain text, no live bar
        from .plain import Console, Table, Text

from .. import algorithms
from .algorithms import picks_per_size
from .nccl_format import NcclTestsTable
from .overlap import GEMM, SHAPES, sms_label
from .results import MAKESPAN_COLUMNS, Row
from .sizes import format_size

HAVE_RICH = Console.__module__.startswith("rich")  # else mpiring.bench.plain's stand-ins

# Set by launchers that hand their processes a pseudo-terminal whatever their own output is.
PTY_LAUNCHERS = ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


def is_terminal(stream: IO[str], progress: str, environ: Any = None) -> bool:
    """Whether ``stream`` gets colours and the live bar: ``on`` always, ``off`` never, ``auto``
    when it is a terminal that no launcher's pseudo-terminal could be standing in for, and
    ``TERM`` is not ``dumb``."""
    env = os.environ if environ is None else environ
    if progress in ("on", "off"):
        return progress == "on"
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # closed or not a real stream
        return False
    return tty and not any(v in env for v in PTY_LAUNCHERS) and env.get("TERM") != "dumb"


def fmt_time(us: float | None) -> str:
    if us is None or not math.isfinite(us):
        return "-"
    if us < 100:
        return f"{us:.2f}"
    if us < 100_000:
        return f"{us:.1f}"
    return f"{us:.0f}"


def time_cell(row: Row) -> str:
    """The table's time: the median, marked ``~`` where the repetitions spread too far for it
    to repeat (``row.noisy``)."""
    text = fmt_time(row.time_us)
    return "~" + text if row.noisy and text != "-" else text


def fmt_bw(gbs: float | None) -> str:
    return "-" if gbs is None or not math.isfinite(gbs) else f"{gbs:.2f}"


def fmt_speedup(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}x"


def fmt_ms(us: float | None) -> str:
    """A makespan-sized time, given in microseconds, in milliseconds."""
    if us is None or not math.isfinite(us):
        return "-"
    ms = us / 1e3
    return f"{ms:.3f}" if ms < 10 else f"{ms:.2f}" if ms < 100 else f"{ms:.1f}"


def fmt_eff(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"


def fmt_traffic(x: float | None) -> str:
    """Bytes per byte: two decimals, "-" where not stated."""
    return "-" if x is None or not math.isfinite(x) else f"{x:.2f}"


def stated_sms_cell(row: Row) -> str:
    return "-" if row.stated_sms is None else str(row.stated_sms)


def sms_cell(row: Row) -> str:
    """The SMs the allreduce holds: a number, "all", "?", or "-" where not measured."""
    return sms_label(row.ar_sms, row.ar_sms_source) if row.ar_sms_source else "-"


def algo_label(row: Row) -> str:
    """The algorithm, with auto's pick at this size: ``auto:twoshot``."""
    return f"{row.algo}:{row.resolved}" if row.resolved else row.algo


_STATUS_CHECK = {"error": "ERROR", "unavailable": "n/a", "inapplicable": "n/a", "skipped": "skip"}
_LABEL_STYLE = {"ERROR": "bold red", "n/a": "dim", "skip": "yellow", "off": "yellow", "-": "dim"}
QUIET = ("ok", "skipped", "unavailable", "inapplicable")  # statuses whose note is not printed


def wrong_label(row: Row) -> str:
    """The #wrong column: the wrong elements over all ranks, ``off`` unchecked, or what
    happened instead (n/a, ERROR, skip)."""
    if row.status in _STATUS_CHECK:
        return _STATUS_CHECK[row.status]
    if row.wrong is not None:
        return str(row.wrong)
    return {"OK": "0", "FAIL": "FAIL"}.get(row.check, row.check)


def _check_text(row: Row) -> Text:
    label = wrong_label(row)
    style = _LABEL_STYLE.get(label, "green" if label == "0" else "bold red")
    return Text(label, style=style)


def _speedup_text(row: Row) -> Text:
    text = fmt_speedup(row.speedup)
    style = ""
    if row.speedup is not None and row.algo != row.baseline:
        style = "green" if row.speedup >= 1.0 else "yellow"
    return Text(text, style=style)


# (header, width, getter): the table's columns, nccl-tests' order where they overlap.
Column = tuple[str, int, Callable[[Row], Any]]


def _field(name: str, fmt: Callable[[Any], str]) -> Callable[[Row], str]:
    return lambda r: fmt(getattr(r, name))


def overlap_columns(shapes: Sequence[str]) -> list[Column]:
    """The columns of --overlap's ``shapes``: with gemm its two slowdowns; per shape T_gemm,
    T_ar and T_both (ms: the fixed work's totals) and the efficiency; the SMs held."""
    cols: list[Column] = []
    if GEMM in shapes:
        cols += [("GEMM\nslowdown", 8, lambda r: fmt_speedup(r.gemm_slowdown)),
                 ("allred.\nslowdown", 8, lambda r: fmt_speedup(r.ar_slowdown))]
    for shape in (s for s in SHAPES if s in shapes):
        c = MAKESPAN_COLUMNS[shape]
        pre = "" if shape == GEMM else f"{shape} "
        cols += [(f"{pre}T_gemm\n(ms)", len(pre) + 6, _field(c.t_gemm, fmt_ms)),
                 (f"{pre}T_ar\n(ms)", max(6, len(pre) + 4), _field(c.t_ar, fmt_ms)),
                 (f"{pre}T_both\n(ms)", len(pre) + 6, _field(c.t_both, fmt_ms)),
                 (f"{shape if pre else 'overlap'}\neff.", 7, _field(c.eff, fmt_eff))]
    if shapes:
        cols.append(("SMs\nheld", 4, sms_cell))
    return cols


ALGO_WIDTH = 16  # the algo column: "torch-symm-1shot", "auto:ring-events"


def algo_width(algos: Sequence[str] = ()) -> int:
    """The algo column's width: :data:`ALGO_WIDTH`, or as wide as ``<row>:<pick>`` for a row
    of ``algos`` that shows auto's pick under a longer name (``auto-reproducible:mpi-twoshot``)."""
    pick = max(map(len, algorithms.names(with_auto=False)))
    return max([ALGO_WIDTH] + [len(a) + 1 + pick for a in algos if picks_per_size(a)])


def columns(baseline: str, overlap: Sequence[str] = (), algos: Sequence[str] = ()) -> list[Column]:
    """The table's columns; with ``overlap`` (its shapes), those of --overlap too; the algo
    column fits the names of ``algos`` (:func:`algo_width`)."""
    cols: list[Column] = [
        ("size", 9, lambda r: format_size(r.size_bytes)),
        ("count", 11, lambda r: str(r.count)),
        ("type", 8, lambda r: r.dtype),
        ("op", 4, lambda r: "none" if r.collective == "allgather" else r.op),
        ("algo", algo_width(algos),
         lambda r: Text(algo_label(r), style="bold" if r.algo == "ring" else "")),
        ("batches", 7, lambda r: r.batches if r.batches_used is None or r.batches != "auto"
                                 else f"auto:{r.batches_used}"),
        ("place", 5, lambda r: r.placement),
        ("time\n(us)", 9, time_cell),
        ("min\n(us)", 9, lambda r: fmt_time(r.min_us)),
        ("max\n(us)", 9, lambda r: fmt_time(r.max_us)),
        ("std\n(us)", 8, lambda r: fmt_time(r.std_us)),
        ("algbw\n(GB/s)", 7, lambda r: fmt_bw(r.algbw_gbs)),
        ("busbw\n(GB/s)", 7, lambda r: fmt_bw(r.busbw_gbs)),
        (f"speed-up\nvs {baseline}" if baseline else "speed-up", max(9, len(baseline) + 3),
         _speedup_text),  # as wide as the baseline's name: "vs torch-symm-1shot"
        ("SMs\nstated", 6, stated_sms_cell),  # the row's own statement: Row.stated_sms
        ("fold\nB/B", 5, lambda r: fmt_traffic(r.fold_traffic)),
    ]
    return cols + overlap_columns(overlap) + [("#wrong", 6, _check_text)]


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
                 overlap: Sequence[str] = (), plain: bool = False) -> None:
        self.enabled = enabled
        self.cols = columns(baseline, overlap)
        self.plain = plain  # nccl-tests' text table instead of mpiring's
        self.nccl_table = NcclTestsTable(("out", "in"))
        self._progress: Progress | None = None
        self._task: Any = None
        self.live = False
        if not enabled:
            return
        terminal = is_terminal(sys.stdout, progress)
        self.out = Console(highlight=False, soft_wrap=True, force_terminal=terminal,
                           force_interactive=terminal, no_color=not terminal)
        self._fit_width()
        err_terminal = is_terminal(sys.stderr, progress)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True,
                           force_terminal=err_terminal, no_color=not err_terminal)
        self.live = terminal and progress != "off" and HAVE_RICH

    def _fit_width(self) -> None:
        # Never squeeze the table: a pipe reads as 80 columns, and so does the pseudo-terminal
        # Open MPI's mpirun gives rank 0, whatever the real terminal's width.
        self.out.width = max(self.out.width, table_width(self.cols))

    def set_baseline(self, baseline: str, overlap: Sequence[str] = (),
                     placements: Sequence[str] = ("out",), algos: Sequence[str] = ()) -> None:
        """The columns of this run: speed-up against ``baseline``, --overlap's ``overlap`` shapes,
        an algo column that fits ``algos``; with nccl-tests' table, the ``placements`` each of
        its lines waits for."""
        self.cols = columns(baseline, overlap, algos)
        self.nccl_table = NcclTestsTable(placements)
        if self.enabled:
            self._fit_width()

    def lines(self, lines: Sequence[str]) -> None:
        """Plain lines, printed as they are (no markup, no styles)."""
        for line in lines:
            self.print(Text(line))

    # -- plain output ------------------------------------------------------------------

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if self.enabled:
            console = self._progress.console if self._progress is not None else self.out
            console.print(*objects, **kwargs)

    def banner(self, title: str, lines: list[tuple[str, str]], note: str = "") -> None:
        if not self.enabled:
            return
        self.print(Text(("# " if self.plain else "") + title, style="bold"))
        if note:
            self.note(note, style="bold yellow")
        for key, value in lines:
            if not key:  # a line of its own (nccl-tests' per-rank lines)
                self.print(Text("#" + str(value)))
                continue
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
        if not self.plain:  # nccl-tests' tables print their own headers
            self.print(_table(self.cols, header=True))
        if self.live:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

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
        if self.plain:
            self.lines(self.nccl_table.add(row))
        else:
            t = _table(self.cols, header=False)
            t.add_row(*(getter(row) for _, _, getter in self.cols))
            self.print(t)
        if row.status not in QUIET and row.note:
            self.print(Text(f"#   {row.note}", style="red"))

    def section(self) -> None:
        """A blank line between sizes when several rows share one (not in nccl-tests' table)."""
        if not self.plain:
            self.print("")

    def stop(self) -> None:
        """End the live bar, and close nccl-tests' open table (its trailer)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self.enabled and self.plain:
            self.lines(self.nccl_table.close())
