"""Turning arrays into buffer descriptions, and the local checks on a send/recv pair."""

from __future__ import annotations

import re
import sys
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring.core.buffers import Buffer, Memory, check_pair, describe, is_contiguous
from mpiring.core.errors import InvalidArgumentError

BF16 = np.dtype(ml_dtypes.bfloat16)
SUPPORTED = [np.dtype(d) for d in ("float16", "float32", "float64", "int32", "int64")] + [BF16]
UNSUPPORTED = ["complex64", "complex128", "uint8", "uint64", "int16", "bool", "object", "longdouble"]


@pytest.fixture
def no_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import cupy`` fail, as on a machine without CuPy."""
    monkeypatch.setitem(sys.modules, "cupy", None)


# -- is_contiguous (pure) ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "strides", "itemsize", "want"),
    [
        ((3, 4), (32, 8), 8, True),  # C order
        ((3, 4), (8, 24), 8, True),  # F order
        ((3, 4), (64, 8), 8, False),  # every other row
        ((3, 4), (32, 16), 8, False),  # every other column
        ((3, 4), (-32, 8), 8, False),  # reversed rows
        ((5,), (4,), 4, True),
        ((5,), (8,), 4, False),
        ((5,), (0,), 4, False),  # broadcast
        ((3, 1, 4), (16, 999, 4), 4, True),  # a size-1 dimension's stride does not matter
        ((2, 3, 4), (4, 8, 24), 4, True),  # 3-d F order
        ((2, 3, 4), (48, 4, 12), 4, False),  # a permutation that is neither C nor F
        ((0,), (8,), 8, True),  # zero-size
        ((4, 0, 3), (0, 0, 0), 8, True),
        ((), (), 8, True),  # 0-d
        ((1,), (12345,), 2, True),  # one element
        ((3, 4), None, 8, True),  # no strides: C order by convention
    ],
)
def test_is_contiguous_cases(shape: tuple, strides: tuple | None, itemsize: int, want: bool) -> None:
    """Hand-picked layouts."""
    assert is_contiguous(shape, strides, itemsize) is want


@st.composite
def numpy_views(draw: st.DrawFn) -> np.ndarray:
    """A view of a small array: sliced with any steps, maybe transposed."""
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(0, 5)) for _ in range(ndim))
    dtype = draw(st.sampled_from([np.int32, np.float64, np.float16]))
    base = np.zeros(shape, dtype=dtype)
    index = tuple(
        slice(draw(st.integers(0, 2)), None, draw(st.sampled_from([1, 1, 2, 3, -1]))) for _ in range(ndim)
    )
    view = base[index]
    if draw(st.booleans()):
        view = view.transpose(draw(st.permutations(range(ndim))))
    return view


@settings(max_examples=400, deadline=None)
@given(view=numpy_views())
def test_is_contiguous_agrees_with_numpy(view: np.ndarray) -> None:
    """For any numpy view, contiguity matches numpy's own C/F flags."""
    want = view.flags.c_contiguous or view.flags.f_contiguous
    assert is_contiguous(view.shape, view.strides, view.itemsize) is want


# -- describe: numpy ---------------------------------------------------------------------


def assert_host_buffer(buf: Buffer, arr: np.ndarray) -> None:
    """``buf`` describes all of ``arr`` with a flat view of the same memory, in memory order."""
    assert buf.memory is Memory.HOST
    assert buf.address == arr.__array_interface__["data"][0]
    assert buf.count == arr.size and buf.dtype == arr.dtype
    assert buf.nbytes == arr.nbytes
    assert buf.readonly is (not arr.flags.writeable)
    assert buf.owner is arr
    assert buf.array.ndim == 1 and buf.array.size == arr.size
    if arr.size:
        assert np.shares_memory(buf.array, arr)
        np.testing.assert_array_equal(buf.array, arr.ravel(order="K"))


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(12.0).reshape(3, 4),
        lambda: np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        lambda: np.arange(24, dtype=np.int32).reshape(2, 3, 4)[1],
        lambda: np.arange(10, dtype=np.int64)[3:7],
        lambda: np.zeros(0, dtype=np.float32),
        lambda: np.zeros((4, 0, 2)),
        lambda: np.array(7.5),
        lambda: np.arange(8.0)[::4][:1],  # one element: strides do not matter
    ],
    ids=["C", "F", "C-subarray", "slice", "empty", "empty-3d", "0-d", "one-element"],
)
def test_describe_contiguous_numpy(make: Any) -> None:
    """Contiguous arrays of any layout are described as a flat run of their memory."""
    arr = make()
    assert_host_buffer(describe(arr, "sendbuf"), arr)


