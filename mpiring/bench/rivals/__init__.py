"""The benchmark's rivals: other libraries' allreduce, measured in the same run and the same way
as mpiring's rows (same buffers and sizes, the same element-by-element check on poisoned
output before timing, the same eager and ``--graph`` timing), so the table compares like with
like. They are bench rows, not rows of mpiring's algorithm table: ``mpiring.Communicator``
knows nothing of them.

    nccl-direct       ncclAllReduce on CuPy's NCCL communicator, nothing else (direct_calls.py)
    mpi-direct        mpi4py's Comm.Allreduce on host arrays, nothing else    (direct_calls.py)
    torch             torch.distributed.all_reduce, NCCL backend          (torch_nccl.py)
    torch-symm-1shot  torch.ops.symm_mem one-shot all-reduce, one node    (torch_symm.py)
    torch-symm-2shot  torch.ops.symm_mem two-shot all-reduce, one node    (torch_symm.py)
    nccl-symm         ncclAllReduce in an NCCL_WIN_COLL_SYMMETRIC window  (nccl_symm.py)
    nccl-lib          ncclAllReduce of another libnccl (MPIRING_NCCL_LIB)  (nccl_lib.py)

The two *direct* rows are the plain library calls that the table's ``nccl`` and ``mpi`` rows
make through ``mpiring.Communicator.Allreduce`` (whose times include mpiring's argument
checks, dispatch and agreement check; the direct rows' do not): a spec's ``wraps`` names that
row. A direct row is the mode's default baseline of the allreduce, with the row it wraps as
the fallback where it cannot run (:mod:`mpiring.bench.baseline`).

This module is the registry, pure and cheap to import: each :class:`RivalSpec` says what its
row times, which reductions, element types and communicators it takes, and how to make its
runtime object (imported only when the row runs; torch and nccl4py are imported later still,
by the runtime, so the bench starts fast and runs without them). Where a rival cannot run, its
rows are skipped with a one-line reason (:func:`refusal` for the reasons known from the
options alone; :mod:`.runtime` for the others).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

GPU, HOST = "gpu", "host"
ALL_OPS = ("sum", "prod", "max", "min")


@dataclass(frozen=True)
class RivalSpec:
    """One rival row.

    Attributes:
        name: its ``--algo`` name (lower case, not a name of mpiring's table).
        summary: one line: what the row calls and what its time includes (banner, README).
        make: returns the runtime object (:class:`~.base.Rival`); imports what it needs.
        ops: the reductions it takes (``-o``); others are refused with a reason.
        dtypes: the element types it takes (numpy names), None for every one.
        node_only: it runs only where every rank is on one node.
        memory: "gpu" or "host" (``mpi-direct``, and the tests' rivals).
        graph_capturable: its calls may be captured into a CUDA graph (``--graph``).
        wraps: the row of mpiring's algorithm table whose call this row makes directly,
            without mpiring on the path ("" for none): the default baseline's fallback.
    """

    name: str
    summary: str
    make: Callable[[], Any]
    ops: tuple[str, ...] = ALL_OPS
    dtypes: tuple[str, ...] | None = None
    node_only: bool = False
    memory: str = GPU
    graph_capturable: bool = True
    wraps: str = ""

    def runs_on(self, nodes: int) -> bool:
        return not self.node_only or nodes == 1


def _lazy(module: str, attr: str, *args: Any) -> Callable[[], Any]:
    """A factory importing ``module`` (relative to this package) only when called."""
    def make() -> Any:
        return getattr(importlib.import_module(f"{__name__}.{module}"), attr)(*args)
    return make


TORCH_SYMM_DTYPES = ("float32", "bfloat16")  # symm_mem's kernels: AT_DISPATCH_FLOAT_AND_BFLOAT16
MPI_DTYPES = ("float16", "float32", "float64", "int32", "int64")  # MPI has no bfloat16 type

_RIVALS: dict[str, RivalSpec] = {}


def register(spec: RivalSpec) -> RivalSpec:
    """Add a rival (every rank alike; tests add host rivals)."""
    if spec.name in _RIVALS:
        raise ValueError(f"a rival named {spec.name!r} exists already")
    _RIVALS[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a rival added by :func:`register` (tests)."""
    _RIVALS.pop(name, None)


for _spec in (
    RivalSpec("nccl-direct", "ncclAllReduce on CuPy's NCCL communicator "
              "(cupy.cuda.nccl.NcclCommunicator.allReduce on raw pointers, on the bench's stream), "
              "nothing else: the call the nccl row makes through mpiring",
              _lazy("direct_calls", "NcclDirect"), wraps="nccl"),
    RivalSpec("mpi-direct", "mpi4py's Comm.Allreduce(send, recv, op) on a duplicate of "
              "COMM_WORLD (MPI.IN_PLACE in place; MPI's own op, also for max/min), nothing "
              "else: the call the mpi row makes through mpiring",
              _lazy("direct_calls", "MpiDirect"), dtypes=MPI_DTYPES, memory=HOST,
              graph_capturable=False, wraps="mpi"),
    RivalSpec("torch", "torch.distributed.all_reduce (NCCL process group) on the bench's buffers; "
              "out of place it also times the copy send -> recv that torch's in-place-only "
              "all_reduce needs", _lazy("torch_nccl", "TorchAllReduce")),
    RivalSpec("torch-symm-1shot", "copy-in of the input into a torch symmetric-memory buffer + "
              "torch.ops.symm_mem one-shot all-reduce into recv (the copy is timed: the bench's "
              "data is not in symmetric memory); multicast off",
              _lazy("torch_symm", "TorchSymm", "1shot"), ops=("sum",), dtypes=TORCH_SYMM_DTYPES,
              node_only=True),
    RivalSpec("torch-symm-2shot", "copy-in into a torch symmetric-memory buffer + "
              "torch.ops.symm_mem two-shot all-reduce into recv (copy-out too where torch has "
              "no two_shot_all_reduce_out; copies timed); multicast off",
              _lazy("torch_symm", "TorchSymm", "2shot"), ops=("sum",), dtypes=TORCH_SYMM_DTYPES,
              node_only=True),
    RivalSpec("nccl-symm", "copy-in into an ncclMemAlloc buffer registered with "
              "ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC), in-place ncclAllReduce there, "
              "copy-out into recv (both copies timed; nccl4py)", _lazy("nccl_symm", "NcclSymm"),
              node_only=True),
    RivalSpec("nccl-lib", "ncclAllReduce of the libnccl that MPIRING_NCCL_LIB names (e.g. a newer "
              "NCCL beside CuPy's), on raw pointers and the bench's stream, through ctypes (about "
              "a microsecond more host time per eager call than CuPy's binding)",
              _lazy("nccl_lib", "NcclLib")),
):
    register(_spec)


def names(memory: str | None = None) -> tuple[str, ...]:
    """Every rival's name in sweep order, or those of one kind of ``memory``."""
    return tuple(p.name for p in _RIVALS.values() if memory is None or p.memory == memory)


def is_rival(name: str) -> bool:
    return name in _RIVALS


def wrapped(name: str) -> str:
    """The table row whose call rival ``name`` makes directly ("" for none, or no rival)."""
    spec = _RIVALS.get(name)
    return spec.wraps if spec is not None else ""


def get(name: str) -> RivalSpec:
    try:
        return _RIVALS[name]
    except KeyError:
        raise ValueError(f"unknown rival {name!r}: choose from {', '.join(_RIVALS)}") from None


def refusal(name: str, op: str, dtype: str, nodes: int = 1) -> str | None:
    """Why rival ``name`` cannot run this run's reduction ``op`` on ``dtype`` (numpy's name) on
    ``nodes`` nodes, from the options alone; None when it can."""
    spec = get(name)
    if op not in spec.ops:
        return (f"reduces with {'/'.join(spec.ops)} only, not -o {op}"
                + (": torch.ops.symm_mem's all-reduce kernels take reduce_op='sum' only"
                   if name.startswith("torch-symm") else ""))
    if spec.dtypes is not None and dtype not in spec.dtypes:
        return (f"takes {'/'.join(spec.dtypes)} only, not -d {dtype}"
                + (": MPI has no bfloat16 type" if name == "mpi-direct" and dtype == "bfloat16"
                   else ""))
    if not spec.runs_on(nodes):
        return f"runs only where every rank is on one node, and the communicator spans {nodes}"
    return None


__all__ = ["ALL_OPS", "GPU", "HOST", "RivalSpec", "get", "is_rival", "names", "refusal", "register",
           "unregister", "wrapped"]
