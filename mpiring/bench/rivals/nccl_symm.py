"""Rival ``nccl-symm``: NCCL's symmetric kernels, through nccl4py (``nccl.core``).

Set-up (collective): an NCCL communicator of its own (``Communicator.init`` with a unique id
rank 0 makes and MPI broadcasts), one buffer from ``ncclMemAlloc`` (``nccl.core.mem_alloc``)
as large as the run's largest point, registered with
``ncclCommWindowRegister(..., NCCL_WIN_COLL_SYMMETRIC)`` (``Communicator.register_window``
with ``WindowFlag.COLL_SYMMETRIC``).

Each call: copy the input into the window, ``ncclAllReduce`` in place there, copy the result
out into ``recv``, all on CuPy's current stream (so a CUDA graph captures all three). NCCL
picks its symmetric kernels only when both of an allreduce's buffers lie in such a window, and
the bench's data, like a user's, is in ordinary memory: **both copies are timed** (what a user
whose tensors are not in NCCL memory must do). In place, ``send`` is ``recv``. Every reduction
and element type ncclAllReduce takes; where NCCL has no symmetric kernel for one (or with
``NCCL_NVLS_ENABLE=0`` no multicast-free one) it falls back to its other algorithms, which
``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING`` shows.

The hot path calls ``nccl.bindings.nccl.all_reduce`` on raw pointers (no per-call buffer
resolution), with the communicator's handle wrapped once in ``nccl.bindings.nccl.Comm``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core.install import pip_install
from ..measure import agree
from .base import Rival, RivalContext, current_stream_reader, device_pointer, missing
from .env import multicast_off

HINT = (f"{pip_install('peers')} (nccl4py), beside the nvidia-nccl wheel of the cuda13 or cuda12 "
        "extra, whose libnccl it loads")
MIN_NCCL = (2, 27)  # ncclCommWindowRegister and NCCL_WIN_COLL_SYMMETRIC
# numpy's names -> ncclDataType_t; -o -> ncclRedOp_t
DTYPES = {"int32": 2, "int64": 4, "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}
D2D = 3  # cudaMemcpyDeviceToDevice


def nccl_too_old(version: tuple[int, ...] | None) -> str | None:
    """Why a libnccl of ``version`` cannot register symmetric windows; None when it can."""
    if version is None:
        return None
    if tuple(version[:2]) < MIN_NCCL:
        have = ".".join(map(str, version))
        want = ".".join(map(str, MIN_NCCL))
        return f"libnccl {have} has no symmetric windows (NCCL >= {want}): upgrade the nvidia-nccl wheel"
    return None


class NcclSymm(Rival):
    name = "nccl-symm"

    def __init__(self) -> None:
        self.comm: Any = None
        self.buffer: Any = None
        self.window: Any = None
        self.version = ""

    def available(self) -> str | None:
        multicast_off()  # before libnccl reads NCCL_NVLS_ENABLE
        why = missing("nccl.core", HINT, package="nccl4py")
        if why:
            return why
        import nccl.core as nc

        try:
            lib = nc.get_version().libnccl
        except Exception as err:  # noqa: BLE001 - a missing libnccl surfaces here
            return f"nccl4py cannot load libnccl: {type(err).__name__}: {err} ({HINT})"
        if lib is None:
            return f"nccl4py found no libnccl ({HINT})"
        self.version = str(lib.version)
        release = getattr(lib.version, "release", None)
        return nccl_too_old(tuple(release) if release else None)

    def setup(self, world: Any, ctx: RivalContext) -> None:
        import nccl.bindings.nccl as nb
        import nccl.core as nc

        uid = agree(world, lambda: nc.get_unique_id() if world.rank == 0 else None,
                    share=True)[0]

        def init() -> None:
            self.comm = nc.Communicator.init(world.size, world.rank, uid)

        agree(world, init)

        def window() -> None:
            self.buffer = nc.mem_alloc(max(ctx.max_bytes, 1))
            self.window = self.comm.register_window(self._bytes_view(ctx.max_bytes),
                                                    flags=nc.WindowFlag.COLL_SYMMETRIC)

        agree(world, window)
        self.handle = nb.Comm(self.comm.ptr)
        self.all_reduce = nb.all_reduce
        self.ptr = int(self.buffer.handle)
        self.dtype, self.op = DTYPES[ctx.dtype.name], OPS[ctx.op]

    def _bytes_view(self, nbytes: int) -> Any:
        """The NCCL buffer as a CuPy uint8 array (what ``register_window`` resolves)."""
        import cupy

        mem = cupy.cuda.UnownedMemory(int(self.buffer.handle), nbytes, self.buffer)
        return cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))

    def describe(self) -> str:
        import nccl.core as nc

        return f"nccl4py {nc.__version__}, libnccl {self.version}; symmetric window of " \
               f"{self.buffer.size if self.buffer is not None else 0} bytes"

    def prepare(self, bufs: Any, in_place: bool) -> Callable[[], None]:
        import cupy

        memcpy = cupy.cuda.runtime.memcpyAsync
        all_reduce, handle, window = self.all_reduce, self.handle, self.ptr
        dtype, op = self.dtype, self.op
        count = int(bufs.count)
        nbytes = count * bufs.gen.dtype.itemsize
        recv = device_pointer(bufs.recv)
        send = recv if in_place else device_pointer(bufs.send)
        current_stream = current_stream_reader()

        def call() -> None:
            stream = current_stream()
            memcpy(window, send, nbytes, D2D, stream)
            all_reduce(window, window, count, dtype, op, handle, stream)
            memcpy(recv, window, nbytes, D2D, stream)
        return call

    def close(self) -> None:
        if self.comm is None:
            return
        import cupy

        cupy.cuda.Device().synchronize()
        self.comm.destroy()  # deregisters the window; intra-node collective
        if self.buffer is not None:
            self.buffer.close()  # ncclMemFree
        self.comm = self.buffer = self.window = None
