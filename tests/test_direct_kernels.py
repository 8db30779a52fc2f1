"""mpiring.cuda.direct_kernels.ll_shape: the grid of a oneshot-ll launch. The kernel's own line
assignment (``csrc/oneshot_ll.cu``, "Shape": block b takes the ``threads * per_thread`` lines
from ``b * threads * per_thread``, thread t lines t, t + threads, ...) is modelled here and
must move every line of the message exactly once, within the kernel's limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring.cuda.contract import LL_LINES, LL_THREADS
from mpiring.cuda.direct_kernels import LL_BLOCK_LINES, LlShape, ll_shape


def lines_moved(shape: LlShape, lines: int) -> list[int]:
    """The lines the kernel's threads take, one entry per (block, thread, k) that moves one."""
    moved = []
    for b in range(shape.blocks):
        first = b * shape.threads * shape.per_thread
        for t in range(shape.threads):
            for k in range(LL_LINES):
                line = first + t + k * shape.threads
                if k >= shape.per_thread or line >= lines:
                    break
                moved.append(line)
    return moved


@settings(max_examples=1000, deadline=None)
@given(st.integers(1, 1 << 17), st.sampled_from([1, 2, 4, 8]), st.integers(1, LL_BLOCK_LINES),
       st.one_of(st.none(), st.integers(1, 200)))
def test_every_line_moves_once_within_the_kernels_limits(count, itemsize, block_lines, max_blocks) -> None:
    lines = -(-count * itemsize // 8)
    if max_blocks is not None and lines > max_blocks * LL_BLOCK_LINES:
        with pytest.raises(ValueError, match="over the budget"):
            ll_shape(count, itemsize, block_lines, max_blocks)
        return
    shape = ll_shape(count, itemsize, block_lines, max_blocks)
    assert sorted(lines_moved(shape, lines)) == list(range(lines))
    assert 1 <= shape.per_thread <= LL_LINES
    assert shape.threads % 32 == 0 and 32 <= shape.threads <= LL_THREADS  # whole warps; agree.cuh needs MAXR
    span = shape.threads * shape.per_thread
    assert (shape.blocks - 1) * span < lines <= shape.blocks * span  # no block without a line
    assert max_blocks is None or shape.blocks <= max_blocks
    # Spread: about the lines per block asked for, give or take the whole warps of the threads.
    if max_blocks is None:
        assert -(-lines // shape.blocks) <= max(block_lines, 32) + 32 * shape.per_thread


def test_the_default_shape_is_one_block_per_thousand_lines() -> None:
    """By default a block moves up to LL_BLOCK_LINES lines, two per thread: 1 KiB of float32 is
    one block of 128 threads (one line each), 8 KiB one block of 512, 64 KiB eight blocks."""
    assert ll_shape(256, 4) == LlShape(1, 128, 1)
    assert ll_shape(2048, 4) == LlShape(1, 512, 2)
    assert ll_shape(16384, 4) == LlShape(8, 512, 2)


def test_a_smaller_block_spreads_the_message() -> None:
    assert ll_shape(2048, 4, block_lines=128) == LlShape(8, 128, 1)
    assert ll_shape(16384, 4, block_lines=128) == LlShape(64, 128, 1)
    assert ll_shape(16384, 4, block_lines=128, max_blocks=16) == LlShape(16, 512, 1)


@pytest.mark.parametrize("bad", [0, LL_BLOCK_LINES + 1])
def test_block_lines_out_of_range_is_refused(bad) -> None:
    with pytest.raises(ValueError, match="block_lines"):
        ll_shape(1, 4, bad)
