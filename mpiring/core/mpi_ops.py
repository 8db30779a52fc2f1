"""The MPI reduction operator for an mpiring op on host arrays, with mpiring's NaN rule.

MPI leaves NaN in ``MPI_MAX``/``MPI_MIN`` to the implementation (MPICH returns the other
operand). mpiring's rule, on every algorithm of its own, is IEEE ``maximum``/``minimum`` (as
numpy's): a NaN on any rank makes the element NaN. So floating max/min through MPI (the
``mpi`` row, ``hier``'s step between nodes on host arrays) use a user-defined operator
built on numpy's ufuncs; everything else uses MPI's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mpi4py import MPI
from mpi4py.util.dtlib import to_numpy_dtype

from .errors import InvalidArgumentError
from .ops import Op

_NAN_OPS: dict[Op, MPI.Op] = {}


def builtin_op(op: Op) -> MPI.Op:
    """MPI's own operator for ``op`` (the dispatcher runs ``avg`` as ``sum`` on MPI's rows).

    For device buffers (CUDA-aware MPI between nodes): a user-defined operator would be
    handed device pointers, so NaN in max/min is then MPI's business.
    """
    name = op.row.mpi
    if name is None:
        raise InvalidArgumentError(f"MPI has no op {op.name.lower()}")
    return getattr(MPI, name)


def mpi_op(op: Op, dtype: np.dtype) -> MPI.Op:
    """For host arrays: ``MPI.SUM`` & co., or for floating max/min an operator that propagates NaN."""
    if op not in (Op.MAX, Op.MIN) or np.dtype(dtype).kind != "f":
        return builtin_op(op)
    found = _NAN_OPS.get(op)
    if found is None:
        ufunc = op.ufunc

        def fold(inbuf: Any, inoutbuf: Any, datatype: MPI.Datatype) -> None:
            dt = to_numpy_dtype(datatype)
            with np.errstate(all="ignore"):
                ufunc(np.frombuffer(inbuf, dtype=dt), np.frombuffer(inoutbuf, dtype=dt),
                      out=np.frombuffer(inoutbuf, dtype=dt))

        found = _NAN_OPS[op] = MPI.Op.Create(fold, commute=True)
    return found
