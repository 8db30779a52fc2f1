"""The staging layout: regions in order, aligned, disjoint, and flags one word per writer."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.cuda.layout import ALLOC_ALIGN, MAX_RANKS, REGION_ALIGN, WORD, StagingLayout

KB64 = REGION_ALIGN


@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64), st.integers(1, 512))
def test_regions_are_aligned_disjoint_and_inside_the_allocation(slot, one, two, blocks) -> None:
    lay = StagingLayout(slot * KB64, one * KB64, two * KB64, blocks)
    regions = [(0, lay.control_bytes)]
    regions += [(lay.ring_slot(k), lay.slot_bytes) for k in range(2)]
    regions += [(lay.oneshot_slot(k), lay.oneshot_bytes) for k in range(2)]
    regions += [(lay.twoshot_in, lay.twoshot_bytes), (lay.twoshot_out, lay.twoshot_bytes)]
    regions += [(lay.ll_slot(k), lay.ll_bytes) for k in range(2)]
    for (a, n), (b, _) in zip(regions, regions[1:], strict=False):
        assert a + n <= b, "regions overlap"
    for start, _ in regions:
        assert start % KB64 == 0
    assert regions[-1][0] + regions[-1][1] == lay.used_bytes <= lay.alloc_bytes
    assert lay.alloc_bytes % ALLOC_ALIGN == 0 and lay.alloc_bytes - lay.used_bytes < ALLOC_ALIGN
    # every flag word sits inside control, none shared
    words = {lay.ring_full(k) for k in range(2)} | {lay.ring_free(k) for k in range(2)}
    words |= {lay.direct_flag(s, b) for s in range(MAX_RANKS) for b in range(blocks)}
    words.add(lay.abort)
    assert len(words) == 4 + MAX_RANKS * blocks + 1
    assert all(w % WORD == 0 and w + WORD <= lay.direct_table for w in words)
    assert lay.direct_table % 256 == 0 and lay.direct_table + lay.TABLE_BYTES <= lay.ll_state
    # oneshot-ll: its two state words and every header line in control, after the table
    headers = {lay.ll_header(k, s) for k in range(2) for s in range(MAX_RANKS)}
    assert len(headers) == 2 * MAX_RANKS and lay.ll_state + 2 * WORD <= min(headers)
    assert all(h % lay.LL_LINE == 0 and h + lay.LL_LINE <= lay.control_bytes for h in headers)
    # a row per source rank in each slot, of whole lines; the limit is 8 payload bytes a line
    assert MAX_RANKS * lay.ll_row_bytes <= lay.ll_bytes and lay.ll_row_bytes % lay.LL_LINE == 0
    assert lay.ll_limit == lay.ll_row_bytes // 2


@given(st.integers(1, MAX_RANKS), st.integers(1, 64))
def test_oneshot_ll_rows_split_the_slot_among_the_nodes_ranks(ranks: int, slot_kb64: int) -> None:
    """Every source rank's row fits the slot, rows of whole 16-byte lines, as large as the
    slot allows for that many ranks (fewer ranks: larger messages)."""
    lay = StagingLayout(KB64, KB64, KB64, 4, ll_bytes=slot_kb64 * KB64, ranks=ranks)
    row = lay.ll_row_bytes
    assert ranks * row <= lay.ll_bytes < ranks * (row + lay.LL_LINE)  # no whole line to spare
    assert row % lay.LL_LINE == 0 and lay.ll_limit == row // 2
    assert lay.ll_limit >= StagingLayout(KB64, KB64, KB64, 4, ll_bytes=slot_kb64 * KB64).ll_limit


@pytest.mark.parametrize("ranks", [0, MAX_RANKS + 1])
def test_the_layout_refuses_a_rank_count_it_has_no_rows_for(ranks: int) -> None:
    with pytest.raises(ValueError, match="ranks must be from 1 to"):
        StagingLayout(KB64, KB64, KB64, 4, ranks=ranks)


@pytest.mark.parametrize("field", ["slot_bytes", "oneshot_bytes", "twoshot_bytes", "blocks", "ll_bytes"])
def test_sizes_must_be_positive(field: str) -> None:
    args = dict(slot_bytes=KB64, oneshot_bytes=KB64, twoshot_bytes=KB64, blocks=4)
    args[field] = 0
    with pytest.raises(ValueError, match=field):
        StagingLayout(**args)


def test_regions_must_be_64k_multiples() -> None:
    with pytest.raises(ValueError, match="multiple"):
        StagingLayout(KB64 + 1, KB64, KB64, 4)


def test_default_layout_size_is_what_the_readme_states() -> None:
    from mpiring.cuda.layout import staging_layout

    assert staging_layout(None).alloc_bytes == 332 << 20
    # the oneshot-ll limits the docs state: 64 KiB on 8 ranks, 128 KiB on 4, 256 KiB on 2
    assert staging_layout(None).ll_limit == 64 << 10
    assert [staging_layout(None, ranks=n).ll_limit for n in (8, 4, 2)] == [64 << 10, 128 << 10, 256 << 10]
    assert staging_layout(None, ranks=3).alloc_bytes == staging_layout(None).alloc_bytes
    assert staging_layout(1).slot_bytes == KB64  # rounded up to the region alignment


@given(st.integers(1, 512))
def test_release_ranges_cover_every_polled_flag_and_spare_abort(blocks) -> None:
    lay = StagingLayout(KB64, KB64, KB64, blocks)
    covered = lambda w: any(a <= w and w + WORD <= a + n for a, n in lay.release_ranges())  # noqa: E731
    polled = [lay.ring_full(k) for k in range(2)] + [lay.ring_free(k) for k in range(2)]
    polled += [lay.direct_flag(s, b) for s in range(MAX_RANKS) for b in range(blocks)]
    assert all(covered(w) for w in polled)
    assert not covered(lay.abort)
    assert not any(covered(w) for w in range(lay.direct_table, lay.direct_table + lay.TABLE_BYTES, WORD))


def test_an_sm_budget_caps_the_direct_grid() -> None:
    """Communicator(sm_budget=N): the one-/two-shot grid is at most N blocks (every rank derives
    it from the budget as given, so the flags still line up); no budget keeps the default."""
    from mpiring.cuda.layout import DIRECT_BLOCKS, staging_layout

    assert staging_layout(None).blocks == DIRECT_BLOCKS
    assert staging_layout(None, 16).blocks == min(16, DIRECT_BLOCKS)
    assert staging_layout(None, 10_000).blocks == DIRECT_BLOCKS
    assert staging_layout(None, 1).alloc_bytes <= staging_layout(None).alloc_bytes
