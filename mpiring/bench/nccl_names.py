"""Element types and reductions by nccl-tests' names (``-d half``, ``-o sum``) as well as
numpy's, so that nccl-tests command lines carry over. Pure code.

nccl-tests (src/common.cu) names its types int8, uint8, int32, uint32, int64, uint64, half,
float, double, bfloat16, f8e4m3, f8e5m2 (older releases also char and int) and its reductions
sum, prod, max, min, avg, mulsum. mpiring reduces a subset; the others are refused with the
list of what it does reduce, rather than run as something else.
"""

from __future__ import annotations

from .data import DTYPE_NAMES

# nccl-tests' type name -> numpy's, for the types mpiring reduces
NCCL_TO_NUMPY = {"half": "float16", "float": "float32", "double": "float64",
                 "bfloat16": "bfloat16", "int32": "int32", "int64": "int64", "int": "int32"}
# numpy's name -> the name nccl-tests prints in its "type" column
NUMPY_TO_NCCL = {"float16": "half", "float32": "float", "float64": "double",
                 "bfloat16": "bfloat16", "int32": "int32", "int64": "int64"}
NCCL_ONLY_TYPES = ("int8", "uint8", "uint32", "uint64", "char", "f8e4m3", "f8e5m2")
OPS = ("sum", "prod", "max", "min")
NCCL_ONLY_OPS = {
    "avg": "the bench does not time avg (the API has it: op='avg', the sum and then one division "
           "pass, or ncclAvg on nccl); run -o sum: avg costs the sum plus that pass",
    "mulsum": "nccl-tests' mulsum (ncclRedOpCreatePreMulSum) is not an mpiring op",
}
_ALL = "mpiring.bench runs one {what} per run: loop over {choices} in the shell"


def type_name(text: str) -> str:
    """numpy's name of the element type ``text`` (nccl-tests' or numpy's name); raises
    ValueError naming the choices for a type mpiring does not reduce."""
    key = text.strip().lower()
    if key in DTYPE_NAMES:
        return key
    if key in NCCL_TO_NUMPY:
        return NCCL_TO_NUMPY[key]
    choices = "half, float, double, bfloat16, int32, int64 (or " + ", ".join(
        n for n in DTYPE_NAMES if n not in NCCL_TO_NUMPY) + ")"
    if key == "all":
        raise ValueError(_ALL.format(what="type", choices=choices))
    if key in NCCL_ONLY_TYPES:
        raise ValueError(f"{text!r} is an nccl-tests type that mpiring does not reduce: "
                         f"choose from {choices}")
    raise ValueError(f"unknown type {text!r}: choose from {choices}")


def op_name(text: str) -> str:
    """The reduction ``text`` (sum, prod, max, min); raises ValueError for nccl-tests' other
    names with what to do instead."""
    key = text.strip().lower()
    if key in OPS:
        return key
    if key in NCCL_ONLY_OPS:
        raise ValueError(NCCL_ONLY_OPS[key])
    if key == "all":
        raise ValueError(_ALL.format(what="op", choices=", ".join(OPS)))
    raise ValueError(f"unknown op {text!r}: choose from {', '.join(OPS)}")


def nccl_type(numpy_name: str) -> str:
    """The name nccl-tests prints for numpy's ``numpy_name`` (``float32`` -> ``float``)."""
    return NUMPY_TO_NCCL.get(numpy_name, numpy_name)
