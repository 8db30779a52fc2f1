"""What one rank's call is, field by field: the values the agreement check compares across
ranks (:mod:`mpiring.call.agreement` on the host, :mod:`mpiring.core.descriptor` on the GPU), and how
each reads in an error ("float32", not "dtype 2"). Pure: no MPI.

Two calls that would move data differently differ in at least one field:

* ``count``: recvbuf's elements; ``dtype``, ``op``, ``algorithm``, ``batches``, ``memory``,
  ``collective``: wire codes (0 batches: the default);
* ``block``: Reduce_scatter_block's and Allgather's elements per rank: the whole vector divided
  by the rank count, counted alike in place or not; 0 for Allreduce;
* ``in_place``: 1 if the rank passed ``MPI.IN_PLACE`` to Reduce_scatter_block or Allgather, whose
  recvbuf then holds another count than out of place (``n * m`` against ``m``): MPI requires it
  on every rank or on none. Always 0 for Allreduce, whose recvbuf holds ``count`` elements
  either way: each rank may reduce in place or not on its own.

Before ``block`` and ``in_place`` (issue 25), a rank in place with ``c`` elements (block
``c / n``) and ranks out of place with recvbuf ``c`` (block ``c``) agreed on every field.
"""

from __future__ import annotations

from collections.abc import Callable

from .ops import Op, dtype_name

FIELDS = ("count", "dtype", "op", "algorithm", "batches", "memory", "collective", "block", "in_place")

# What every rank must pass alike, as a mismatch error ends: "Every rank must pass the same ...".
SAME = ("count, dtype, op, algorithm, batches and memory kind, to the same collective; to "
        "Reduce_scatter_block and Allgather, the same block (elements per rank) and MPI.IN_PLACE "
        "on every rank or on none, as MPI requires")


def describe_field(name: str, code: int) -> str:
    """How a field's wire code reads in an error ("float32", not "dtype 2")."""
    return FIELD_NAMES.get(name, str)(code)


def _batches_name(code: int) -> str:
    return str(code) if code else "default"


def _op_name(code: int) -> str:
    return Op(code).name.lower() if code in Op._value2member_map_ else f"op code {code}"


def _memory_name(code: int) -> str:
    return {0: "host", 1: "GPU"}.get(code, f"memory code {code}")


def _place_name(code: int) -> str:
    return {0: "out of place", 1: "MPI.IN_PLACE"}.get(code, f"in_place code {code}")


# How each field's wire code reads in an error (read at call time, so defined after its helpers);
# an AgreementCheck adds the algorithm and collective names it is given.
FIELD_NAMES: dict[str, Callable[[int], str]] = {
    "dtype": dtype_name, "op": _op_name, "memory": _memory_name, "batches": _batches_name,
    "in_place": _place_name}
