"""The one table of element types and reduction operators, with every name each layer needs.

Pure code: no MPI, no device. A dtype or an op is one row here: its wire code (what the
agreement check sends), its element struct or functor in the CUDA sources
(``mpiring/cuda/csrc/types.cuh``), its NCCL and MPI names. Every other module looks names up
here, so adding a type is one row plus, where the kernels need it, one struct in C++ (a test
checks every row against the sources).

Ops accept mpi4py's ``MPI.SUM`` & co. as well as strings. ``avg`` (what gradient averaging
uses; MPI has none) is the sum divided by the number of ranks, for floating-point types only::

    avg(x_0 .. x_{n-1}) == sum(x_0 .. x_{n-1}) * (1 / n)   # rounded once more, in the type
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidArgumentError


class Op(enum.IntEnum):
    """The reduction operators. The integer values are the wire codes of the agreement check."""

    SUM = 1
    PROD = 2
    MAX = 3
    MIN = 4
    AVG = 5  # SUM, then the result scaled by 1/n (a row may do it natively, e.g. NCCL's ncclAvg)

    @property
    def ufunc(self) -> np.ufunc:
        return OPS[self].ufunc

    @property
    def row(self) -> OpInfo:
        return OPS[self]


@dataclass(frozen=True)
class OpInfo:
    """One reduction operator, as every layer names it."""

    op: Op
    name: str  # lower-case, what users may pass as a string
    ufunc: np.ufunc  # the host fold (max/min propagate NaN, as IEEE maximum does)
    cuda: str | None  # functor in csrc/types.cuh (None: AVG, which folds as SUM)
    nccl: str  # ncclRedOp_t name
    mpi: str | None  # attribute of mpi4py.MPI (None: MPI has no such op)

    @property
    def mean(self) -> bool:
        """Whether the result is the sum scaled by 1/n (``avg``)."""
        return self.op is Op.AVG


@dataclass(frozen=True)
class DType:
    """One element type, as every layer names it."""

    name: str  # numpy's name (bfloat16: ml_dtypes')
    code: int  # wire code of the agreement check
    cuda: str  # element struct in csrc/types.cuh
    nccl: str  # ncclDataType_t name
    mpi: str | None  # attribute of mpi4py.MPI; None: MPI has no such type
    torch: str  # attribute of torch

    @property
    def numpy(self) -> np.dtype | None:
        """The numpy dtype, or None where it needs a package that is missing (bfloat16)."""
        return bfloat16_dtype() if self.name == "bfloat16" else np.dtype(self.name)

    @property
    def epsilon(self) -> float:
        """Machine epsilon (0 for integers)."""
        if self.name == "bfloat16":
            return 2.0**-7
        dt = np.dtype(self.name)
        return 0.0 if dt.kind in "iu" else float(np.finfo(dt).eps)


OPS: dict[Op, OpInfo] = {row.op: row for row in (
    OpInfo(Op.SUM, "sum", np.add, "Sum", "NCCL_SUM", "SUM"),
    OpInfo(Op.PROD, "prod", np.multiply, "Prod", "NCCL_PROD", "PROD"),
    OpInfo(Op.MAX, "max", np.maximum, "Max", "NCCL_MAX", "MAX"),
    OpInfo(Op.MIN, "min", np.minimum, "Min", "NCCL_MIN", "MIN"),
    OpInfo(Op.AVG, "avg", np.add, None, "NCCL_AVG", None),
)}
# The ops that fold with a functor of their own in the kernels (all but AVG, which folds as SUM).
REDUCTIONS: tuple[Op, ...] = tuple(row.op for row in OPS.values() if row.cuda is not None)

DTYPES: dict[str, DType] = {row.name: row for row in (
    DType("float16", 1, "F16", "NCCL_FLOAT16", None, "float16"),
    DType("float32", 2, "F32", "NCCL_FLOAT32", "FLOAT", "float32"),
    DType("float64", 3, "F64", "NCCL_FLOAT64", "DOUBLE", "float64"),
    DType("int32", 4, "I32", "NCCL_INT32", "INT32_T", "int32"),
    DType("int64", 5, "I64", "NCCL_INT64", "INT64_T", "int64"),
    DType("bfloat16", 6, "BF16", "NCCL_BFLOAT16", None, "bfloat16"),
)}
DTYPE_BY_CODE: dict[int, DType] = {row.code: row for row in DTYPES.values()}
_OP_NAMES = {row.name: row.op for row in OPS.values()}


@functools.cache
def _mpi_ops() -> tuple[tuple[Any, Op], ...]:
    from mpi4py import MPI

    return tuple((getattr(MPI, row.mpi), row.op) for row in OPS.values() if row.mpi is not None)


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
    pairs = _mpi_ops()
    for mpi_op, ours in pairs:  # hot path: the caller passes MPI.SUM itself (identity)
        if op is mpi_op:
            return ours
    for mpi_op, ours in pairs:  # mpi4py's Op objects compare equal but do not hash
        if op == mpi_op:
            return ours
    raise InvalidArgumentError(
        f"unsupported op {_describe_op(op)}: mpiring reduces with MPI.SUM, MPI.PROD, MPI.MAX, "
        "MPI.MIN or 'avg'"
    )


def _describe_op(op: Any) -> str:
    """``MPI.BAND`` for mpi4py's predefined ops (their repr is an address), else the repr."""
    from mpi4py import MPI

    if not isinstance(op, MPI.Op):
        return repr(op)
    for name in dir(MPI):
        value = getattr(MPI, name)
        if isinstance(value, MPI.Op) and value == op:
            return f"MPI.{name}"
    return "a user-defined MPI.Op"


