"""A fake libnccl.so.2, built with the C compiler, for the bench's ``nccl-lib`` rival: the NCCL
entry points it calls, each recording its arguments in globals that tests read back with
ctypes (``ctypes.CDLL(path)`` of the same file returns the same loaded copy), and knobs that
tests set the same way (``fail_init``, ``fake_version``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE = r"""
#include <stddef.h>
#include <string.h>
#include <unistd.h>
typedef struct { char internal[128]; } ncclUniqueId;
struct Comm { int nranks, rank; };
static struct Comm the_comm;
long long seen[8];              /* the last ncclAllReduce's arguments */
unsigned char got_id[128];      /* the unique id ncclCommInitRank received */
int init_nranks = -1, init_rank = -1, destroyed = 0;
int fail_init = 0;              /* knob: ncclCommInitRank fails with ncclSystemError (2) */
int fake_version = VERSION;     /* knob: what ncclGetVersion says */
int ncclGetVersion(int* v) { *v = fake_version; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) {
  memset(id->internal, 0, 128); id->internal[0] = 42; id->internal[127] = 7;
  int pid = (int)getpid(); memcpy(id->internal + 8, &pid, sizeof pid); return 0;
}
int ncclCommInitRank(void** comm, int nranks, ncclUniqueId id, int rank) {
  if (fail_init) return 2;
  if (id.internal[0] != 42 || id.internal[127] != 7) return 4;  /* ncclInvalidArgument */
  memcpy(got_id, id.internal, 128);
  the_comm.nranks = nranks; the_comm.rank = rank; init_nranks = nranks; init_rank = rank;
  *comm = &the_comm; return 0;
}
int ncclAllReduce(const void* s, void* r, size_t n, int t, int op, void* comm, void* stream) {
  seen[0] = (long long)s; seen[1] = (long long)r; seen[2] = (long long)n; seen[3] = t; seen[4] = op;
  seen[5] = (long long)comm; seen[6] = (long long)stream;
  return n == 13 ? 5 : 0;  /* ncclInvalidUsage for the tests' unlucky count */
}
int ncclCommDestroy(void* comm) { destroyed += (comm == &the_comm); return 0; }
const char* ncclGetErrorString(int r) { return r == 5 ? "invalid usage (fake)" : "other (fake)"; }
"""


def build(where: Path, name: str = "libnccl.so.2", version: int = 23203, soname: bool = False) -> Path:
    """Compile the fake into ``where/name`` (``soname``: with the SONAME libnccl.so.2, as NCCL's
    own file has); skips the test where no C compiler is installed."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the fake libnccl")
    where.mkdir(parents=True, exist_ok=True)
    src = where / f"{name}.c"
    src.write_text(SOURCE)
    out = where / name
    flags = ["-Wl,-soname,libnccl.so.2"] if soname else []
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-DVERSION={version}", *flags, "-o", str(out), str(src)],
                   check=True)
    return out
