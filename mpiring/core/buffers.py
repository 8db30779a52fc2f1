"""Turning what users pass (numpy, CuPy, torch, anything with ``__cuda_array_interface__`` or
DLPack) into a flat description of memory, and the local checks on a send/recv pair.

Pure code apart from optional imports: no MPI, no device calls. Device-side checks (is the
pointer device memory, on which GPU) live with the CUDA transport.
"""

from __future__ import annotations

import enum
import sys
from typing import Any, NamedTuple

import numpy as np

from .errors import InvalidArgumentError
from .ops import bfloat16_dtype, dtype_code


class Memory(enum.IntEnum):
    """Where a buffer lives. Values are wire codes of the agreement check."""

    HOST = 0
    CUDA = 1


class LazyView(NamedTuple):
    """A CuPy view of elements ``start:stop`` of ``owner`` (a torch tensor, or an object with
    ``__cuda_array_interface__``), made only when :attr:`Buffer.array` is read: CuPy's view of a
    torch tensor costs tens of microseconds per buffer, and no row mpiring ships reads it (the
    GPU path works on addresses); a user's own row still can."""

    owner: Any
    dtype: np.dtype
    start: int = 0
    stop: int | None = None

    def make(self) -> Any:
        view = _cupy_view(self.owner, self.dtype)
        return None if view is None else view[self.start:self.stop]


class Buffer(NamedTuple):
    """A contiguous run of ``count`` elements of ``dtype`` at ``address``.

    :attr:`array` is a flat view the host transport uses directly (a numpy array) for host
    memory; for device memory it is a CuPy array over the same memory (or None when CuPy cannot
    represent the dtype), which the GPU path does not need: it works on ``address``. ``view``
    holds that view, or (torch tensors, CAI objects) the :class:`LazyView` that makes it when
    ``array`` is read. Immutable; a NamedTuple because one is built per buffer per call (3x
    cheaper than a frozen dataclass).
    """

    memory: Memory
    address: int
    count: int  # type: ignore[assignment]  # shadows tuple.count, which nothing here uses
    dtype: np.dtype
    readonly: bool
    view: Any  # the flat view, a LazyView, or None
    owner: Any

    @property
    def array(self) -> Any:
        """The flat view (made now from a :class:`LazyView`, each time it is read)."""
        view = self.view
        return view.make() if type(view) is LazyView else view

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize

    def part(self, start: int, count: int) -> Buffer:
        """Elements ``start .. start + count`` of this buffer, as a buffer of their own."""
        if start < 0 or count < 0 or start + count > self.count:
            raise ValueError(f"part {start}+{count} is outside a buffer of {self.count} elements")
        view = self.view
        if type(view) is LazyView:
            view = view._replace(start=view.start + start, stop=view.start + start + count)
        elif view is not None:
            view = view[start:start + count]
        return Buffer(self.memory, self.address + start * self.dtype.itemsize, count, self.dtype,
                      self.readonly, view, self.owner)


# DLPack device types (dlpack.h): what we accept and what we name in errors.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
_DL_NAMES = {_DL_CUDA_HOST: "pinned host memory", _DL_CUDA_MANAGED: "CUDA managed memory"}


def describe(obj: Any, role: str) -> Buffer:
    """Describe ``obj`` as a :class:`Buffer`; ``role`` ("sendbuf"/"recvbuf") names it in errors."""
    if isinstance(obj, np.ndarray):
        return _from_numpy(obj, role)
    cupy = sys.modules.get("cupy")
    if cupy is not None and type(obj) is cupy.ndarray:  # the common case, without building a CAI dict
        return _from_cupy(obj, role)
    if _is_torch_tensor(obj):
        return _from_torch(obj, role)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(cai, obj, role)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(obj, role)
    raise InvalidArgumentError(
        f"{role} of type {type(obj).__name__} is not an array mpiring can read: pass a numpy or "
        "CuPy array, a torch tensor, or an object with __cuda_array_interface__ or DLPack"
    )


_CHECKED: dict[np.dtype, np.dtype] = {}  # dtypes that passed _check_dtype (a handful at most)