def test_describe_flat_view_writes_through() -> None:
    """Writing the flat view changes the caller's array (the result lands there)."""
    arr = np.asfortranarray(np.zeros((3, 4)))
    buf = describe(arr, "recvbuf")
    buf.array[:] = np.arange(12)
    np.testing.assert_array_equal(arr.ravel(order="F"), np.arange(12))


def test_describe_readonly() -> None:
    """A read-only array is described as such."""
    arr = np.zeros(4)
    arr.flags.writeable = False
    assert describe(arr, "recvbuf").readonly is True


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(10.0)[::2],
        lambda: np.arange(12.0).reshape(3, 4)[:, 1:],
        lambda: np.arange(12.0).reshape(3, 4)[::-1],
        lambda: np.arange(24.0).reshape(2, 3, 4).transpose(1, 0, 2),
        lambda: np.broadcast_to(np.arange(3.0), (4, 3)),
    ],
    ids=["step", "columns", "reversed", "permuted", "broadcast"],
)
@pytest.mark.parametrize("role", ["sendbuf", "recvbuf"])
def test_describe_rejects_non_contiguous(make: Any, role: str) -> None:
    """Non-contiguous arrays are refused, naming the role, strides, shape and a remedy."""
    arr = make()
    want = rf"{role} is not contiguous \(strides {re.escape(str(arr.strides))} for shape " \
           rf"{re.escape(str(arr.shape))}\): pass a contiguous array, e.g. numpy.ascontiguousarray"
    with pytest.raises(InvalidArgumentError, match=want):
        describe(arr, role)


@pytest.mark.parametrize("dtype", SUPPORTED, ids=lambda d: d.name)
def test_describe_supported_dtypes(dtype: np.dtype) -> None:
    """Every supported element type, bfloat16 included, is accepted."""
    arr = np.arange(6).astype(dtype)
    assert_host_buffer(describe(arr, "sendbuf"), arr)


@pytest.mark.parametrize("dtype", UNSUPPORTED)
@pytest.mark.parametrize("role", ["sendbuf", "recvbuf"])
def test_describe_rejects_unsupported_dtypes(dtype: str, role: str) -> None:
    """Unsupported element types are named together with the role."""
    arr = np.zeros(3, dtype=dtype)
    with pytest.raises(InvalidArgumentError, match=rf"^{role}: unsupported dtype {arr.dtype.name}: "):
        describe(arr, role)


@pytest.mark.parametrize("dtype", [">f8", ">i4", ">f2"])
def test_describe_rejects_foreign_byte_order(dtype: str) -> None:
    """Arrays in non-native byte order are refused (peers would misread their bytes)."""
    with pytest.raises(InvalidArgumentError, match=rf"sendbuf has non-native byte order \({dtype}\)"):
        describe(np.zeros(3, dtype=dtype), "sendbuf")


@pytest.mark.parametrize("obj", [[1.0, 2.0], 3.0, None, "abc", memoryview(b"abcd")],
                         ids=["list", "float", "None", "str", "memoryview"])
def test_describe_rejects_non_arrays(obj: object) -> None:
    """Objects that are no array are refused, naming their type."""
    with pytest.raises(InvalidArgumentError,
                       match=rf"recvbuf of type {type(obj).__name__} is not an array mpiring can read"):
        describe(obj, "recvbuf")


# -- describe: __cuda_array_interface__ (parsing only) -----------------------------------


