"""mpiring.bench.data and .arrays: exact inputs, the local reference, and the host checks."""

from __future__ import annotations

import numpy as np
import pytest

from mpiring.bench.arrays import HostSpace
from mpiring.bench.data import (
    CHUNK,
    DTYPE_NAMES,
    InputGenerator,
    check_exact,
    exact_limit,
    pieces,
    point_seed,
    resolve_dtype,
    value_rule,
)
from mpiring.core.ops import normalize_op

OPS = ["sum", "prod", "max", "min"]


@pytest.mark.parametrize("name", DTYPE_NAMES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4, 8, 16, 64])
def test_value_rule_keeps_results_exact(name, op, nranks):
    dtype = resolve_dtype(name)
    rule = value_rule(op, dtype, nranks)
    assert check_exact(rule, op, dtype, nranks)


def test_exact_limits():
    assert exact_limit(np.dtype("float16")) == 2048
    assert exact_limit(resolve_dtype("bfloat16")) == 256
    assert exact_limit(np.dtype("float32")) == 1 << 24
    assert exact_limit(np.dtype("int32")) == 2**31 - 1


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_limit_is_really_exact(name):
    dtype = resolve_dtype(name)
    lim = min(exact_limit(dtype), 1 << 40)
    x = np.array([lim, -lim, lim - 1], dtype=np.int64)
    assert np.array_equal(x.astype(dtype).astype(np.float64), x.astype(np.float64))


def _all_inputs(gen, nranks, count):
    return np.stack([np.concatenate([gen.values(r, s, e) for s, e in pieces(count)])
                     for r in range(nranks)])


@pytest.mark.parametrize("name", DTYPE_NAMES)
@pytest.mark.parametrize("op", OPS)
def test_expected_is_the_exact_reduction_in_the_dtype(name, op):
    nranks, count = 4, 5000
    dtype = resolve_dtype(name)
    gen = InputGenerator(np, op, dtype, nranks, seed=123)
    inputs = _all_inputs(gen, nranks, count)
    # reduce in the benchmark dtype itself, in two different orders: both must be exact
    ufunc = normalize_op(op).ufunc
    typed = inputs.astype(dtype)
    fwd, bwd = typed[0].copy(), typed[-1].copy()
    for r in range(1, nranks):
        fwd = ufunc(fwd, typed[r]).astype(dtype)
        bwd = ufunc(bwd, typed[nranks - 1 - r]).astype(dtype)
    want = gen.expected(0, count)
    assert np.array_equal(fwd.astype(np.float64), want.astype(np.float64))
    assert np.array_equal(bwd.astype(np.float64), want.astype(np.float64))


def test_inputs_differ_per_rank_and_element_and_are_deterministic():
    gen = InputGenerator(np, "sum", np.float32, 4, seed=7)
    a, b = gen.values(0, 0, 10000).copy(), gen.values(1, 0, 10000).copy()
    assert not np.array_equal(a, b)
    assert len(np.unique(a)) > 9000  # many distinct values: misplaced chunks show
    again = InputGenerator(np, "sum", np.float32, 4, seed=7)
    assert np.array_equal(again.values(0, 0, 10000), a)
    other = InputGenerator(np, "sum", np.float32, 4, seed=8)
    assert not np.array_equal(other.values(0, 0, 10000), a)
    lo, hi = -(1 << gen.rule.bits), (1 << gen.rule.bits) - 1
    assert a.min() >= lo and a.max() <= hi
    assert a.min() < lo / 2 and a.max() > hi / 2


def test_pieces_give_the_same_values_as_one_call():
    gen = InputGenerator(np, "sum", np.float32, 2, seed=1)
    whole = gen.values(1, 0, 3000).copy()
    parts = np.concatenate([gen.values(1, 0, 1000), gen.values(1, 1000, 3000)])
    assert np.array_equal(whole, parts)


def test_pieces_cover_range():
    assert pieces(0) == []
    assert pieces(5) == [(0, 5)]
    p = pieces(2 * CHUNK + 3)
    assert p == [(0, CHUNK), (CHUNK, 2 * CHUNK), (2 * CHUNK, 2 * CHUNK + 3)]


def test_prod_and_sign_rules():
    gen = InputGenerator(np, "prod", np.float32, 4, seed=3)
    v = gen.values(0, 0, 4000)
    assert set(np.unique(v).tolist()) == {-2, -1, 1, 2}
    assert value_rule("prod", np.dtype("float16"), 12).kind == "sign"
    sign = InputGenerator(np, "prod", np.float16, 12, seed=3).values(2, 0, 1000)
    assert set(np.unique(sign).tolist()) == {-1, 1}


def test_point_seed_depends_on_every_part():
    base = point_seed(1, 1024, "float32", "sum")
    assert base == point_seed(1, 1024, "float32", "sum")
    assert len({base, point_seed(2, 1024, "float32", "sum"), point_seed(1, 2048, "float32", "sum"),
                point_seed(1, 1024, "float16", "sum"), point_seed(1, 1024, "float32", "max")}) == 5


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_host_space_poison_and_mismatches(name):
    dtype = resolve_dtype(name)
    space = HostSpace()
    want = np.arange(-50, 50, dtype=np.int32)
    buf = space.empty(100, dtype)
    space.poison(buf)
    bad = space.mismatches(buf, 0, want)
    assert bad is not None and bad.count == 100 and bad.index == 0  # poison never matches
    space.store(buf, 0, want)
    assert space.mismatches(buf, 0, want) is None
    buf[37] = buf[37] + buf.dtype.type(1) if name != "bfloat16" else np.float32(99)
    bad = space.mismatches(buf, 0, want)
    assert bad.count == 1 and bad.index == 37 and bad.expected == -13
    assert "1 of 100 elements wrong, first at index 37" in bad.describe(100)
    # an offset piece reports absolute indices
    assert space.mismatches(buf, 30, want[30:40]).index == 37


def test_unknown_dtype():
    with pytest.raises(ValueError, match="unsupported dtype"):
        resolve_dtype("complex64")
