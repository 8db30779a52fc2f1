"""The bench's ``nccl-lib`` rival (``mpiring/bench/rivals/nccl_lib.py``) on a fake libnccl built
here with the C compiler: what it loads, what it passes to ``ncclCommInitRank`` and
``ncclAllReduce`` (every argument, read back by the fake), the errors it raises with NCCL's
words, and its refusals, on a communicator of one rank (``MPI.COMM_SELF``)."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import fake_nccl
import ml_dtypes
import numpy as np
import pytest
from mpi4py import MPI

from mpiring.bench.measure import StageFailed
from mpiring.bench.rivals import refusal
from mpiring.bench.rivals.base import RivalContext
from mpiring.bench.rivals.nccl_lib import DTYPES, OPS, NcclLib


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory) -> Path:
    return fake_nccl.build(tmp_path_factory.mktemp("fake_nccl"))


def context(dtype: str = "float32", op: str = "sum") -> RivalContext:
    kind = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    return RivalContext(max_count=1 << 20, dtype=kind, op=op, rank=0, size=1, nodes=1, timeout=10.0)


def buffers(count: int) -> SimpleNamespace:
    """What prepare() reads of a point's buffers: their device pointers (``data.ptr``) and count."""
    return SimpleNamespace(count=count, send=SimpleNamespace(data=SimpleNamespace(ptr=0x7000)),
                           recv=SimpleNamespace(data=SimpleNamespace(ptr=0x9000)))


def test_every_argument_reaches_the_library(fake_lib, monkeypatch) -> None:
    monkeypatch.setenv("MPIRING_NCCL_LIB", str(fake_lib))
    rival = NcclLib(stream=lambda: 0x5150)
    assert rival.available() is None
    rival.setup(MPI.COMM_SELF, context("float64", "max"))
    fake = ctypes.CDLL(str(fake_lib))  # the same file: the same loaded copy, whose globals we read
    init = [ctypes.c_int.in_dll(fake, name).value for name in ("init_nranks", "init_rank")]
    assert init == [1, 0]  # and the unique id arrived whole, by value (the fake checks two bytes)
    assert rival.describe().startswith(f"libnccl 2.32.3 from {fake_lib}")
    seen = (ctypes.c_longlong * 8).in_dll(fake, "seen")
    rival.prepare(buffers(1000), in_place=False)()
    assert list(seen[:7]) == [0x7000, 0x9000, 1000, 8, 2, rival.comm, 0x5150]  # float64, max
    rival.prepare(buffers((1 << 33) + 5), in_place=True)()  # a count past 32 bits: a size_t
    assert list(seen[:3]) == [0x9000, 0x9000, (1 << 33) + 5]  # in place: send is recv
    with pytest.raises(RuntimeError, match="ncclAllReduce failed: invalid usage \\(fake\\) 5"):
        rival.prepare(buffers(13), in_place=False)()
    rival.close()
    assert ctypes.c_int.in_dll(fake, "destroyed").value == 1 and rival.comm is None