class FakeCudaArray:
    """An object exposing only a ``__cuda_array_interface__`` dict."""

    def __init__(self, shape: tuple, typestr: str = "<f4", strides: tuple | None = None,
                 address: int = 0x7F0000001000, readonly: bool = False) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (address, readonly),
            "strides": strides, "version": 3,
        }


@pytest.mark.usefixtures("no_cupy")
@pytest.mark.parametrize(
    ("shape", "typestr", "strides", "count"),
    [
        ((4, 3), "<f4", None, 12),
        ((4, 3), "<f4", (12, 4), 12),
        ((4, 3), "<f8", (8, 32), 12),  # F order
        ((5,), "<i8", (8,), 5),
        ((0,), "<f2", None, 0),
        ((), "<i4", None, 1),
        ((2, 1, 3), "<f4", (12, 7777, 4), 6),
    ],
)
def test_describe_cai(shape: tuple, typestr: str, strides: tuple | None, count: int) -> None:
    """CAI dicts are parsed into a CUDA buffer; without CuPy there is no array view."""
    obj = FakeCudaArray(shape, typestr, strides, address=0xABC000, readonly=True)
    buf = describe(obj, "sendbuf")
    assert buf.memory is Memory.CUDA
    assert (buf.address, buf.count, buf.dtype, buf.readonly) == (0xABC000, count, np.dtype(typestr), True)
    assert buf.array is None
    assert buf.owner is obj


@pytest.mark.usefixtures("no_cupy")
def test_describe_cai_precedes_dlpack() -> None:
    """An object with both interfaces is read through __cuda_array_interface__."""
    obj = FakeCudaArray((3,))
    obj.__dlpack__ = lambda **_: None
    obj.__dlpack_device__ = lambda: (3, 0)  # would be refused as pinned host memory
    assert describe(obj, "sendbuf").memory is Memory.CUDA


def test_describe_cai_rejects_non_contiguous() -> None:
    """CAI strides that skip memory are refused with a CuPy remedy."""
    obj = FakeCudaArray((4, 3), "<f4", (24, 4))
    with pytest.raises(InvalidArgumentError, match=re.escape(
            "recvbuf is not contiguous (strides (24, 4) for shape (4, 3)): pass a contiguous array, "
            "e.g. cupy.ascontiguousarray(x)")):
        describe(obj, "recvbuf")


@pytest.mark.parametrize(
    ("typestr", "message"),
    [
        ("<c8", "sendbuf: unsupported dtype complex64"),
        ("|u1", "sendbuf: unsupported dtype uint8"),
        ("|b1", "sendbuf: unsupported dtype bool"),
        ("<V2", "sendbuf: unsupported dtype void16"),
        ("<x9", "sendbuf has element type '<x9', which mpiring cannot reduce"),
        (">f4", r"sendbuf has non-native byte order \(>f4\)"),
    ],
)
def test_describe_cai_rejects_dtypes(typestr: str, message: str) -> None:
    """Unsupported or unreadable CAI type strings are named."""
    with pytest.raises(InvalidArgumentError, match=message):
        describe(FakeCudaArray((4,), typestr), "sendbuf")


@pytest.mark.parametrize(("cai", "what"), [
    ({"typestr": "<f8", "data": (0x1000, False)}, "KeyError: 'shape'"),
    ({"shape": (4,), "data": (0x1000, False)}, "KeyError: 'typestr'"),
    ({"shape": (4,), "typestr": "<f4"}, "KeyError: 'data'"),
    ({"shape": (4,), "typestr": "<f4", "data": 0x1000}, "TypeError"),
    ({"shape": ("four",), "typestr": "<f4", "data": (0x1000, False)}, "ValueError"),
    ({"shape": (4,), "typestr": "<f4", "data": (0x1000, False), "strides": 4}, "TypeError"),
    ([("shape", (4,))], "TypeError"),
])
def test_describe_cai_names_a_malformed_interface(cai, what: str) -> None:
    """A __cuda_array_interface__ without its required entries, or with entries of the wrong
    kind, is refused naming the interface and what is wrong, not with a bare KeyError."""
    obj = FakeCudaArray((4,))
    obj.__cuda_array_interface__ = cai
    with pytest.raises(InvalidArgumentError, match=re.escape("sendbuf's __cuda_array_interface__ is "
                                                             "malformed (" + what)):
        describe(obj, "sendbuf")


