"""The bench's ``nccl-lib`` rival (``mpiring/bench/rivals/nccl_lib.py``) on a fake libnccl built
here with the C compiler: what it loads, what it passes to ``ncclCommInitRank`` and
``ncclAllReduce`` (every argument, read back by the fake), the errors it raises with NCCL's
words, and its refusals, on a communicator of one rank (``MPI.COMM_SELF``)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from mpi4py import MPI

from mpiring.bench.measure import StageFailed
from mpiring.bench.rivals import refusal
from mpiring.bench.rivals.base import RivalContext
from mpiring.bench.rivals.nccl_lib import DTYPES, OPS, NcclLib

FAKE = r"""
#include <stddef.h>
#include <string.h>
typedef struct { char internal[128]; } ncclUniqueId;
struct Comm { int nranks, rank; char first; };
static struct Comm the_comm;
long long seen[8];  /* the last ncclAllReduce's arguments, read back by the test */
int init_nranks = -1, init_rank = -1, destroyed = 0;
char init_first = 0;
int ncclGetVersion(int* v) { *v = 23203; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) {
  memset(id->internal, 0, 128); id->internal[0] = 42; id->internal[127] = 7; return 0;
}
int ncclCommInitRank(void** comm, int nranks, ncclUniqueId id, int rank) {
  if (id.internal[0] != 42 || id.internal[127] != 7) return 4;  /* ncclInvalidArgument */
  the_comm.nranks = nranks; the_comm.rank = rank; init_nranks = nranks; init_rank = rank;
  init_first = id.internal[0]; *comm = &the_comm; return 0;
}
int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, void* comm, void* stream) {
  seen[0] = (long long)s; seen[1] = (long long)r; seen[2] = (long long)n; seen[3] = t; seen[4] = op;
  seen[5] = (long long)comm; seen[6] = (long long)stream;
  return n == 13 ? 5 : 0;  /* ncclInvalidUsage for the test's unlucky count */
}
int ncclCommDestroy(void* comm) { destroyed += (comm == &the_comm); return 0; }
const char* ncclGetErrorString(int r) { return r == 5 ? "invalid usage (fake)" : "other (fake)"; }
"""


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the fake libnccl")
    where = tmp_path_factory.mktemp("fake_nccl")
    (where / "fake.c").write_text(FAKE)
    lib = where / "libnccl.so.2"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(where / "fake.c")], check=True)
    return lib


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
    assert init == [1, 0]  # and the unique id arrived whole (the fake checks its first and last byte)
    assert rival.describe().startswith(f"libnccl 2.32.3 from {fake_lib}")
    seen = (ctypes.c_longlong * 8).in_dll(fake, "seen")
    rival.prepare(buffers(1000), in_place=False)()
    assert list(seen[:7]) == [0x7000, 0x9000, 1000, DTYPES["float64"], OPS["max"], seen[5], 0x5150]
    rival.prepare(buffers(77), in_place=True)()
    assert list(seen[:3]) == [0x9000, 0x9000, 77]  # in place: send is recv
    with pytest.raises(RuntimeError, match="ncclAllReduce failed: invalid usage \\(fake\\) 5"):
        rival.prepare(buffers(13), in_place=False)()
    rival.close()
    assert ctypes.c_int.in_dll(fake, "destroyed").value == 1 and rival.comm is None


@pytest.mark.parametrize(("dtype", "op"), [("float16", "sum"), ("bfloat16", "prod"), ("int32", "min"),
                                           ("int64", "max"), ("float32", "sum")])
def test_each_type_and_reduction_has_nccls_code(fake_lib, monkeypatch, dtype, op) -> None:
    monkeypatch.setenv("MPIRING_NCCL_LIB", str(fake_lib))
    rival = NcclLib(stream=lambda: 0)
    rival.setup(MPI.COMM_SELF, context(dtype, op))
    assert rival.codes == (DTYPES[dtype], OPS[op])
    rival.close()
    assert (DTYPES["bfloat16"], DTYPES["float32"], OPS["sum"], OPS["min"]) == (9, 7, 0, 3)  # nccl.h's


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
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(other),
                    str(fake_lib.parent / "other.c")], check=True)
    monkeypatch.setenv("MPIRING_NCCL_LIB", str(other))
    with pytest.raises(StageFailed, match="is not a libnccl"):
        NcclLib().setup(MPI.COMM_SELF, context())
