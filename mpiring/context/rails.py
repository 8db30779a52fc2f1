"""The engines between nodes that the hierarchical allreduce (``mpiring.algorithms.hier``) runs
on each rank's *rail* (the ranks at the same place on every node): NCCL (:class:`NcclRail`) or
a CUDA-aware MPI (:class:`MpiRail`), and the set-up check of the ``inter=`` choice."""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import numpy as np
from mpi4py import MPI

from ..core import settings
from ..core.errors import InvalidArgumentError, SetupError, UnavailableError
from ..core.install import cuda_choices
from ..core.mpi_ops import builtin_op

if TYPE_CHECKING:
    from ..core.ops import Op
    from ..node.groups import Groups
    from ..node.signals import Waiter

INTERS = ("auto", "nccl", "mpi")
CUDA_AWARE_ENV = "MPIRING_CUDA_AWARE_MPI"


def cuda_aware_mpi() -> bool:
    """Whether the MPI library moves device memory: ``MPIRING_CUDA_AWARE_MPI=0|1`` if set, else
    the library's own answer (Open MPI's ``MPIX_Query_cuda_support``, MPICH's
    ``MPIX_GPU_query_support``), else False."""
    told = settings.flag(CUDA_AWARE_ENV)
    if told is not None:
        return told
    query = getattr(MPI, "Query_cuda_support", None)
    if query is not None:
        return bool(query())
    lib = ctypes.CDLL(None)
    if hasattr(lib, "MPIX_Query_cuda_support"):
        return bool(lib.MPIX_Query_cuda_support())
    if hasattr(lib, "MPIX_GPU_query_support"):
        answer = ctypes.c_int(0)
        lib.MPIX_GPU_query_support(0, ctypes.byref(answer))  # MPIX_GPU_SUPPORT_CUDA
        return bool(answer.value)
    return False


def check_inter(inter: str, groups: Groups) -> None:
    """Refuse an unknown engine, and ``inter="mpi"`` across nodes where the MPI cannot move
    device memory (the same answer on every rank: one MPI library)."""
    if inter not in INTERS:
        raise InvalidArgumentError(f"inter={inter!r}: choose one of {', '.join(map(repr, INTERS))}")
    if inter == "mpi" and groups.spans_nodes and not cuda_aware_mpi():
        raise SetupError(mpi_not_cuda_aware())


def mpi_not_cuda_aware() -> str:
    """Why ``inter="mpi"`` cannot run here, and the remedies."""
    return ("inter='mpi' needs a CUDA-aware MPI, and this one says it is not (or cannot say): use "
            f"inter='nccl' ({cuda_choices()}), or an MPI built with CUDA support (Open MPI "
            f"--with-cuda, MPICH with CUDA); set {CUDA_AWARE_ENV}=1 if yours is CUDA-aware but has "
            "no query")


class MpiRail:
    """Inter-node engine over a CUDA-aware MPI: ``MPI_Allreduce`` in place on device memory,
    polled so that it is bounded. MPI calls are host-ordered, so each one first waits (on the
    host) for the GPU work it reads."""

    def __init__(self, rail: MPI.Intracomm, waiter: Waiter) -> None:
        import cupy

        self.rail, self._cupy = rail, cupy
        self.waiter = waiter
        self._ready = cupy.cuda.Event(disable_timing=True)

    def allreduce(self, src: int, dst: int, count: int, dtype: np.dtype, op: Op, stream: Any) -> None:
        if count == 0:
            return
        cupy = self._cupy
        if src != dst:
            cupy.cuda.runtime.memcpyAsync(dst, src, count * dtype.itemsize,
                                          cupy.cuda.runtime.memcpyDeviceToDevice, stream.ptr)
        if self.rail.size == 1:
            return
        self._ready.record(stream)
        self._ready.synchronize()  # this stream's work only: what the MPI call reads is ready
        memory = cupy.cuda.UnownedMemory(dst, count * dtype.itemsize, self)
        view = cupy.ndarray(count, dtype, cupy.cuda.MemoryPointer(memory, 0))
        request = self.rail.Iallreduce(MPI.IN_PLACE, view, op=builtin_op(op))
        self.waiter.request(request, lambda: "every node to join the inter-node allreduce (MPI)",
                            buffers=(view,))

    def close(self) -> None:
        pass

    abort = close


class NcclRail:
    """Inter-node engine over NCCL: one communicator per rail, made once (the unique id goes
    round the rail by MPI), ``ncclAllReduce`` in place on the net stream."""

    def __init__(self, rail: MPI.Intracomm) -> None:
        from .nccl import NcclBaselines

        self.nccl = NcclBaselines(rail, 0, None)

    def allreduce(self, src: int, dst: int, count: int, dtype: np.dtype, op: Op, stream: Any) -> None:
        self.nccl.allreduce(src, dst, count, dtype, op, stream)

    def close(self) -> None:
        self.nccl.close()

    def abort(self) -> None:
        self.nccl.abort()


def rail_engine(inter: str, rail: MPI.Intracomm, waiter: Waiter) -> MpiRail | NcclRail:
    """The engine ``inter`` asks for on ``rail`` ("auto": NCCL where it loads, else a
    CUDA-aware MPI); made collectively over the rail (NCCL's communicator)."""
    from .nccl import nccl_module

    if inter == "auto":
        try:
            nccl_module()
            inter = "nccl"
        except UnavailableError:
            inter = "mpi"
    if inter == "mpi":
        if not cuda_aware_mpi():  # inter="auto" without NCCL lands here
            raise UnavailableError(mpi_not_cuda_aware())
        return MpiRail(rail, waiter)
    return NcclRail(rail)