# -- describe: DLPack --------------------------------------------------------------------


class FakeDLPack:
    """An object exposing only DLPack, on a chosen device type."""

    def __init__(self, device_type: int, arr: np.ndarray | None = None) -> None:
        self.device_type, self.arr = device_type, arr

    def __dlpack__(self, **kwargs: Any) -> Any:
        assert self.arr is not None, "only CPU fakes can be imported"
        return self.arr.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device_type, 0)


@pytest.mark.parametrize(
    ("device_type", "what"),
    [(3, "pinned host memory"), (13, "CUDA managed memory"), (4, "DLPack device type 4"),
     (14, "DLPack device type 14")],
)
def test_describe_dlpack_unsupported_memory(device_type: int, what: str) -> None:
    """Pinned, managed and foreign memory are refused, naming the kind of memory."""
    with pytest.raises(InvalidArgumentError, match=rf"sendbuf lives in {what}, which mpiring does not "
                                                   "support: use plain device memory"):
        describe(FakeDLPack(device_type), "sendbuf")


@pytest.mark.usefixtures("no_cupy")
def test_describe_dlpack_cuda_without_cupy() -> None:
    """A CUDA DLPack object without CuPy says CuPy is missing."""
    with pytest.raises(InvalidArgumentError, match="recvbuf is a CUDA array, but CuPy is not installed"):
        describe(FakeDLPack(2), "recvbuf")


def test_describe_dlpack_cpu() -> None:
    """A CPU DLPack object is read as host memory, without a copy."""
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    buf = describe(FakeDLPack(1, arr), "sendbuf")
    assert buf.memory is Memory.HOST
    assert buf.address == arr.ctypes.data and buf.count == 6 and buf.dtype == np.int32
    assert np.shares_memory(buf.array, arr)


# -- describe: torch-like tensors (no torch needed) --------------------------------------


class _Device:
    def __init__(self, kind: str) -> None:
        self.type = kind

    def __str__(self) -> str:
        return self.type


class _TorchDtype:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"torch.{self.name}"


class FakeTensor:
    """Just enough of a torch tensor for describe()."""

    __module__ = "torch"

    def __init__(self, kind: str, dtype: str = "float32", contiguous: bool = True,
                 arr: np.ndarray | None = None, layout: str = "strided", neg: bool = False,
                 conj: bool = False) -> None:
        self.layout = _TorchDtype(layout)  # prints as torch.<name>, as torch's layouts do
        self._neg, self._conj = neg, conj
        self.is_cuda = kind == "cuda"
        self.device = _Device(kind)
        self.dtype = _TorchDtype(dtype)
        self.shape = (2, 3)
        self._contiguous = contiguous
        self._arr = arr

    def data_ptr(self) -> int:
        return 0xBEEF00

    def is_neg(self) -> bool:
        return self._neg

    def is_conj(self) -> bool:
        return self._conj

    def numel(self) -> int:
        return 6

    def is_contiguous(self) -> bool:
        return self._contiguous

    def stride(self) -> tuple[int, int]:
        return (1, 2) if not self._contiguous else (3, 1)

    def detach(self) -> FakeTensor:
        return self

    def numpy(self) -> np.ndarray:
        assert self._arr is not None
        return self._arr


def test_describe_torch_cpu() -> None:
    """A CPU tensor is read through its numpy view."""
    arr = np.arange(6.0)
    buf = describe(FakeTensor("cpu", arr=arr), "sendbuf")
    assert buf.memory is Memory.HOST and buf.address == arr.ctypes.data and buf.count == 6


