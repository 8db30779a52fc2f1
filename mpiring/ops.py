"""Reduction operations and element types mpiring supports, with the names users may give them.

Pure code: no MPI, no device. Ops accept mpi4py's ``MPI.SUM`` & co. as well as strings.
"""

from __future__ import annotations

import enum
from typing import Any

import numpy as np

from .errors import InvalidArgumentError


class Op(enum.IntEnum):
    """The reduction operators. The integer values are the wire codes of the agreement check."""

    SUM = 1
    PROD = 2
    MAX = 3
    MIN = 4

    @property
    def ufunc(self) -> np.ufunc:
        return _UFUNCS[self]


_UFUNCS = {Op.SUM: np.add, Op.PROD: np.multiply, Op.MAX: np.maximum, Op.MIN: np.minimum}
_OP_NAMES = {"sum": Op.SUM, "prod": Op.PROD, "max": Op.MAX, "min": Op.MIN}


def _mpi_ops() -> list[tuple[Any, Op]]:
    from mpi4py import MPI

    return [(MPI.SUM, Op.SUM), (MPI.PROD, Op.PROD), (MPI.MAX, Op.MAX), (MPI.MIN, Op.MIN)]


def normalize_op(op: Any) -> Op:
    """Map ``MPI.SUM``, ``"sum"``, ``Op.SUM`` (and so on) to an :class:`Op`; reject anything else."""
    if isinstance(op, Op):
        return op
    if isinstance(op, str):
        try:
            return _OP_NAMES[op.lower()]
        except KeyError:
            raise InvalidArgumentError(
                f"unsupported op {op!r}: use one of {sorted(_OP_NAMES)} or MPI.SUM/PROD/MAX/MIN"
            ) from None
    for mpi_op, ours in _mpi_ops():  # mpi4py's Op objects compare equal but do not hash
        if op == mpi_op:
            return ours
    raise InvalidArgumentError(
        f"unsupported op {op!r}: mpiring reduces with MPI.SUM, MPI.PROD, MPI.MAX or MPI.MIN"
    )


def bfloat16_dtype() -> np.dtype | None:
    """numpy's bfloat16 from ml_dtypes, when installed (numpy has none of its own)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


# Element types: name -> wire code for the agreement check. bfloat16 is added when available.
_DTYPE_CODES = {"float16": 1, "float32": 2, "float64": 3, "int32": 4, "int64": 5, "bfloat16": 6}


def supported_dtypes() -> list[np.dtype]:
    """Every element type this installation can reduce on the host."""
    out = [np.dtype(name) for name in _DTYPE_CODES if name != "bfloat16"]
    bf16 = bfloat16_dtype()
    if bf16 is not None:
        out.append(bf16)
    return out


_CODE_BY_DTYPE: dict[np.dtype, int] = {}


def dtype_code(dtype: np.dtype) -> int:
    """The wire code of a supported dtype; raises naming the dtype otherwise."""
    code = _CODE_BY_DTYPE.get(dtype)
    if code is not None:
        return code
    code = _DTYPE_CODES.get(np.dtype(dtype).name)
    if code is None:
        names = ", ".join(_DTYPE_CODES)
        raise InvalidArgumentError(f"unsupported dtype {np.dtype(dtype).name}: mpiring reduces {names}")
    if isinstance(dtype, np.dtype):
        _CODE_BY_DTYPE[dtype] = code
    return code


def is_integer(dtype: np.dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def tolerance(dtype: np.dtype, nranks: int) -> float:
    """Relative error bound of an n-term floating sum or product in ``dtype`` (0 for integers).

    Each of the n-1 operations rounds once, by at most eps/2 relative; the bound is stated
    against sum(|x_i|) so it also holds where terms cancel.
    """
    dtype = np.dtype(dtype)
    if is_integer(dtype):
        return 0.0
    eps = 2.0**-7 if dtype.name == "bfloat16" else float(np.finfo(dtype).eps)
    return max(nranks - 1, 1) * eps