def check_op_dtype(op: Op, dtype: np.dtype) -> None:
    """Raise unless ``op`` can reduce ``dtype``: ``avg`` takes floating-point types only."""
    if op is Op.AVG and is_integer(dtype):
        raise InvalidArgumentError(
            f"op 'avg' averages floating-point arrays, not {np.dtype(dtype).name}: reduce with "
            "'sum' and divide as your integers need (floor, round, ...)"
        )


def bfloat16_dtype() -> np.dtype | None:
    """numpy's bfloat16 from ml_dtypes, when installed (numpy has none of its own)."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return np.dtype(ml_dtypes.bfloat16)


def supported_dtypes() -> list[np.dtype]:
    """Every element type this installation can reduce on the host."""
    return [dt for dt in (row.numpy for row in DTYPES.values()) if dt is not None]


_ROW_BY_DTYPE: dict[np.dtype, DType] = {}


def dtype_row(dtype: np.dtype) -> DType:
    """The table row of a supported dtype; raises naming the dtype otherwise."""
    row = _ROW_BY_DTYPE.get(dtype)
    if row is not None:
        return row
    row = DTYPES.get(np.dtype(dtype).name)
    if row is None:
        names = ", ".join(DTYPES)
        raise InvalidArgumentError(f"unsupported dtype {np.dtype(dtype).name}: mpiring reduces {names}")
    if isinstance(dtype, np.dtype):
        _ROW_BY_DTYPE[dtype] = row
    return row


def dtype_code(dtype: np.dtype) -> int:
    """The wire code of a supported dtype; raises naming the dtype otherwise."""
    return dtype_row(dtype).code


def dtype_name(code: int) -> str:
    """The name behind a wire code (for error messages), or the code itself if unknown."""
    row = DTYPE_BY_CODE.get(int(code))
    return row.name if row is not None else f"dtype code {code}"


def divide_by_ranks(array: np.ndarray, ranks: int) -> None:
    """``array /= ranks`` as op ``avg`` finishes a sum, on the host and (``average`` in
    csrc/fold.cu) the GPU alike: half types divide in float32 and round once, float32 and
    float64 divide in their own type. Under the caller's ``np.seterr`` a quotient that
    underflows is still just a result, not an error."""
    divisor = np.float32(ranks) if array.dtype.itemsize <= 4 else np.float64(ranks)
    with np.errstate(all="ignore"):
        np.divide(array, divisor, out=array, casting="unsafe")


def is_integer(dtype: np.dtype) -> bool:
    return np.dtype(dtype).kind in "iu"


def tolerance(dtype: np.dtype, nranks: int) -> float:
    """Relative error bound of an n-term floating sum or product in ``dtype`` (0 for integers).

    Each of the n-1 operations rounds once, by at most eps/2 relative; the bound is stated
    against sum(|x_i|) so it also holds where terms cancel.
    """
    return max(nranks - 1, 1) * dtype_row(np.dtype(dtype)).epsilon