@pytest.mark.usefixtures("no_cupy")
@pytest.mark.parametrize(("dtype", "want"), [("float32", np.dtype(np.float32)), ("bfloat16", BF16)])
def test_describe_torch_cuda(dtype: str, want: np.dtype) -> None:
    """A CUDA tensor is described by pointer, bfloat16 included."""
    buf = describe(FakeTensor("cuda", dtype), "recvbuf")
    assert (buf.memory, buf.address, buf.count, buf.dtype, buf.readonly) == (
        Memory.CUDA, 0xBEEF00, 6, want, False)
    assert buf.array is None


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (FakeTensor("mps"), "sendbuf is a torch tensor on mps, which mpiring does not support"),
        (FakeTensor("cuda", contiguous=False), re.escape(
            "sendbuf is not contiguous (strides (1, 2) for shape (2, 3)): pass t.contiguous()")),
        (FakeTensor("cuda", "complex64"), "sendbuf: unsupported dtype complex64"),
        (FakeTensor("cuda", "qint8"), "sendbuf has element type qint8, which mpiring cannot reduce"),
        (FakeTensor("cuda", layout="sparse_coo"), re.escape(
            "sendbuf is a torch tensor of layout torch.sparse_coo: mpiring reduces dense memory; "
            "pass t.to_dense()")),
        (FakeTensor("cpu", layout="sparse_csr"), "sendbuf is a torch tensor of layout torch.sparse_csr"),
        (FakeTensor("cuda", neg=True), re.escape(
            "sendbuf is a torch tensor with its negative bit set (a lazy negation such as "
            "torch._neg_view(t)")),
        (FakeTensor("cpu", neg=True), "pass t.resolve_neg()"),
        (FakeTensor("cuda", "complex64", conj=True), "conjugate bit set .* pass t.resolve_conj()"),
    ],
    ids=["mps", "non-contiguous", "complex", "quantized", "sparse-cuda", "sparse-csr-cpu", "neg-cuda",
         "neg-cpu", "conj"],
)
def test_describe_torch_rejects(tensor: FakeTensor, message: str) -> None:
    """Unsupported tensors are refused, naming why."""
    with pytest.raises(InvalidArgumentError, match=message):
        describe(tensor, "sendbuf")


# -- describe: real torch tensors (skipped where torch is not installed, as in CI) --------


def test_real_torch_views_that_hide_their_values_are_refused() -> None:
    """A negative-bit view's memory holds the un-negated values, a sparse tensor's no dense
    vector: describing them must raise naming why, not read the memory (torch's own CPU path,
    ``.numpy()``, would raise a RuntimeError that names no buffer)."""
    torch = pytest.importorskip("torch")
    x = torch.arange(6, dtype=torch.float32)
    assert describe(x, "sendbuf").count == 6
    for bad, message in ((torch._neg_view(x), "negative bit set"),
                         (x.to_sparse(), "layout torch.sparse_coo"),
                         (torch.eye(3).to_sparse_csr(), "layout torch.sparse_csr"),
                         (torch.ones(3, dtype=torch.complex64).conj(), "conjugate bit set")):
        with pytest.raises(InvalidArgumentError, match=f"recvbuf is a torch tensor .*{message}"):
            describe(bad, "recvbuf")
    buf = describe(torch._neg_view(x).resolve_neg(), "sendbuf")  # the remedy the error names
    assert np.array_equal(buf.array, -np.arange(6, dtype=np.float32))


def test_real_torch_cpu_tensors_allreduce_on_one_rank() -> None:
    """Through the API on a one-rank communicator: a CPU tensor is reduced (bfloat16 too), a
    negative-bit view is refused by name."""
    torch = pytest.importorskip("torch")
    from mpi4py import MPI

    import mpiring

    with mpiring.Communicator(MPI.COMM_SELF, gpu=False) as comm:
        x = torch.arange(8, dtype=torch.bfloat16)
        assert torch.equal(comm.allreduce(x), x)
        out = torch.empty(8)
        comm.Allreduce(torch.arange(8, dtype=torch.float32), out, op=MPI.MAX)
        assert torch.equal(out, torch.arange(8, dtype=torch.float32))
        with pytest.raises(InvalidArgumentError, match="sendbuf is a torch tensor with its negative bit"):
            comm.Allreduce(torch._neg_view(torch.ones(8)), out)


# -- check_pair --------------------------------------------------------------------------


