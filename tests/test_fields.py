"""The fields of a call that the agreement check compares (``mpiring.core.fields``): what they are,
how each reads in an error, and that a descriptor of them fits where it travels."""

from __future__ import annotations

import pytest

from mpiring.core import descriptor
from mpiring.core.fields import FIELDS, SAME, describe_field
from mpiring.node.signals import (
    AGREE,
    AGREE_LINES,
    CALLS,
    CLOSING,
    COUNTER_STRIDE,
    EV_FREE,
    EV_FULL,
    FAILED,
    FREE,
    FULL,
    NUM_COUNTERS,
)


def test_the_block_and_the_placement_are_compared() -> None:
    """Issue 25: recvbuf's count alone lets a rank in place (block c / n) pass beside ranks out
    of place (block c)."""
    assert {"count", "block", "in_place", "collective"} <= set(FIELDS)
    assert "MPI.IN_PLACE on every rank or on none" in SAME and "the same block" in SAME


@pytest.mark.parametrize(("field", "code", "reads"), [
    ("in_place", 0, "out of place"), ("in_place", 1, "MPI.IN_PLACE"), ("in_place", 5, "in_place code 5"),
    ("dtype", 2, "float32"), ("op", 3, "max"), ("memory", 1, "GPU"), ("batches", 0, "default"),
    ("block", 400, "400"), ("count", 7, "7"),
])
def test_fields_read_as_words_not_codes(field: str, code: int, reads: str) -> None:
    assert describe_field(field, code) == reads


def test_a_descriptor_fits_its_board_lines() -> None:
    """The one-node check writes the rejection code and every field into AGREE_LINES lines of
    the board, which stay inside the rank's counters block and overlap neither each other nor
    the named counters (the ring's flags, CALLS, CLOSING, FAILED), which are distinct."""
    assert 1 + len(FIELDS) <= AGREE_LINES * COUNTER_STRIDE
    spans = [set(range(first, first + AGREE_LINES)) for first in AGREE]
    assert all(not a & b for i, a in enumerate(spans) for b in spans[i + 1:])
    assert max(AGREE) + AGREE_LINES <= NUM_COUNTERS
    named = [*FULL, *FREE, *EV_FULL, *EV_FREE, CALLS, CLOSING, FAILED]
    assert len(set(named)) == len(named) and all(0 <= c < min(AGREE) for c in named)


def test_the_gpu_descriptor_carries_every_field_or_implies_it() -> None:
    """Word 0 is the count, word 1 packs the others (batches saturated), but for the block,
    which count, collective and in_place imply (mpiring.core.descriptor)."""
    packed = {"count"} | {name for name, _, _ in descriptor.WORD1}
    assert set(FIELDS) - packed == {"block"}
