"""Plain-text stand-ins for the few parts of ``rich`` that rank 0 prints with (:mod:`.report`):
``Console.print``, ``Text`` (with ``Text.assemble``) and ``Table`` (fixed column widths,
left or right justified, a cell too long cut with "…"), printing what rich prints when the
output is no terminal: the same characters, without colours, styles or the live progress bar.

They are used only where rich is not installed: ``mpiring-tune`` (``mpiring-tune``)
needs none of the bench extra's packages. The benchmark itself still asks for rich
(:func:`mpiring.bench.files.missing_dependencies`).
"""

from __future__ import annotations

import sys
from typing import Any


class Text:
    """A line of text; its ``style`` is kept and not shown."""

    def __init__(self, text: str = "", style: str = "") -> None:
        self.plain = text
        self.style = style

    @classmethod
    def assemble(cls, *parts: str | tuple[str, str]) -> Text:
        """One text of ``parts``: strings, or ``(text, style)`` pairs."""
        return cls("".join(p if isinstance(p, str) else p[0] for p in parts))

    def __str__(self) -> str:
        return self.plain


class Table:
    """Columns of fixed width, one space after each, no borders; a header of several lines
    where a header holds line breaks (``Table(box=None, padding=(0, 1, 0, 0))`` in rich)."""

    def __init__(self, show_header: bool = True, **_: Any) -> None:
        self.show_header = show_header
        self.columns: list[tuple[str, int, str]] = []
        self.rows: list[list[str]] = []

    def add_column(self, header: str = "", width: int | None = None, justify: str = "left",
                   **_: Any) -> None:
        self.columns.append((header, width or len(header), justify))

    def add_row(self, *cells: Any) -> None:
        self.rows.append([str(c) for c in cells])

    def lines(self) -> list[str]:
        out = []
        if self.show_header:  # a header of fewer lines than the others sits at the bottom, as rich's
            heads = [h.split("\n") for h, _, _ in self.columns]
            depth = max(map(len, heads), default=0)
            heads = [[""] * (depth - len(h)) + h for h in heads]
            out += [self._line([h[i] for h in heads]) for i in range(depth)]
        return out + [self._line(r) for r in self.rows]

    def _line(self, cells: list[str]) -> str:
        parts = []
        for cell, (_, width, justify) in zip(cells, self.columns, strict=False):
            if len(cell) > width:
                cell = cell[:max(0, width - 1)] + "…"
            parts.append(cell.rjust(width) if justify == "right" else cell.ljust(width))
        return " ".join(parts).rstrip()

    def __str__(self) -> str:
        return "\n".join(self.lines())


class Console:
    """Prints to stdout (or stderr), whichever stream is current at the time, as ``print``
    does; ``width`` is kept for the caller and wraps nothing."""

    def __init__(self, stderr: bool = False, **_: Any) -> None:
        self.stderr = stderr
        self.width = 80

    def print(self, *objects: Any, **_: Any) -> None:
        stream = sys.stderr if self.stderr else sys.stdout
        print(" ".join(str(o) for o in objects), file=stream, flush=True)
