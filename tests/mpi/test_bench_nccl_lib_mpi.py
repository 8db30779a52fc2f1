"""The bench's ``nccl-lib`` rival across ranks, on the fake libnccl (``tests/fake_nccl.py``, one
copy per rank): every rank's ``ncclCommInitRank`` gets rank 0's unique id, byte for byte, and
ranks whose files report different NCCL versions are refused alike, naming each."""

from __future__ import annotations

import ctypes
import os

import fake_nccl
import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok

from mpiring.bench.rivals.base import RivalContext
from mpiring.bench.rivals.nccl_lib import NcclLib
from mpiring.core.errors import InvalidArgumentError

world = MPI.COMM_WORLD


@pytest.fixture
def fake_lib(tmp_path, monkeypatch):
    path = fake_nccl.build(tmp_path / f"rank{world.rank}")
    monkeypatch.setenv("MPIRING_NCCL_LIB", str(path))
    return path


def context() -> RivalContext:
    return RivalContext(1 << 10, np.dtype("float32"), "sum", world.rank, world.size, 1, 30.0)


@pytest.mark.mpi
def test_every_rank_inits_with_rank_0s_unique_id(fake_lib) -> None:
    rival = NcclLib(stream=lambda: 0)
    rival.setup(world, context())
    fake = ctypes.CDLL(str(fake_lib))
    got = bytes((ctypes.c_ubyte * 128).in_dll(fake, "got_id"))
    init = (ctypes.c_int.in_dll(fake, "init_nranks").value, ctypes.c_int.in_dll(fake, "init_rank").value)
    rival.close()
    ids = world.allgather(got)
    pid0 = world.bcast(os.getpid() if world.rank == 0 else None)
    problems = []
    if len(set(ids)) != 1 or int.from_bytes(got[8:12], "little", signed=True) != pid0:
        problems.append(f"unique id made by pid {int.from_bytes(got[8:12], 'little')}, rank 0 is {pid0}")
    if init != (world.size, world.rank):
        problems.append(f"ncclCommInitRank got (nranks, rank) = {init}")
    all_ok(problems)


@pytest.mark.mpi(min_size=2)
def test_different_versions_on_different_ranks_are_refused_everywhere(fake_lib) -> None:
    version = ctypes.c_int.in_dll(ctypes.CDLL(str(fake_lib)), "fake_version")
    version.value = 23203 + world.rank  # 2.32.3 on rank 0, 2.32.4 on rank 1, ...
    with pytest.raises(InvalidArgumentError,
                       match="different NCCL versions on different ranks: rank 0: 2.32.3, rank 1: 2.32.4"):
        NcclLib(stream=lambda: 0).setup(world, context())
