"""Rival ``nccl-lib``: ``ncclAllReduce`` of another libnccl, the file ``MPIRING_NCCL_LIB`` names,
in the same run as the libnccl CuPy loads (``nccl-direct``): a newer NCCL beside the installed one.

The file is opened with ctypes, ``RTLD_LOCAL | RTLD_DEEPBIND``: its symbols stay its own and its
references bind to itself first, so the libnccl that CuPy and torch loaded is untouched, and the
two NCCLs live side by side in the process, each with its own communicators, threads and shared
memory. Set-up (collective): ``ncclGetVersion``,
rank 0's ``ncclGetUniqueId`` broadcast over MPI, ``ncclCommInitRank``. Each call:
``ncclAllReduce(send, recv, count, type, op, comm, stream)`` on raw pointers and CuPy's current
stream (in place, ``send`` is ``recv``), its result code checked. Every reduction and element
type ncclAllReduce takes.

A ctypes call costs about a microsecond more of host time than CuPy's Cython binding: eager
points of this row pay it (the banner says so); a CUDA graph (``--graph``) replays the captured
kernels with no host call at all.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable
from typing import Any

from ...core import settings
from ...core.errors import InvalidArgumentError
from ..measure import agree
from .base import Rival, RivalContext, current_stream_reader, device_pointer
from .direct_calls import BFLOAT16_SINCE, nccl_version
from .env import multicast_off
from .nccl_symm import DTYPES, OPS  # nccl.h's ncclDataType_t and ncclRedOp_t, one table

HINT = ("point MPIRING_NCCL_LIB at a libnccl.so.2, e.g. nvidia/nccl/lib/libnccl.so.2 of another "
        "nvidia-nccl wheel of this machine's CUDA major (pip download --no-deps nvidia-nccl-cu13 "
        "or nvidia-nccl-cu12, then unzip it)")


class UniqueId(ctypes.Structure):
    """``ncclUniqueId``: 128 opaque bytes, passed by value to ``ncclCommInitRank``."""

    _fields_ = [("internal", ctypes.c_char * 128)]


class NcclLibrary:
    """The entry points of one libnccl file, typed once."""

    def __init__(self, path: str) -> None:
        # The libnccl of CuPy (and torch) first: a libnccl.so.2 loaded later by its bare name
        # would bind to whichever file of that SONAME is already loaded, ours included, and
        # the other rows would then time this NCCL.
        with contextlib.suppress(Exception):  # no CuPy NCCL: the check below still guards
            import cupy.cuda.nccl  # noqa: F401
        try:
            # RTLD_DEEPBIND: the file's references to its own symbols bind to itself. torch loads
            # its libnccl RTLD_GLOBAL, and without this NCCL 2.32.3's calls inside itself reached
            # torch's 2.28.9: its ncclAllReduce refused its own communicator ("corrupted comm").
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL | os.RTLD_NOW | os.RTLD_DEEPBIND)
        except OSError as err:
            raise InvalidArgumentError(f"MPIRING_NCCL_LIB={path} does not load: {err}") from None
        if lib._handle == _loaded_by_soname():
            raise InvalidArgumentError(
                f"MPIRING_NCCL_LIB={path} is the file a libnccl.so.2 loaded by name resolves to in "
                "this process (the same file as CuPy's, or CuPy's NCCL missing): the other NCCL rows "
                "would time it too; point it at another file, beside CuPy's NCCL")
        self.path = path
        vp, c_int = ctypes.c_void_p, ctypes.c_int
        try:
            self.get_version = self._typed(lib.ncclGetVersion, [ctypes.POINTER(c_int)])
            self.get_unique_id = self._typed(lib.ncclGetUniqueId, [ctypes.POINTER(UniqueId)])
            self.comm_init_rank = self._typed(lib.ncclCommInitRank,
                                              [ctypes.POINTER(vp), c_int, UniqueId, c_int])
            self.all_reduce = self._typed(lib.ncclAllReduce, [vp, vp, ctypes.c_size_t, c_int, c_int, vp, vp])
            self.comm_destroy = self._typed(lib.ncclCommDestroy, [vp])
            self.error_string = lib.ncclGetErrorString
        except AttributeError as err:
            raise InvalidArgumentError(f"MPIRING_NCCL_LIB={path} is not a libnccl: {err}") from None
        self.error_string.argtypes, self.error_string.restype = [c_int], ctypes.c_char_p

    @staticmethod
    def _typed(fn: Any, argtypes: list[Any]) -> Any:
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
        return fn

    def check(self, result: int, what: str) -> None:
        """Raise, with NCCL's own words, where ``result`` (an ``ncclResult_t``) is not success."""
        if result:
            text = self.error_string(result)
            raise RuntimeError(f"{what} failed: {text.decode() if text else 'ncclResult_t'} {result}")

    def version(self) -> tuple[int, int, int]:
        code = ctypes.c_int(0)
        self.check(self.get_version(ctypes.byref(code)), "ncclGetVersion")
        return nccl_version(code.value)