def _check_dtype(dtype: np.dtype, role: str) -> np.dtype:
    known = _CHECKED.get(dtype)
    if known is not None:
        return known
    try:
        dtype_code(dtype)
    except InvalidArgumentError as err:
        raise InvalidArgumentError(f"{role}: {err}") from None
    dtype = np.dtype(dtype)
    if not dtype.isnative:  # peers would read its bytes in their own order
        raise InvalidArgumentError(
            f"{role} has non-native byte order ({dtype.str}): pass "
            "x.astype(x.dtype.newbyteorder('='))"
        )
    _CHECKED[dtype] = dtype
    return dtype


def _not_contiguous(role: str, strides: Any, shape: Any, lib: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{role} is not contiguous (strides {tuple(strides)} for shape {tuple(shape)}): "
        f"pass a contiguous array, e.g. {lib}.ascontiguousarray(x)"
    )


def _from_numpy(arr: np.ndarray, role: str) -> Buffer:
    if type(arr) is not np.ndarray:  # np.matrix & co.: the same memory as a plain array (as mpi4py)
        arr = np.asarray(arr)
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        raise _not_contiguous(role, arr.strides, arr.shape, "numpy")
    dtype = _check_dtype(arr.dtype, role)
    flat = arr.reshape(-1, order="A")
    return Buffer(Memory.HOST, arr.__array_interface__["data"][0], arr.size, dtype,
                  not arr.flags.writeable, flat, arr)


def is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    """Whether ``strides`` (bytes, or None) describe a contiguous row-major or column-major block."""
    if strides is None or int(np.prod(shape, dtype=np.int64)) <= 1:
        return True

    def dense(dims: list[int], steps: list[int]) -> bool:
        expect = itemsize
        for dim, step in zip(reversed(dims), reversed(steps), strict=True):
            if dim != 1 and step != expect:
                return False
            expect *= dim
        return True

    dims, steps = list(shape), list(strides)
    return dense(dims, steps) or dense(dims[::-1], steps[::-1])


def _from_cupy(arr: Any, role: str) -> Buffer:
    flags = arr.flags
    if not (flags.c_contiguous or flags.f_contiguous):
        raise _not_contiguous(role, arr.strides, arr.shape, "cupy")
    dtype = _check_dtype(arr.dtype, role)
    return Buffer(Memory.CUDA, arr.data.ptr, arr.size, dtype, False, arr, arr)


def _from_cai(cai: dict, owner: Any, role: str) -> Buffer:
    try:  # the CUDA Array Interface's required entries, read before anything is trusted
        shape = tuple(int(d) for d in cai["shape"])
        typestr = cai["typestr"]
        address, readonly = cai["data"]
        strides = cai.get("strides")
        if strides is not None:
            strides = tuple(int(s) for s in strides)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise InvalidArgumentError(
            f"{role}'s __cuda_array_interface__ is malformed ({type(err).__name__}: {err}): it needs "
            "'shape' (integers), 'typestr' and 'data' (address, read-only flag), and 'strides' "
            "integers or None, as the CUDA Array Interface specifies"
        ) from None
    try:
        dtype = np.dtype(typestr)
    except TypeError:
        raise InvalidArgumentError(
            f"{role} has element type {typestr!r}, which mpiring cannot reduce"
        ) from None
    dtype = _check_dtype(dtype, role)
    if not is_contiguous(shape, strides or None, dtype.itemsize):
        raise _not_contiguous(role, strides, shape, "cupy")
    count = int(np.prod(shape, dtype=np.int64))
    return Buffer(Memory.CUDA, int(address), count, dtype, bool(readonly), LazyView(owner, dtype), owner)


def _cupy_view(owner: Any, dtype: np.dtype) -> Any:
    try:
        import cupy
    except ImportError:
        return None
    if isinstance(owner, cupy.ndarray):
        return owner.reshape(-1, order="A") if owner.size else owner.ravel()
    if dtype == bfloat16_dtype():
        return None
    return cupy.asarray(owner).reshape(-1, order="A")


def _from_dlpack(obj: Any, role: str) -> Buffer:
    device_type, _ = obj.__dlpack_device__()
    if device_type == _DL_CPU:
        return _from_numpy(np.from_dlpack(obj), role)
    if device_type != _DL_CUDA:
        what = _DL_NAMES.get(int(device_type), f"DLPack device type {int(device_type)}")
        raise InvalidArgumentError(
            f"{role} lives in {what}, which mpiring does not support: use plain device memory"
        )
    try:
        import cupy
    except ImportError:
        raise InvalidArgumentError(f"{role} is a CUDA array, but CuPy is not installed") from None
    arr = cupy.from_dlpack(obj)
    return _from_cai(arr.__cuda_array_interface__, arr, role)


