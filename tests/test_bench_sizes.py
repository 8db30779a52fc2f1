"""mpiring.bench.sizes: size parsing, labels and the nccl-tests sweep."""

from __future__ import annotations

import pytest

from mpiring.bench.sizes import element_counts, format_size, parse_size, sweep


@pytest.mark.parametrize(("text", "expected"), [
    ("0", 0), ("8", 8), ("4096", 4096), ("1K", 1024), ("1k", 1024), ("1KB", 1024),
    ("1KiB", 1024), ("64M", 64 << 20), ("64MiB", 64 << 20), ("8G", 8 << 30), ("8g", 8 << 30),
    ("1T", 1 << 40), ("1.5K", 1536), (" 2M ", 2 << 20), (".5M", 512 << 10), (4096, 4096),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "K", "1X", "-1K", "1.3", "1 K B", "1e6", "0x10", "1.0000001K"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(("n", "label"), [
    (0, "0 B"), (100, "100 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (64 << 20, "64 MiB"),
    (8 << 30, "8 GiB"), (3 << 20, "3 MiB"), (1 << 40, "1 TiB"),
])
def test_format_size(n, label):
    assert format_size(n) == label


def test_default_gpu_sweep_is_powers_of_two_1k_to_8g():
    sizes = sweep(parse_size("1K"), parse_size("8G"))
    assert sizes == [1 << e for e in range(10, 34)]
    assert len(sizes) == 24


def test_factor_sweep_like_nccl_tests():
    # all_reduce_perf -b 8 -e 128M -f 2: 8, 16, ..., 128M (25 sizes)
    sizes = sweep(8, 128 << 20, 2)
    assert sizes[0] == 8 and sizes[-1] == 128 << 20 and len(sizes) == 25
    assert sweep(1024, 1024 * 4**3, 4) == [1024, 4096, 16384, 65536]


def test_max_not_reached_exactly():
    assert sweep(1000, 5000, 2) == [1000, 2000, 4000]


def test_fractional_factor_always_grows():
    sizes = sweep(1, 20, 1.1)
    assert sizes == sorted(set(sizes))
    assert sizes[0] == 1 and sizes[-1] <= 20


def test_step_bytes_is_additive():
    assert sweep(1 << 20, 4 << 20, None, 1 << 20) == [1 << 20, 2 << 20, 3 << 20, 4 << 20]


@pytest.mark.parametrize(("args", "kwargs"), [
    ((0, 10), {}), ((10, 5), {}), ((1, 10, 1), {}), ((1, 10, 0.5), {}),
    ((1, 10, 2, 1), {}), ((1, 10, None, 0), {}), ((1, 1 << 40, None, 1), {}),
])
def test_sweep_rejects(args, kwargs):
    with pytest.raises(ValueError):
        sweep(*args, **kwargs)


def test_element_counts_round_down_and_dedupe():
    assert element_counts([1, 2, 4, 8, 9, 16], 4) == [(4, 1), (8, 2), (16, 4)]
    assert element_counts([1024], 2) == [(1024, 512)]
    assert element_counts([3], 4) == []
