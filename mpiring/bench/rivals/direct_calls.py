"""The direct rows: the library calls that mpiring's ``nccl`` and ``mpi`` rows make, called as
their users call them, with nothing of mpiring on the path.

``mpiring.Communicator.Allreduce(algorithm="nccl")`` and ``(algorithm="mpi")`` pay mpiring's
per-call work before the library call: describing and checking the arguments, dispatch, and
(the communicator's default) the agreement check. A speed-up against such a row is not one
against NCCL or MPI, so the bench also times:

* ``nccl-direct`` (GPU arrays): ``ncclAllReduce`` through CuPy's NCCL bindings
  (``cupy.cuda.nccl``): a ``NcclCommunicator`` of its own (the unique id made by rank 0 and
  shared over MPI), and per call ``comm.allReduce(sendptr, recvptr, count, datatype, op,
  stream)`` on raw pointers and CuPy's current stream (the bench's stream, or its capture
  stream under ``--graph``: NCCL's calls can be captured). In place, ``sendptr`` is
  ``recvptr``. Every reduction (sum, prod, max, min); float16/32/64, int32/64, and bfloat16
  (``NCCL_BFLOAT16`` where CuPy has it, else ncclBfloat16's value where libnccl has the type).
* ``mpi-direct`` (host arrays): mpi4py's ``Comm.Allreduce(send, recv, op)`` on a duplicate of
  the bench's world (``COMM_WORLD``'s ranks), ``MPI.IN_PLACE`` in place, with MPI's own
  operator (``MPI.MAX`` for floating max too: mpiring's ``mpi`` row uses a NaN-propagating
  operator there; the bench's inputs hold no NaN). Every reduction; every type MPI has (not
  bfloat16).

Each call is what a user writes; the objects it needs (communicator, operator, pointers,
type codes) are made once per point in :meth:`~.base.Rival.prepare`, as a user keeps them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.errors import InvalidArgumentError
from ...core.install import cuda_choices
from ..measure import agree
from .base import Rival, RivalContext, device_pointer, missing
from .env import multicast_off

NCCL_HINT = f"install the extra of your CUDA major, which brings the nvidia-nccl wheel: {cuda_choices()}"
# numpy's names -> the names of CuPy's ncclDataType_t constants; -o -> ncclRedOp_t's
NCCL_TYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
              "int32": "NCCL_INT32", "int64": "NCCL_INT64", "bfloat16": "NCCL_BFLOAT16"}
NCCL_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}
NCCL_BFLOAT16 = 9  # ncclBfloat16, in nccl.h since NCCL 2.10
BFLOAT16_SINCE = (2, 10)


def nccl_version(code: int) -> tuple[int, int, int]:
    """``ncclGetVersion``'s code as (major, minor, patch): 22703 -> (2, 27, 3) (NCCL >= 2.9),
    2804 -> (2, 8, 4) (before)."""
    if code >= 10000:
        return code // 10000, code % 10000 // 100, code % 100
    return code // 1000, code % 1000 // 100, code % 100


def nccl_codes(nccl: Any, dtype: str, op: str, version: tuple[int, ...] | None) -> tuple[int, int]:
    """(ncclDataType_t, ncclRedOp_t) for numpy's type ``dtype`` and reduction ``op``, from CuPy's
    ``nccl`` module; raises :class:`InvalidArgumentError` for a type it cannot pass."""
    name = NCCL_TYPES.get(dtype)
    if name is None:
        raise InvalidArgumentError(f"ncclAllReduce has no type for {dtype}")
    code = getattr(nccl, name, None)
    if code is None and dtype == "bfloat16":
        if version is None or tuple(version[:2]) < BFLOAT16_SINCE:
            have = ".".join(map(str, version)) if version else "unknown"
            raise InvalidArgumentError(f"CuPy's nccl module has no NCCL_BFLOAT16 and libnccl "
                                       f"{have} may predate ncclBfloat16 (NCCL >= 2.10)")
        code = NCCL_BFLOAT16
    if code is None:
        raise InvalidArgumentError(f"CuPy's nccl module has no {name}")
    return int(code), int(getattr(nccl, NCCL_OPS[op]))


class NcclDirect(Rival):
    """``nccl-direct``: ``ncclAllReduce`` on CuPy's ``NcclCommunicator``, nothing else."""

    name = "nccl-direct"

    def __init__(self) -> None:
        self.comm: Any = None
        self.version: tuple[int, int, int] | None = None
        self.codes: tuple[int, int] = (0, 0)

    def available(self) -> str | None:
        multicast_off()  # before libnccl reads NCCL_NVLS_ENABLE
        why = missing("cupy.cuda.nccl", NCCL_HINT, package="cupy")
        if why:
            return why
        from cupy.cuda import nccl

        if not getattr(nccl, "available", True):
            return f"CuPy was built without NCCL, or found no libnccl ({NCCL_HINT})"
        try:
            self.version = nccl_version(int(nccl.get_version()))
        except Exception as err:  # noqa: BLE001 - a libnccl that cannot load surfaces here
            return f"CuPy cannot load libnccl: {type(err).__name__}: {err} ({NCCL_HINT})"
        return None

    def setup(self, world: Any, ctx: RivalContext) -> None:
        from cupy.cuda import nccl

        def codes() -> None:
            self.codes = nccl_codes(nccl, ctx.dtype.name, ctx.op, self.version)

        agree(world, codes)
        uid = agree(world, lambda: nccl.get_unique_id() if world.rank == 0 else None,
                    share=True)[0]

        def init() -> None:
            self.comm = nccl.NcclCommunicator(world.size, uid, world.rank)

        agree(world, init)

    def describe(self) -> str:
        import cupy

        version = ".".join(map(str, self.version)) if self.version else "?"
        return f"CuPy {cupy.__version__}, libnccl {version}"

    def prepare(self, bufs: Any, in_place: bool) -> Callable[[], None]:
        import cupy

        assert self.comm is not None, "setup() first"
        all_reduce, current = self.comm.allReduce, cupy.cuda.get_current_stream
        datatype, op = self.codes
        count = int(bufs.count)
        recv = device_pointer(bufs.recv)
        send = recv if in_place else device_pointer(bufs.send)

        def call() -> None:
            all_reduce(send, recv, count, datatype, op, current().ptr)
        return call

    def close(self) -> None:
        if self.comm is None:
            return
        import cupy

        cupy.cuda.Device().synchronize()
        self.comm.destroy()
        self.comm = None


class MpiDirect(Rival):
    """``mpi-direct``: mpi4py's ``Comm.Allreduce`` on host arrays, nothing else."""

    name = "mpi-direct"

    def __init__(self) -> None:
        self.comm: Any = None
        self.op: Any = None

    def setup(self, world: Any, ctx: RivalContext) -> None:
        from mpi4py import MPI

        def dup() -> None:
            self.comm = world.Dup()

        agree(world, dup)
        self.op = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[ctx.op]

    def describe(self) -> str:
        import mpi4py
        from mpi4py import MPI

        library = MPI.Get_library_version().strip().splitlines()[0].strip()
        return f"mpi4py {mpi4py.__version__}, {' '.join(library.split())}"

    def prepare(self, bufs: Any, in_place: bool) -> Callable[[], None]:
        from mpi4py import MPI

        assert self.comm is not None, "setup() first"
        allreduce, op = self.comm.Allreduce, self.op
        send = MPI.IN_PLACE if in_place else bufs.send
        recv = bufs.recv

        def call() -> None:
            allreduce(send, recv, op)
        return call

    def close(self) -> None:
        if self.comm is not None:
            self.comm.Free()
            self.comm = None
