"""Rivals that run on host arrays, for testing the bench's rival machinery without a GPU, torch or
nccl4py: ``MPI.Allreduce`` wrapped as a rival (a true allreduce, so the bench's check passes),
with faults to inject. Shared by tests/test_bench_rivals.py and tests/mpi/test_bench_rivals_mpi.py.

And a fake CuPy (:func:`fake_cupy`: ``cupy``, ``cupy.cuda``, ``cupy.cuda.nccl`` in
``sys.modules``) under which the real ``nccl-direct`` runtime
(:class:`mpiring.bench.rivals.direct_calls.NcclDirect`) runs on host arrays: its "device pointers" are
the arrays' addresses, and the fake ``NcclCommunicator.allReduce`` reads ``count`` elements of
the type its datatype code names at those addresses and reduces them with ``MPI.Allreduce``
(in place where the two pointers are one), so a wrong pointer, count, type or op code makes
the bench's check fail. Shared by tests/test_bench_direct.py and
tests/mpi/test_bench_direct_mpi.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.machinery
import sys
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
from mpi4py import MPI

from mpiring.bench import rivals
from mpiring.bench.measure import agree
from mpiring.bench.rivals.base import Rival, RivalContext

MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
EVENTS: list[tuple[str, str]] = []  # (rival, what happened), in order, on this rank


class MpiRival(Rival):
    """``MPI.Allreduce`` as a rival row. ``missing_on``: ranks whose ``available()`` gives a
    reason; ``setup_fails_on``: ranks whose set-up raises; ``fail_from``: from this element
    count on, the call raises on ``bad_rank`` (the others skip communicating, so nobody
    waits); ``refuse_below``: smaller counts are refused (n/a)."""

    def __init__(self, name: str = "fake-mpi", missing_on: tuple[int, ...] = (),
                 setup_fails_on: tuple[int, ...] = (), fail_from: int | None = None,
                 bad_rank: int = 0, refuse_below: int = 0) -> None:
        self.name = name
        self.missing_on, self.setup_fails_on = missing_on, setup_fails_on
        self.fail_from, self.bad_rank, self.refuse_below = fail_from, bad_rank, refuse_below
        self.world: Any = None
        self.ctx: RivalContext | None = None

    def available(self) -> str | None:
        if MPI.COMM_WORLD.rank in self.missing_on:
            return "fakelib is not installed (pip install fakelib)"
        return None

    def setup(self, world: Any, ctx: RivalContext) -> None:
        def stage() -> None:
            if world.rank in self.setup_fails_on:
                raise RuntimeError("no fake fabric here")
        agree(world, stage)
        self.world, self.ctx = world, ctx
        EVENTS.append((self.name, f"setup max_count={ctx.max_count} op={ctx.op}"))

    def describe(self) -> str:
        return "fakelib 1.0"

    def prepare(self, bufs: Any, in_place: bool) -> Any:
        from mpiring.core.errors import InvalidArgumentError

        count = int(bufs.count)
        if count < self.refuse_below:
            raise InvalidArgumentError(f"takes at least {self.refuse_below} elements")
        assert self.ctx is not None
        world, op = self.world, MPI_OPS[self.ctx.op]
        send = MPI.IN_PLACE if in_place else bufs.send
        recv = bufs.recv
        fail = self.fail_from is not None and count >= self.fail_from

        def call() -> None:
            if fail:
                if world.rank == self.bad_rank:
                    raise RuntimeError("injected rival failure")
                return
            world.Allreduce(send, recv, op=op)
        return call

    def close(self) -> None:
        EVENTS.append((self.name, "close"))


def spec(name: str = "fake-mpi", **kw: Any) -> rivals.RivalSpec:
    """A host rival spec of :class:`MpiRival` (``ops``/``node_only`` go to the spec)."""
    spec_kw = {k: kw.pop(k) for k in ("ops", "dtypes", "node_only") if k in kw}
    return rivals.RivalSpec(name, f"MPI.Allreduce as a rival ({name})",
                            lambda: MpiRival(name, **kw), memory=rivals.HOST, **spec_kw)


@contextlib.contextmanager
def registered(*specs: rivals.RivalSpec) -> Iterator[None]:
    """The host rivals ``specs`` in the registry for the duration (then removed)."""
    for s in specs:
        rivals.register(s)
    EVENTS.clear()
    try:
        yield
    finally:
        for s in specs:
            rivals.unregister(s.name)


# -- a fake CuPy for nccl-direct on host arrays ------------------------------------------------

NCCL_TYPES = {2: "int32", 4: "int64", 6: "float16", 7: "float32", 8: "float64"}  # nccl.h
NCCL_OPS = {0: MPI.SUM, 1: MPI.PROD, 2: MPI.MAX, 3: MPI.MIN}
STREAM = 0x5EED  # the fake current stream's pointer


def _at(ptr: int, count: int, dtype: np.dtype) -> np.ndarray:
    """``count`` elements of ``dtype`` at host address ``ptr``, writable."""
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype)


class FakeNcclCommunicator:
    """CuPy's ``NcclCommunicator(ndev, commId, rank)`` over MPI.COMM_WORLD: every rank must pass
    the world's size, its rank and the same id; ``allReduce`` reduces host memory with MPI."""

    made: list[FakeNcclCommunicator] = []

    def __init__(self, ndev: int, comm_id: tuple[int, ...], rank: int) -> None:
        world = MPI.COMM_WORLD
        if (ndev, rank) != (world.size, world.rank):
            raise RuntimeError(f"ncclCommInitRank({ndev}, id, {rank}) on rank {world.rank} of {world.size}")
        ids = world.allgather(comm_id)
        if any(i != ids[0] for i in ids):
            raise RuntimeError("the ranks passed different unique ids")
        self.comm: Any = world.Dup()
        self.calls: list[tuple[int, int, int, int, int, int]] = []
        FakeNcclCommunicator.made.append(self)

    def allReduce(self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int,  # noqa: N802
                  stream: int) -> None:
        self.calls.append((sendbuf, recvbuf, count, datatype, op, stream))
        dtype = np.dtype(NCCL_TYPES[datatype])
        out = _at(recvbuf, count, dtype)
        send = MPI.IN_PLACE if sendbuf == recvbuf else _at(sendbuf, count, dtype)
        with np.errstate(all="ignore"):
            self.comm.Allreduce(send, out, op=NCCL_OPS[op])

    def destroy(self) -> None:
        EVENTS.append(("nccl-direct", "destroy"))
        self.comm.Free()
        self.comm = None


