"""The bench banner's lines (mpiring.bench.summary) that do not need a run."""

from __future__ import annotations

from types import SimpleNamespace

from mpiring.auto import table as tuning
from mpiring.bench import summary


def _sweep(table: tuning.TuningTable, overlap: bool, size: int = 2) -> SimpleNamespace:
    choice = SimpleNamespace(table=table, describe=lambda: "the shipped table")
    return SimpleNamespace(comm=SimpleNamespace(tuning=choice, overlap=overlap),
                           world=SimpleNamespace(size=size))


def test_the_tuning_line_says_from_which_size_the_overlap_entries_serve() -> None:
    shipped = tuning.load()
    assert summary.tuning_line(_sweep(shipped, overlap=False)) == "the shipped table"
    assert summary.tuning_line(_sweep(shipped, overlap=True)) == (
        "the shipped table; auto picks from its overlap entries (--overlap) from 64 MiB (below, "
        "what is fastest alone)")
    every_size = tuning.TuningTable({2: ((None, "nccl"),)}, overlap={2: ((None, "ring"),)})
    assert summary.tuning_line(_sweep(every_size, overlap=True)).endswith(
        "auto picks from its overlap entries (--overlap)")
    none = tuning.TuningTable({2: ((None, "nccl"),)})
    assert summary.tuning_line(_sweep(none, overlap=True)).endswith(
        "it has no overlap entries: auto picks what is fastest alone")


def test_the_tuning_line_reads_this_runs_rank_count() -> None:
    """Overlap entries for 4 ranks only: a 4-rank run picks from them, a 2-rank run has none."""
    four = tuning.TuningTable({2: ((None, "nccl"),), 4: ((None, "nccl"),)}, overlap={4: ((None, "ring"),)})
    assert summary.tuning_line(_sweep(four, overlap=True, size=4)).endswith(
        "auto picks from its overlap entries (--overlap)")
    assert summary.tuning_line(_sweep(four, overlap=True, size=2)).endswith(
        "it has no overlap entries: auto picks what is fastest alone")
