"""The set-up agreement's pure logic (issue 17, item 1): which parameter differs on which ranks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.core.consensus import REJECTED, check_setup, disagreements, ranks_text
from mpiring.core.errors import SetupError


def test_the_issue_example_reads_as_promised() -> None:
    per_rank = [{"slot_bytes": 1048576}, {"slot_bytes": 65536}, {"slot_bytes": 1048576}]
    assert disagreements(per_rank) == [
        "slot_bytes differs across ranks: 1048576 on ranks 0,2; 65536 on rank 1"]
    with pytest.raises(SetupError, match="slot_bytes differs across ranks: 1048576 on ranks 0,2; "
                                         "65536 on rank 1"):
        check_setup(per_rank)


def test_none_reads_default_and_a_rejection_names_its_rank() -> None:
    per_rank = [{"batches": None, REJECTED: ""}, {"batches": 4, REJECTED: "timeout must be finite"}]
    assert disagreements(per_rank) == [
        "rank 1 rejected its arguments (timeout must be finite)",
        "batches differs across ranks: default on rank 0; 4 on rank 1"]


@pytest.mark.parametrize("who", [0, 1, 2])
def test_a_rejection_is_named_whichever_rank_made_it(who: int) -> None:
    """Rank 0 and the last rank are ranks like any other: a rejection on any one is a line."""
    said = "slot_bytes=-1: use a positive size"
    per_rank = [{REJECTED: said if r == who else ""} for r in range(3)]
    assert disagreements(per_rank) == [f"rank {who} rejected its arguments ({said})"]
    with pytest.raises(SetupError, match=f"rank {who} rejected its arguments"):
        check_setup(per_rank)
    assert disagreements([{REJECTED: ""}]) == []
    assert disagreements([{REJECTED: "timeout=nan: not finite"}]) == [
        "rank 0 rejected its arguments (timeout=nan: not finite)"]


def test_a_missing_parameter_counts_as_absent() -> None:
    assert disagreements([{"check": True}, {}]) == [
        "check differs across ranks: True on rank 0; absent on rank 1"]


values = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["ring", "mpi"]))
settings = st.lists(st.dictionaries(st.sampled_from(["slot_bytes", "check", "batches"]), values,
                                    min_size=3, max_size=3), min_size=1, max_size=9)


@given(settings)
def test_a_line_per_differing_parameter_naming_every_rank_once(per_rank: list[dict]) -> None:
    """Each parameter that takes more than one value gets exactly one line, which names every
    rank once, under the value that rank holds; agreeing parameters get none."""
    lines = disagreements(per_rank)
    for key in ("slot_bytes", "check", "batches"):
        distinct = {repr(v[key]) if v[key] is not None else "default" for v in per_rank}
        # bools and ints may print alike (True and 1): compare what the line shows
        shown = {str(v[key]) if v[key] is not None else "default" for v in per_rank}
        mine = [line for line in lines if line.startswith(f"{key} differs")]
        assert len(mine) == (len(shown) > 1), (key, lines, distinct)
        if mine:
            parts = mine[0].split(": ", 1)[1].split("; ")
            named = []
            for part in parts:
                value, ranks = part.rsplit(" on rank", 1)
                got = [int(r) for r in ranks.lstrip("s ").split(",")]
                named += got
                assert all(shown_value(per_rank[r][key]) == value for r in got), (part, per_rank)
            assert sorted(named) == list(range(len(per_rank)))
    if not lines:
        check_setup(per_rank)
    else:
        with pytest.raises(SetupError):
            check_setup(per_rank)


def shown_value(value: object) -> str:
    return "default" if value is None else str(value)


@given(st.lists(st.integers(0, 99), min_size=1, max_size=5, unique=True))
def test_ranks_text(ranks: list[int]) -> None:
    text = ranks_text(ranks)
    assert text.startswith("rank " if len(ranks) == 1 else "ranks ")
    assert text.split(" ", 1)[1].split(",") == [str(r) for r in ranks]
