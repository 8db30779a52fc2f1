"""nccl-tests' text output (``--nccl-tests``), so that scripts written for ``all_reduce_perf``
read mpiring's runs: the same column header, one line per size with the out-of-place and the
in-place figures side by side, and the ``# Out of bounds values`` / ``# Avg bus bandwidth``
trailer. Formats follow nccl-tests' src/util.cu (writeResultHeader,
writeBenchmarkLinePreamble, writeBenchmarkLineBody, writeResultFooter); every other line
starts with ``#``, as there.

One table per collective, algorithm (and batches value), since nccl-tests measures one implementation per
run; the sweep runs algorithm after algorithm in this mode so each table streams. Figures an
mpiring row lacks print as ``N/A`` (a failed check is not timed; an n/a point has none).

Pure code: :class:`NcclTestsTable` takes rows and returns the lines to print.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from .nccl_names import nccl_type
from .results import Row

ROOT = -1  # nccl-tests prints -1 in the root column of allreduce


def fixed(value: float | None, width: int) -> str:
    """nccl-tests' getFloatStr: the number right-aligned in ``width`` characters, with two
    decimals, one, none, or in exponent form, whichever first fits; ``N/A`` for no number."""
    if value is None or not math.isfinite(value):
        return f"{'N/A':>{width}}"
    for spec in (".2f", ".1f", ".0f"):
        text = f"{value:{width}{spec}}"
        if len(text) <= width:
            return text
    return f"{value:{width}{'.1e' if width >= 7 else '.0e'}}"


def header_lines() -> list[str]:
    """The three header lines of nccl-tests' result table (without per-iteration columns)."""
    blank5 = ("", "", "", "", "")
    head = "# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}"
    cols = "  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6} "
    return [
        head.format(*blank5) + "           out-of-place                       in-place          ",
        head.format("size", "count", "type", "redop", "root")
        + cols.format("time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"),
        head.format("(B)", "(elements)", "", "", "")
        + cols.format("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]


def _body(row: Row | None) -> str:
    """One placement's figures: time, algbw, busbw, #wrong (``N/A`` where not checked)."""
    if row is None:
        return "  " + "  ".join(fixed(None, w) for w in (7, 6, 6, 6))
    timed = row.timed
    time = fixed(row.time_us if timed else None, 7)
    alg = fixed(row.algbw_gbs if timed else None, 6)
    bus = fixed(row.busbw_gbs if timed else None, 6)
    wrong = f"{float(row.wrong):6g}" if row.wrong is not None else "  N/A"  # as nccl-tests
    return f"  {time}  {alg}  {bus}  {wrong}"


def result_line(out_of_place: Row | None, in_place: Row | None) -> str:
    """One size: the preamble (size, count, type, redop, root), then both placements."""
    first = out_of_place or in_place
    if first is None:
        raise ValueError("a result line needs at least one row")
    op = "none" if first.collective == "allgather" else first.op  # as all_gather_perf
    preamble = (f"{first.size_bytes:12d}  {first.count:12d}  {nccl_type(first.dtype):>8}  "
                f"{op:>6}  {ROOT:6d}")
    return preamble + _body(out_of_place) + _body(in_place)


def footer_lines(rows: Sequence[Row]) -> list[str]:
    """nccl-tests' trailer of one table: points whose check failed, the average bus bandwidth
    over every timed point (both placements), and a closing ``#``."""
    failed = sum(r.status == "fail" for r in rows)
    bws = [r.busbw_gbs for r in rows if r.timed and r.busbw_gbs is not None
           and math.isfinite(r.busbw_gbs)]
    avg = statistics.fmean(bws) if bws else math.nan
    return [f"# {'Out of bounds values':<20} : {failed} {'FAILED' if failed else 'OK'}",
            f"# {'Avg bus bandwidth':<20} : {avg:g} ",
            "#"]


def block_title(row: Row) -> str:
    """What a table measures: the collective, the algorithm and, where it has them, its
    batches."""
    label = f"mpiring {row.collective}, algorithm {row.algo}"
    return label + (f", batches {row.batches}" if row.batches != "-" else "")


class NcclTestsTable:
    """Rows in, nccl-tests' lines out: a table per (collective, algorithm, batches), a line per
    size once
    all of its placements are in (``placements`` in the sweep's order)."""

    def __init__(self, placements: Sequence[str]) -> None:
        self.placements = tuple(placements)
        self._block: tuple[str, str, str] | None = None
        self._block_rows: list[Row] = []
        self._pending: list[Row] = []

    def add(self, row: Row) -> list[str]:
        """The lines ``row`` completes: a new table's header, a finished table's trailer, a
        size's line."""
        lines: list[str] = []
        key = (row.collective, row.algo, row.batches)
        if key != self._block:
            lines += self.close()
            self._block = key
            lines += ["#", f"# Collective test starting: {block_title(row)}", "#", *header_lines()]
        self._block_rows.append(row)
        if self._pending and self._pending[0].size_bytes != row.size_bytes:
            lines.append(self._line())
        self._pending.append(row)
        if len(self._pending) == len(self.placements):
            lines.append(self._line())
        return lines

    def _line(self) -> str:
        by_place = {r.placement: r for r in self._pending}
        self._pending = []
        return result_line(by_place.get("out"), by_place.get("in"))

    def close(self) -> list[str]:
        """The trailer of the open table, after any line still waiting (none if no table)."""
        if self._block is None:
            return []
        lines = [self._line()] if self._pending else []
        first = self._block_rows[0]
        lines += footer_lines(self._block_rows)
        lines.append(f"# Collective test concluded: {block_title(first)}")
        self._block, self._block_rows = None, []
        return lines