def pair(send: np.ndarray, recv: np.ndarray) -> bool:
    """check_pair on two numpy arrays."""
    return check_pair(describe(send, "sendbuf"), describe(recv, "recvbuf"))


def test_check_pair_disjoint() -> None:
    """Two separate arrays, or disjoint views of one, are a valid out-of-place pair."""
    assert pair(np.zeros(5), np.zeros(5)) is False
    whole = np.zeros(10)
    assert pair(whole[:5], whole[5:]) is False
    assert pair(whole[5:], whole[:5]) is False
    assert pair(np.zeros((2, 3)), np.zeros(6)) is False, "only the element count must match"


def test_check_pair_same_memory_is_in_place() -> None:
    """The very same memory, through any view, is in place."""
    arr = np.zeros(12)
    assert pair(arr, arr) is True
    assert pair(arr, arr.reshape(3, 4)) is True
    assert pair(arr[2:6], arr[2:6]) is True
    empty = np.zeros(0)
    assert pair(empty, empty) is True


def test_check_pair_zero_size() -> None:
    """Empty buffers never partially overlap: in place only when they start at the same address."""
    whole = np.zeros(4)
    for a, b in [(np.zeros(0), np.zeros(0)), (whole[1:1], whole[3:3]), (whole[:0], np.zeros(0))]:
        assert pair(a, b) is (a.ctypes.data == b.ctypes.data)


@pytest.mark.parametrize(("s", "r"), [((0, 6), (3, 9)), ((3, 9), (0, 6)), ((0, 6), (5, 11)),
                                      ((5, 11), (0, 6))])
def test_check_pair_partial_overlap(s: tuple[int, int], r: tuple[int, int]) -> None:
    """Overlapping but different ranges are refused, in either order."""
    whole = np.zeros(20)
    with pytest.raises(InvalidArgumentError, match=re.escape(
            "sendbuf and recvbuf partially overlap: pass the same buffer (in place, or MPI.IN_PLACE) "
            "or two disjoint buffers")):
        pair(whole[s[0]:s[1]], whole[r[0]:r[1]])


def test_check_pair_overlap_via_reinterpreted_view() -> None:
    """Overlap is judged on bytes, not on elements of one view."""
    whole = np.zeros(16, dtype=np.int32)
    with pytest.raises(InvalidArgumentError, match="partially overlap"):
        pair(whole[0:8], whole[1:9])


@pytest.mark.parametrize(
    ("send", "recv", "message"),
    [
        (np.zeros(10), np.zeros(11), "sendbuf has 10 elements but recvbuf has 11: they must match"),
        (np.zeros(0), np.zeros(1), "sendbuf has 0 elements but recvbuf has 1: they must match"),
        (np.zeros(4, np.float32), np.zeros(4), "sendbuf is float32 but recvbuf is float64: they must match"),
        (np.zeros(4, BF16), np.zeros(4, np.float16),
         "sendbuf is bfloat16 but recvbuf is float16: they must match"),
        (np.zeros(4, np.int32), np.zeros(4, np.int64), "sendbuf is int32 but recvbuf is int64"),
    ],
    ids=["count", "empty-count", "dtype", "bf16-vs-f16", "int-widths"],
)
def test_check_pair_mismatches(send: np.ndarray, recv: np.ndarray, message: str) -> None:
    """Count and dtype mismatches are named with both sides."""
    with pytest.raises(InvalidArgumentError, match=message):
        pair(send, recv)


def test_check_pair_readonly_recv() -> None:
    """A read-only recvbuf is refused first, even when in place."""
    recv = np.zeros(4)
    recv.flags.writeable = False
    with pytest.raises(InvalidArgumentError, match="recvbuf is read-only: the result cannot be written"):
        pair(np.zeros(4), recv)
    with pytest.raises(InvalidArgumentError, match="recvbuf is read-only"):
        pair(recv, recv)
    send = np.zeros(4)
    send.flags.writeable = False
    assert pair(send, np.zeros(4)) is False, "a read-only sendbuf is fine"


