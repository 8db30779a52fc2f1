"""Ops, element types and the error bound of floating reductions."""

from __future__ import annotations

import re
import sys
from functools import reduce

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mpi4py import MPI

from mpiring.core.errors import InvalidArgumentError
from mpiring.core.ops import (
    REDUCTIONS,
    Op,
    bfloat16_dtype,
    check_op_dtype,
    dtype_code,
    is_integer,
    normalize_op,
    supported_dtypes,
    tolerance,
)

BF16 = np.dtype(ml_dtypes.bfloat16)
SUPPORTED = ["float16", "float32", "float64", "int32", "int64", "bfloat16"]
FLOATS = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), BF16]


@pytest.mark.parametrize(
    ("given_op", "want"),
    [
        (MPI.SUM, Op.SUM), (MPI.PROD, Op.PROD), (MPI.MAX, Op.MAX), (MPI.MIN, Op.MIN),
        ("sum", Op.SUM), ("SUM", Op.SUM), ("Prod", Op.PROD), ("max", Op.MAX), ("mIn", Op.MIN),
        (Op.SUM, Op.SUM), (Op.PROD, Op.PROD), (Op.MAX, Op.MAX), (Op.MIN, Op.MIN),
    ],
)
def test_normalize_op_accepts(given_op: object, want: Op) -> None:
    """MPI ops, names in any case, and Op members all map to the right Op."""
    assert normalize_op(given_op) is want


@pytest.mark.parametrize(("mpi_op", "want"), [(MPI.SUM, Op.SUM), (MPI.PROD, Op.PROD), (MPI.MAX, Op.MAX),
                                              (MPI.MIN, Op.MIN)])
def test_an_op_equal_to_mpis_but_another_object_is_that_op(mpi_op: MPI.Op, want: Op) -> None:
    """mpi4py makes a new Op object for a handle it is given back (fromhandle, f2py): equal to
    MPI.SUM, not MPI.SUM itself. It is that op, not an "unsupported op MPI.SUM"."""
    for same in (MPI.Op.fromhandle(mpi_op.handle), MPI.Op.f2py(mpi_op.py2f())):
        assert same is not mpi_op and same == mpi_op
        assert normalize_op(same) is want


@pytest.mark.parametrize("name", ["add", "", "sum ", "mean", "band"])
def test_normalize_op_rejects_strings(name: str) -> None:
    """An unknown name is quoted and the accepted names are listed."""
    listed = r"unsupported op .*use one of \['avg', 'max', 'min', 'prod', 'sum'\]"
    with pytest.raises(InvalidArgumentError, match=listed):
        normalize_op(name)
    with pytest.raises(InvalidArgumentError, match=repr(name)):
        normalize_op(name)


@pytest.mark.parametrize(
    "bad", [MPI.BAND, MPI.LAND, MPI.MAXLOC, MPI.REPLACE, MPI.OP_NULL, 1, None, 2.5, object()],
    ids=["BAND", "LAND", "MAXLOC", "REPLACE", "OP_NULL", "int", "None", "float", "object"],
)
def test_normalize_op_rejects_others(bad: object) -> None:
    """Other MPI ops and other objects are refused, naming the supported ops."""
    listed = "unsupported op .*MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN or 'avg'"
    with pytest.raises(InvalidArgumentError, match=listed) as caught:
        normalize_op(bad)
    if isinstance(bad, MPI.Op):  # named, not mpi4py's repr (an address)
        assert " at 0x" not in str(caught.value)


@pytest.mark.parametrize(("op", "name"), [(MPI.BAND, "MPI.BAND"), (MPI.MAXLOC, "MPI.MAXLOC"),
                                          (MPI.REPLACE, "MPI.REPLACE")])
def test_a_refused_mpi_op_is_named(op: object, name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"unsupported op {name}: "):
        normalize_op(op)


def test_a_user_defined_op_is_called_so() -> None:
    mine = MPI.Op.Create(lambda a, b, t: None, commute=True)
    try:
        with pytest.raises(InvalidArgumentError, match="unsupported op a user-defined MPI.Op: "):
            normalize_op(mine)
    finally:
        mine.Free()