def _module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None)
    return mod


@contextlib.contextmanager
def fake_cupy(available: bool = True, version: int | None = 22703,
              bfloat16: bool = True) -> Iterator[types.ModuleType]:
    """``cupy``, ``cupy.cuda`` and ``cupy.cuda.nccl`` faked for the duration (the real ones, if
    any, put back after), with ``nccl-direct``'s pointers taken as host addresses; yields the
    fake ``cupy.cuda.nccl``. ``version`` None: ``nccl.get_version()`` raises (no libnccl)."""
    from mpiring.bench.rivals import direct_calls as direct

    cupy, cuda, nccl = _module("cupy"), _module("cupy.cuda"), _module("cupy.cuda.nccl")
    cupy.__version__ = "0.0.0+fake"
    cupy.ndarray = type("ndarray", (), {})  # what mpiring.core.buffers compares types with
    cupy.cuda = cuda
    cuda.nccl = nccl
    cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=STREAM)
    cuda.Device = lambda *a: types.SimpleNamespace(
        synchronize=lambda: EVENTS.append(("nccl-direct", "synchronize")))
    nccl.available = available

    def get_version() -> int:
        if version is None:
            raise RuntimeError("libnccl.so.2: cannot open shared object file")
        return version

    nccl.get_version = get_version
    nccl.get_unique_id = lambda: tuple(int(b) for b in np.random.default_rng().integers(
        -128, 128, 128))
    nccl.NcclCommunicator = FakeNcclCommunicator
    for name, code in {"NCCL_INT32": 2, "NCCL_INT64": 4, "NCCL_FLOAT16": 6, "NCCL_FLOAT32": 7,
                       "NCCL_FLOAT64": 8, "NCCL_SUM": 0, "NCCL_PROD": 1, "NCCL_MAX": 2,
                       "NCCL_MIN": 3}.items():
        setattr(nccl, name, code)
    if bfloat16:
        nccl.NCCL_BFLOAT16 = 9
    fakes = {"cupy": cupy, "cupy.cuda": cuda, "cupy.cuda.nccl": nccl}
    saved = {name: sys.modules.get(name) for name in fakes}
    pointer = direct.device_pointer
    sys.modules.update(fakes)
    direct.device_pointer = lambda arr: int(arr.ctypes.data)
    FakeNcclCommunicator.made = []
    EVENTS.clear()
    try:
        yield nccl
    finally:
        direct.device_pointer = pointer
        for name, mod in saved.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod


def nccl_direct_on_host(name: str = "fake-nccl-direct") -> rivals.RivalSpec:
    """The real ``nccl-direct`` runtime as a host rival (under :func:`fake_cupy`)."""
    from mpiring.bench.rivals.direct_calls import NcclDirect

    return rivals.RivalSpec(name, "nccl-direct's runtime on a fake CuPy", NcclDirect,
                            memory=rivals.HOST, dtypes=tuple(NCCL_TYPES.values()))