def test_the_codes_are_nccl_hs() -> None:
    """ncclDataType_t and ncclRedOp_t as nccl.h numbers them (part of NCCL's ABI)."""
    assert DTYPES == {"int32": 2, "int64": 4, "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9}
    assert OPS == {"sum": 0, "prod": 1, "max": 2, "min": 3}


@pytest.mark.parametrize(("dtype", "op"), [("float16", "sum"), ("bfloat16", "prod"), ("int32", "min"),
                                           ("int64", "max"), ("float32", "sum")])
def test_each_type_and_reduction_reaches_the_call(fake_lib, monkeypatch, dtype, op) -> None:
    monkeypatch.setenv("MPIRING_NCCL_LIB", str(fake_lib))
    rival = NcclLib(stream=lambda: 0)
    rival.setup(MPI.COMM_SELF, context(dtype, op))
    rival.prepare(buffers(3), in_place=True)()
    seen = (ctypes.c_longlong * 8).in_dll(ctypes.CDLL(str(fake_lib)), "seen")
    assert (seen[3], seen[4]) == (DTYPES[dtype], OPS[op])
    rival.close()


def test_failures_are_said_in_nccls_words(fake_lib, monkeypatch) -> None:
    monkeypatch.setenv("MPIRING_NCCL_LIB", str(fake_lib))
    fake = ctypes.CDLL(str(fake_lib))
    knob = ctypes.c_int.in_dll(fake, "fail_init")
    knob.value = 1
    try:
        rival = NcclLib(stream=lambda: 0)
        with pytest.raises(StageFailed, match="ncclCommInitRank failed: other \\(fake\\) 2"):
            rival.setup(MPI.COMM_SELF, context())
        rival.close()  # after a set-up that failed half way: nothing to destroy
        assert rival.comm is None
    finally:
        knob.value = 0
    version = ctypes.c_int.in_dll(fake, "fake_version")
    version.value = 20905  # 2.9.5: no ncclBfloat16
    try:
        with pytest.raises(StageFailed, match="libnccl 2.9.5 predates ncclBfloat16"):
            NcclLib(stream=lambda: 0).setup(MPI.COMM_SELF, context("bfloat16"))
    finally:
        version.value = 23203


def test_what_is_missing_is_said(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("MPIRING_NCCL_LIB", raising=False)
    assert "MPIRING_NCCL_LIB is not set" in NcclLib().available()
    monkeypatch.setenv("MPIRING_NCCL_LIB", str(tmp_path / "nope.so"))
    assert "no such file" in NcclLib().available()
    monkeypatch.setenv("MPIRING_NCCL_LIB", str(tmp_path / "junk.so"))
    (tmp_path / "junk.so").write_text("not a library")
    with pytest.raises(StageFailed, match="does not load"):
        NcclLib().setup(MPI.COMM_SELF, context())
    assert refusal("nccl-lib", "sum", "float32") is None


def test_a_library_that_is_not_nccl_is_refused(fake_lib, monkeypatch) -> None:
    other = fake_lib.parent / "libother.so"
    (fake_lib.parent / "other.c").write_text("int not_nccl(void) { return 0; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(other), str(fake_lib.parent / "other.c")], check=True)
    monkeypatch.setenv("MPIRING_NCCL_LIB", str(other))
    with pytest.raises(StageFailed, match="is not a libnccl"):
        NcclLib().setup(MPI.COMM_SELF, context())


# Two files of SONAME libnccl.so.2 in one process, each case in a fresh interpreter (a library
# once loaded stays): "cupy" stands for CuPy's libnccl, loaded by its bare name first.
TWO_NCCLS = r"""
import ctypes, os, sys
from mpi4py import MPI
import numpy as np
from mpiring.bench.rivals.base import RivalContext
from mpiring.bench.rivals.nccl_lib import NcclLib
first, scope = sys.argv[1], sys.argv[3]
if first != "-":
    os.environ["LD_LIBRARY_PATH"] = os.path.dirname(first)
    # CuPy's, as its extension's DT_NEEDED would load it (local), or as torch preloads the CUDA
    # wheels' libraries (global: its symbols then win every later library's lookups)
    ctypes.CDLL(first, mode=os.RTLD_GLOBAL if scope == "global" else os.RTLD_LOCAL)
os.environ["MPIRING_NCCL_LIB"] = sys.argv[2]
rival = NcclLib(stream=lambda: 0)
try:
    rival.setup(MPI.COMM_SELF, RivalContext(1, np.dtype("float32"), "sum", 0, 1, 1, 10.0))
except Exception as err:
    print("REFUSED", err)
    raise SystemExit(0)
by_name = ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD)
code = ctypes.c_int()
by_name.ncclGetVersion(ctypes.byref(code))
print("LOADED", rival.describe(), "| by name:", code.value)
rival.close()
"""


def test_a_second_nccl_beside_the_first_is_its_own_copy(tmp_path) -> None:
    """The row's NCCL beside CuPy's (loaded first, by name): two copies, each its own version,
    and a libnccl.so.2 looked up by name is still CuPy's. Alone, with nothing loaded before it,
    the file would stand in for every later libnccl.so.2 by name: refused."""
    cupys = fake_nccl.build(tmp_path / "cupy", version=22809, soname=True)
    newer = fake_nccl.build(tmp_path / "newer", version=23203, soname=True)

    def run(first: str, scope: str = "local") -> str:
        done = subprocess.run([sys.executable, "-c", TWO_NCCLS, first, str(newer), scope],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    for scope in ("local", "global"):
        # global: the newer file's own references (here its ncclGetVersion's read of a global)
        # bind to itself, not to the copy loaded before it; without that, NCCL 2.32.3's
        # ncclAllReduce refused 2.32.3's own communicator on the GPU ("corrupted comm object")
        out = run(str(cupys), scope)
        assert "LOADED libnccl 2.32.3 from" in out and "| by name: 22809" in out, (scope, out)
    out = run("-")
    assert "REFUSED" in out and "resolves to in this process" in out, out