def test_op_codes_and_ufuncs() -> None:
    """Wire codes are distinct and each op folds with the matching ufunc."""
    assert [int(op) for op in Op] == [1, 2, 3, 4, 5]
    assert REDUCTIONS == (Op.SUM, Op.PROD, Op.MAX, Op.MIN)
    a, b = np.array([3, -2, 5]), np.array([4, 7, -1])
    assert Op.AVG.ufunc is np.add and Op.AVG.row.mean and not Op.SUM.row.mean
    assert Op.SUM.ufunc(a, b).tolist() == [7, 5, 4]
    assert Op.PROD.ufunc(a, b).tolist() == [12, -14, -5]
    assert Op.MAX.ufunc(a, b).tolist() == [4, 7, 5]
    assert Op.MIN.ufunc(a, b).tolist() == [3, -2, -1]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", BF16])
def test_avg_takes_floating_types(dtype: object) -> None:
    check_op_dtype(Op.AVG, np.dtype(dtype))
    assert normalize_op("avg") is normalize_op("AVG") is Op.AVG


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_avg_refuses_integers_naming_the_fix(dtype: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"op 'avg' averages floating-point arrays, not {dtype}: "
                                                   "reduce with 'sum'"):
        check_op_dtype(Op.AVG, np.dtype(dtype))
    for op in REDUCTIONS:
        check_op_dtype(op, np.dtype(dtype))


def test_supported_dtypes_and_codes() -> None:
    """Every supported type has its own wire code, bfloat16 included."""
    names = [d.name for d in supported_dtypes()]
    assert sorted(names) == sorted(SUPPORTED)
    codes = [dtype_code(np.dtype(d)) for d in supported_dtypes()]
    assert len(set(codes)) == len(codes) and min(codes) >= 1
    assert dtype_code(BF16) == 6 and bfloat16_dtype() == BF16


def test_bfloat16_needs_ml_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ml_dtypes there is no bfloat16, and the other types remain."""
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    assert bfloat16_dtype() is None
    assert sorted(d.name for d in supported_dtypes()) == sorted(set(SUPPORTED) - {"bfloat16"})


@pytest.mark.parametrize(
    "dtype", ["complex64", "complex128", "uint8", "uint32", "int8", "int16", "bool", "object",
              "longdouble", "datetime64[s]", "U3", "V4"],
)
def test_dtype_code_rejects(dtype: str) -> None:
    """Unsupported types are named, with the list of supported ones."""
    name = np.dtype(dtype).name
    want = rf"unsupported dtype {re.escape(name)}: mpiring reduces float16, "
    with pytest.raises(InvalidArgumentError, match=want):
        dtype_code(np.dtype(dtype))


@pytest.mark.parametrize(("dtype", "want"), [("int32", True), ("int64", True), ("uint8", True),
                                             ("float16", False), ("float64", False), (BF16, False)])
def test_is_integer(dtype: object, want: bool) -> None:
    """Integer kinds are told apart from floating ones."""
    assert is_integer(np.dtype(dtype)) is want


@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 64])
def test_tolerance_values(n: int) -> None:
    """Zero for integers; (n-1) machine epsilons (at least one) for floats."""
    assert tolerance(np.dtype(np.int32), n) == 0.0
    assert tolerance(np.dtype(np.int64), n) == 0.0
    k = max(n - 1, 1)
    assert tolerance(np.dtype(np.float16), n) == k * 2.0**-10
    assert tolerance(np.dtype(np.float32), n) == k * 2.0**-23
    assert tolerance(np.dtype(np.float64), n) == k * 2.0**-52
    assert tolerance(BF16, n) == k * 2.0**-7


def sequential(values: np.ndarray, dtype: np.dtype, op: Op) -> float:
    """Fold ``values`` left to right in ``dtype``, rounding after every step as the ring does."""
    return float(reduce(lambda a, b: op.ufunc(a, b), values.astype(dtype)))


@settings(max_examples=300, deadline=None)
@given(
    dtype=st.sampled_from(FLOATS),
    n=st.integers(1, 16),
    seed=st.integers(0, 2**32 - 1),
    scale=st.integers(-6, 6),
)
def test_tolerance_bounds_real_sums(dtype: np.dtype, n: int, seed: int, scale: int) -> None:
    """Rounded n-term sums stay within tolerance * sum|x| of the exact sum; products of |prod|."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(-1, 1, n) * 2.0**scale).astype(dtype).astype(np.float64)
    tol = tolerance(dtype, n)
    exact = float(np.sum(x.astype(np.longdouble)))
    assert abs(sequential(x, dtype, Op.SUM) - exact) <= tol * np.abs(x).sum()
    f = (rng.uniform(0.5, 2.0, n) * rng.choice([-1, 1], n)).astype(dtype).astype(np.float64)
    exact = float(np.prod(f.astype(np.longdouble)))
    assert abs(sequential(f, dtype, Op.PROD) - exact) <= tol * abs(exact)