def _is_torch_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _check_torch_view(t: Any, role: str) -> None:
    """Refuse torch tensors whose memory does not hold their values as plain elements: sparse
    (and other non-strided) layouts, and lazy negations or conjugations (the negative or conjugate
    bit: the memory holds the values before it), which mpiring would otherwise reduce wrongly."""
    layout = str(t.layout)
    if layout != "torch.strided":
        raise InvalidArgumentError(
            f"{role} is a torch tensor of layout {layout}: mpiring reduces dense memory; pass "
            "t.to_dense() (and, for a sparse gradient, allreduce its dense form)")
    if t.is_neg():
        raise InvalidArgumentError(
            f"{role} is a torch tensor with its negative bit set (a lazy negation such as "
            "torch._neg_view(t), or the imaginary part of a conjugated view): its memory holds the "
            "values before the negation; pass t.resolve_neg()")
    if t.is_conj():
        raise InvalidArgumentError(
            f"{role} is a torch tensor with its conjugate bit set (t.conj() of a complex tensor): "
            "its memory holds the values before the conjugation; pass t.resolve_conj()")


def _from_torch(t: Any, role: str) -> Buffer:
    """torch tensors, bfloat16 included (which torch's __cuda_array_interface__ refuses)."""
    _check_torch_view(t, role)
    if not t.is_cuda:
        if t.device.type != "cpu":
            raise InvalidArgumentError(
                f"{role} is a torch tensor on {t.device}, which mpiring does not support"
            )
        if str(t.dtype) == "torch.bfloat16":  # numpy has no bfloat16: view the bits as ml_dtypes'
            dtype = bfloat16_dtype()
            if dtype is None:
                raise InvalidArgumentError(f"{role} is a CPU bfloat16 tensor, which needs the ml_dtypes "
                                           "package (pip install ml_dtypes)")
            import torch

            return _from_numpy(t.detach().view(torch.int16).numpy().view(dtype), role)
        return _from_numpy(t.detach().numpy(), role)
    if not t.is_contiguous():
        raise InvalidArgumentError(
            f"{role} is not contiguous (strides {tuple(t.stride())} for shape {tuple(t.shape)}): "
            "pass t.contiguous()"
        )
    name = str(t.dtype).removeprefix("torch.")
    if name == "bfloat16":
        dtype = bfloat16_dtype()
        if dtype is None:
            raise InvalidArgumentError(f"{role} is bfloat16, which needs the ml_dtypes package")
        array = None
    else:
        try:
            dtype = np.dtype(name)
        except TypeError:
            raise InvalidArgumentError(
                f"{role} has element type {name}, which mpiring cannot reduce"
            ) from None
        array = LazyView(t, dtype)
    dtype = _check_dtype(dtype, role)
    return Buffer(Memory.CUDA, int(t.data_ptr()), int(t.numel()), dtype, False, array, t)


def check_pair(send: Buffer, recv: Buffer) -> bool:
    """Check a send/recv pair for one allreduce; return True when it is in place.

    In place means the very same memory (same start, same size). Any other overlap would let
    the reduction read what it already overwrote, so it is refused.
    """
    if recv.readonly:
        raise InvalidArgumentError("recvbuf is read-only: the result cannot be written into it")
    if send.memory != recv.memory:
        raise InvalidArgumentError(
            f"sendbuf is in {send.memory.name.lower()} memory but recvbuf in "
            f"{recv.memory.name.lower()} memory: both must live in the same place"
        )
    if send.count != recv.count:
        raise InvalidArgumentError(
            f"sendbuf has {send.count} elements but recvbuf has {recv.count}: they must match"
        )
    if send.dtype != recv.dtype:
        raise InvalidArgumentError(
            f"sendbuf is {send.dtype.name} but recvbuf is {recv.dtype.name}: they must match"
        )
    if send.address == recv.address:
        return True
    overlap = send.address < recv.address + recv.nbytes and recv.address < send.address + send.nbytes
    if send.nbytes and overlap:
        raise InvalidArgumentError(
            "sendbuf and recvbuf partially overlap: pass the same buffer (in place, or "
            "MPI.IN_PLACE) or two disjoint buffers"
        )
    return False