def test_check_pair_memory_kinds() -> None:
    """Host and device buffers cannot be paired."""
    host = describe(np.zeros(4, np.float32), "sendbuf")
    device = Buffer(Memory.CUDA, 0x1000, 4, np.dtype(np.float32), False, None, None)
    with pytest.raises(InvalidArgumentError, match="sendbuf is in host memory but recvbuf in cuda memory"):
        check_pair(host, device)


def test_part_is_a_view_of_the_same_memory() -> None:
    x = np.arange(10, dtype=np.float32)
    buf = describe(x, "recvbuf")
    part = buf.part(3, 4)
    assert (part.address - buf.address, part.count, part.dtype) == (12, 4, buf.dtype)
    part.array[:] = -1
    assert x.tolist() == [0, 1, 2, -1, -1, -1, -1, 7, 8, 9]
    assert buf.part(10, 0).count == 0
    for start, count in ((8, 3), (-1, 2), (0, -1), (11, 0)):
        with pytest.raises(ValueError, match="outside"):
            buf.part(start, count)


def test_torch_cpu_bfloat16_is_described_through_ml_dtypes() -> None:
    """Issue 17, item 5: a CPU bfloat16 tensor (torch's .numpy() refuses it) is read as
    ml_dtypes' bfloat16 over the same memory."""
    torch = pytest.importorskip("torch")
    from mpiring.core.buffers import describe
    from mpiring.core.ops import bfloat16_dtype

    t = torch.arange(6, dtype=torch.bfloat16)
    buf = describe(t, "sendbuf")
    assert buf.dtype == bfloat16_dtype() and buf.count == 6 and buf.address == t.data_ptr()
    assert [float(v) for v in buf.array] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_np_matrix_is_described_as_a_flat_array() -> None:
    """Issue 17, item 5: np.matrix goes through np.asarray (its flat view stays 2-D otherwise)."""
    from mpiring.core.buffers import describe

    m = np.matrix(np.arange(6.0).reshape(2, 3))
    buf = describe(m, "recvbuf")
    assert type(buf.array) is np.ndarray and buf.array.shape == (6,) and buf.count == 6
    buf.array[0] = 9.0
    assert m[0, 0] == 9.0  # the same memory


class RecordingCupy:
    """A stand-in for the cupy module: ``asarray`` records what it was asked to view and returns
    a numpy array of ``size`` elements (numpy reshapes and slices as CuPy does)."""

    class ndarray:  # noqa: N801 - the name _cupy_view checks against
        pass

    def __init__(self) -> None:
        self.viewed: list[Any] = []

    def asarray(self, obj: Any) -> np.ndarray:
        self.viewed.append(obj)
        return np.arange(6.0, dtype=np.float32).reshape(2, 3)


@pytest.fixture
def recording_cupy(monkeypatch: pytest.MonkeyPatch) -> RecordingCupy:
    fake = RecordingCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


@pytest.mark.parametrize("make", [lambda: FakeTensor("cuda"), lambda: FakeCudaArray((2, 3))],
                         ids=["torch", "cai"])
def test_a_device_buffers_cupy_view_is_made_only_when_read(recording_cupy: RecordingCupy, make) -> None:
    """describe() does not build CuPy's view of a torch tensor or CAI object (tens of us each, per
    call, and no shipped row reads it); reading ``array`` builds it, over the same elements, and a
    part's view is the same slice of it."""
    obj = make()
    buf = describe(obj, "recvbuf")
    part = buf.part(2, 3)
    assert recording_cupy.viewed == []
    assert buf.array.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert recording_cupy.viewed == [obj]
    assert part.array.tolist() == [2.0, 3.0, 4.0] and part.part(1, 2).array.tolist() == [3.0, 4.0]
    assert buf.part(6, 0).array.tolist() == []


def test_a_bfloat16_tensor_has_no_cupy_view(recording_cupy: RecordingCupy) -> None:
    """CuPy has no bfloat16: such a tensor's ``array`` is None, and nothing is asked of CuPy."""
    buf = describe(FakeTensor("cuda", "bfloat16"), "recvbuf")
    assert buf.array is None and buf.part(1, 2).array is None and recording_cupy.viewed == []