def _loaded_by_soname() -> int | None:
    """The handle of the libnccl.so.2 this process loaded by its bare name, if any (not loading it)."""
    try:
        return ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD | os.RTLD_NOW)._handle
    except OSError:
        return None


class NcclLib(Rival):
    """``nccl-lib``: ``ncclAllReduce`` of the libnccl ``MPIRING_NCCL_LIB`` names."""

    name = "nccl-lib"

    def __init__(self, stream: Callable[[], int] | None = None) -> None:
        self.stream = stream  # the current stream's handle, per call (None: CuPy's; tests pass their own)
        self.lib: NcclLibrary | None = None
        self.comm: int | None = None
        self.version: tuple[int, int, int] | None = None
        self.codes = (0, 0)

    def available(self) -> str | None:
        path = settings.get("MPIRING_NCCL_LIB")
        if not path:
            return f"MPIRING_NCCL_LIB is not set ({HINT})"
        if not os.path.isfile(str(path)):
            return f"MPIRING_NCCL_LIB={path}: no such file ({HINT})"
        return None

    def setup(self, world: Any, ctx: RivalContext) -> None:
        path = str(settings.get("MPIRING_NCCL_LIB"))

        def load() -> None:
            multicast_off()  # before libnccl reads NCCL_NVLS_ENABLE
            self.lib = NcclLibrary(path)
            self.version = self.lib.version()
            self.codes = _codes(ctx.dtype.name, ctx.op, self.version)

        agree(world, load)
        lib = self.lib
        assert lib is not None
        versions = agree(world, lambda: self.version, share=True)
        if len(set(versions)) > 1:  # the same on every rank: every rank raises alike
            raise InvalidArgumentError("MPIRING_NCCL_LIB names different NCCL versions on different ranks: "
                                       + ", ".join(f"rank {r}: {'.'.join(map(str, v))}"
                                                   for r, v in enumerate(versions)))

        def unique_id() -> bytes | None:
            if world.rank:
                return None
            uid = UniqueId()
            lib.check(lib.get_unique_id(ctypes.byref(uid)), "ncclGetUniqueId")
            return bytes(uid)  # the struct's 128 bytes, as ncclCommInitRank takes them

        uid = UniqueId.from_buffer_copy(agree(world, unique_id, share=True)[0])

        def init() -> None:
            comm = ctypes.c_void_p()
            lib.check(lib.comm_init_rank(ctypes.byref(comm), world.size, uid, world.rank), "ncclCommInitRank")
            self.comm = comm.value

        agree(world, init)

    def describe(self) -> str:
        version = ".".join(map(str, self.version)) if self.version else "?"
        path = os.path.abspath(str(settings.get("MPIRING_NCCL_LIB")))
        return f"libnccl {version} from {path}, called through ctypes"

    def prepare(self, bufs: Any, in_place: bool) -> Callable[[], None]:
        lib, comm = self.lib, self.comm
        assert lib is not None and comm is not None, "setup() first"
        all_reduce, check = lib.all_reduce, lib.check
        stream = self.stream if self.stream is not None else current_stream_reader()
        datatype, op = ctypes.c_int(self.codes[0]), ctypes.c_int(self.codes[1])
        count = ctypes.c_size_t(int(bufs.count))
        recv = ctypes.c_void_p(device_pointer(bufs.recv))
        send = recv if in_place else ctypes.c_void_p(device_pointer(bufs.send))
        handle = ctypes.c_void_p(comm)  # the fixed arguments converted once, not per call

        def call() -> None:
            result = all_reduce(send, recv, count, datatype, op, handle, stream())
            if result:
                check(result, "ncclAllReduce")
        return call

    def close(self) -> None:
        if self.lib is None or self.comm is None:
            return
        try:
            import cupy

            cupy.cuda.Device().synchronize()  # the last calls ran: the communicator may go
        except ImportError:  # (the tests' fake library has no GPU work)
            pass
        self.lib.check(self.lib.comm_destroy(self.comm), "ncclCommDestroy")
        self.comm = None


def _codes(dtype: str, op: str, version: tuple[int, ...]) -> tuple[int, int]:
    """(ncclDataType_t, ncclRedOp_t) of numpy's type ``dtype`` and reduction ``op``."""
    if dtype not in DTYPES:
        raise InvalidArgumentError(f"ncclAllReduce has no type for {dtype}")
    if dtype == "bfloat16" and tuple(version[:2]) < BFLOAT16_SINCE:
        have = ".".join(map(str, version))
        raise InvalidArgumentError(f"libnccl {have} predates ncclBfloat16 (NCCL >= 2.10)")
    return DTYPES[dtype], OPS[op]
