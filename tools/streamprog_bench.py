"""ce-twoshot's host path on the CPU: µs of host time per round (one staging area per peer) to
enqueue a call, by the Python reference (the engine's walk of the issue order), by its program
read in Python, and by the compiled executor (``mpiring/cuda/_streamprog.c``), with driver
functions that do nothing (no GPU); and the stand-ins that make it run, which the tests of
mpiring.cuda.streamprog use too::

    python -m tools.build_hotpath && python -m tools.streamprog_bench [--ranks 2,4,8] [--rounds 64]

The stand-ins: :class:`DriverCalls` records every driver call as one tuple, whichever way it
came: through :class:`FakeDriver` (shaped as ``cuda.bindings.driver``, for
:class:`~mpiring.cuda.memops.StreamMemOps`) and :func:`python_launch` (for
:class:`~mpiring.cuda.launcher.PackedLaunch`) on the Python path, or through
:class:`CFunctions` (ctypes function pointers that the compiled executor calls) on the compiled
one. :class:`Forwarding` passes the compiled executor's calls on to a device object instead
(the tests' simulated GPUs).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from mpiring.algorithms.ce_twoshot import THREADS, CudaDevice, issue_call
from mpiring.cuda import streamprog
from mpiring.cuda.alltoall_layout import AllToAllLayout
from mpiring.cuda.launcher import PackedLaunch
from mpiring.cuda.memops import StreamMemOps
from mpiring.cuda.streamprog import FOLD_PARAMS, Executor
from mpiring.ring.alltoall_engine import AllToAllEngine
from mpiring.ring.alltoall_schedule import AllToAllPlan

from .build_hotpath import SOURCES, build

# cuda.h's signatures as ctypes sees them (CUstream, CUfunction: pointers; CUdeviceptr: uint64)
WAIT_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint)
COPY_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p)
LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_void_p)
_VALUES = {"ptr": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64}
GUARD = (0xAB0_0000, 0x5747_0000)  # a fold's abort word and status block, as stand-ins
FUNCTION = 0xF01D
MAX_BLOCKS = 132


def extension(folder: Path | None = None) -> ModuleType:
    """The executor's extension freshly built from its source (into ``folder``, else a temporary
    one) and loaded: what the tests run, whatever is installed."""
    folder = Path(tempfile.mkdtemp()) if folder is None else folder
    out = folder / ("_streamprog" + sysconfig.get_config_var("EXT_SUFFIX"))
    build(output=out, source=SOURCES["streamprog"])
    spec = importlib.util.spec_from_file_location("_streamprog", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeLaunchError(Exception):
    """What a failed fake launch raises (CuPy raises ``CUDADriverError``)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"CUDA_ERROR {status}: the fake driver refused the launch")
        self.status = status


class DriverCalls:
    """Every driver call, in order, as a tuple; the call numbered ``fail_at`` (from 0) answers
    ``status`` instead of success."""

    def __init__(self, fail_at: int = -1, status: int = 700) -> None:
        self.entries: list[tuple] = []
        self.fail_at, self.status = fail_at, status

    def answer(self, entry: tuple) -> int:
        self.entries.append(entry)
        return self.status if len(self.entries) - 1 == self.fail_at else 0


def launch_entry(function: Any, grid: tuple, block: tuple, shared: int, stream: Any, params: Any,
                 extra: Any) -> tuple:
    """A ``cuLaunchKernel`` call as a tuple, its parameters read back through ``params``."""
    slots = [ctypes.c_void_p.from_address(int(params) + 8 * i).value or 0 for i in range(len(FOLD_PARAMS))]
    args = tuple(_VALUES[kind].from_address(slot).value
                 for kind, slot in zip(FOLD_PARAMS, slots, strict=True))
    return ("launch", int(function or 0), *grid, *block, shared, int(stream or 0), args, int(extra or 0))


class FakeDriver:
    """``cuda.bindings.driver`` as :class:`StreamMemOps` uses it: a device that has 64-bit
    stream memory operations (and flushes remote writes where ``flush``), whose waits, writes
    and copies go to ``calls``."""

    def __init__(self, calls: DriverCalls, flush: bool = True) -> None:
        from cuda.bindings import driver

        self.CUresult, self.CUdevice_attribute = driver.CUresult, driver.CUdevice_attribute  # noqa: N815
        self.CUstreamWaitValue_flags = driver.CUstreamWaitValue_flags  # noqa: N815
        self.CUstreamWriteValue_flags = driver.CUstreamWriteValue_flags  # noqa: N815
        self.calls, self.flush = calls, flush

    def cuDeviceGet(self, ordinal: int) -> tuple:  # noqa: N802 - the driver's names
        return self.CUresult.CUDA_SUCCESS, ordinal

    def cuDeviceGetAttribute(self, attribute: Any, device: int) -> tuple:  # noqa: N802
        flush = attribute == self.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES
        return self.CUresult.CUDA_SUCCESS, int(self.flush or not flush)

    def cuStreamWaitValue64(self, stream: int, addr: int, value: int, flags: int) -> tuple:  # noqa: N802
        return (self.CUresult(self.calls.answer(("wait", stream, addr, value, flags))),)

    def cuStreamWriteValue64(self, stream: int, addr: int, value: int, flags: int) -> tuple:  # noqa: N802
        return (self.CUresult(self.calls.answer(("write", stream, addr, value, flags))),)

    def cuMemcpyAsync(self, dst: int, src: int, nbytes: int, stream: int) -> tuple:  # noqa: N802
        return (self.CUresult(self.calls.answer(("copy", stream, dst, src, nbytes))),)


def python_launch(calls: DriverCalls):
    """A ``driver_launch`` for :class:`PackedLaunch` that records into ``calls`` (and raises
    :class:`FakeLaunchError` where ``calls`` answers a failure, as CuPy raises)."""
    def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> None:
        entry = launch_entry(function, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra)
        status = calls.answer(entry)
        if status:
            raise FakeLaunchError(status)
    return launch


class CFunctions:
    """The four driver entry points as ctypes function pointers that record into ``calls``
    (:attr:`addresses`, by the driver's names, for :class:`~mpiring.cuda.streamprog.Executor`)."""

    def __init__(self, calls: DriverCalls) -> None:
        def wait(stream, addr, value, flags):
            return calls.answer(("wait", stream or 0, addr, value, flags))

        def write(stream, addr, value, flags):
            return calls.answer(("write", stream or 0, addr, value, flags))

        def copy(dst, src, nbytes, stream):
            return calls.answer(("copy", stream or 0, dst, src, nbytes))

        def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            entry = launch_entry(function, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra)
            return calls.answer(entry)

        self._keep = [WAIT_T(wait), WAIT_T(write), COPY_T(copy), LAUNCH_T(launch)]
        self.addresses = {name: ctypes.cast(f, ctypes.c_void_p).value or 0 for name, f in zip(
            ("cuStreamWaitValue64", "cuStreamWriteValue64", "cuMemcpyAsync", "cuLaunchKernel"), self._keep,
            strict=True)}


class Forwarding(CFunctions):
    """Entry points that pass each call on to ``device`` (``wait_geq``, ``write``, ``copy``,
    ``fold``: a simulated GPU), a launch as the fold whose arguments it carries."""

    def __init__(self, device: Any) -> None:
        calls = SimpleNamespace()

        def answer(entry: tuple) -> int:
            if entry[0] in ("wait", "write"):
                (device.wait_geq if entry[0] == "wait" else device.write)(*entry[1:4])
            elif entry[0] == "copy":
                device.copy(*entry[1:])
            else:
                out, mine, table, me, ranks, count = entry[10][:6]
                device.fold(entry[9], out, mine, table, me, ranks, count)
            return 0
        calls.answer = answer
        super().__init__(calls)  # type: ignore[arg-type]


def reference_device(calls: DriverCalls, flush: bool = True) -> CudaDevice:
    """ce-twoshot's Python device over the fake driver (its kernel :data:`FUNCTION`)."""
    memops = StreamMemOps(0, FakeDriver(calls, flush))
    return CudaDevice(memops, PackedLaunch(FOLD_PARAMS, THREADS, driver_launch=python_launch(calls)), GUARD,
                      MAX_BLOCKS)


def executor(module: ModuleType, functions: CFunctions, memops: StreamMemOps) -> Executor:
    """The compiled executor over ``functions``, as ce-twoshot makes it."""
    return Executor(module, memops, THREADS, MAX_BLOCKS, GUARD, functions.addresses,
                    launch_error=FakeLaunchError, keep=functions)


class _Null:
    """A device that does nothing: the Python paths' own cost."""

    def prepare(self, function: int, itemsize: int) -> None:
        pass

    def wait_geq(self, stream: int, addr: int, value: int) -> None:
        pass

    write = wait_geq

    def copy(self, stream: int, dst: int, src: int, nbytes: int) -> None:
        pass

    def fold(self, stream: int, out: int, mine: int, table: int, me: int, ranks: int, count: int) -> None:
        pass


def per_round(ranks: int, rounds: int, module: ModuleType | None, repeat: int = 5) -> dict[str, float]:
    """µs of host time per round of an allreduce of ``rounds`` rounds at ``ranks`` ranks, each way."""
    area = 256
    layout = AllToAllLayout(ranks, area)
    streams: dict[Any, int] = {("rs", p): 10 for p in range(ranks)} | {("ag", p): 11 for p in range(ranks)}
    streams |= {"fold": 12, "collect": 13}
    plan = AllToAllPlan(ranks, ranks * rounds * (area // 4), area // 4)
    addr = lambda rank, offset: ((rank + 1) << 40) + offset  # noqa: E731
    null = _Null()
    memops = StreamMemOps(0, FakeDriver(DriverCalls()))
    ways: dict[str, Any] = {
        "python": lambda e: e.enqueue(plan, 1 << 50, 2 << 50, 4),
        "program in python": lambda e: e.enqueue_program(plan, 1 << 50, 2 << 50, 4, lambda p, i, o, s, g:
                                                         p.issue(null, i, o, s, g)),
    }
    if module is not None:
        run = Executor(module, memops, THREADS, MAX_BLOCKS, GUARD, module.noop_functions())
        ways["compiled"] = lambda e: issue_call(e, run, plan, 1 << 50, 2 << 50, 4, FUNCTION)
    found = {}
    for name, way in ways.items():
        engine = AllToAllEngine(0, layout, addr, null, streams)
        way(engine)  # the program is made once
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(10):
                way(engine)
            best = min(best, (time.perf_counter() - start) / 10)
        found[name] = best / plan.rounds * 1e6
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.streamprog_bench",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--ranks", default="2,4,8", help="rank counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=64, help="rounds per call")
    args = parser.parse_args(argv)
    module = streamprog.compiled()
    if module is None:
        print("the compiled executor is not built (python -m tools.build_hotpath): Python rows only")
    print(f"{'ranks':>5}  " + "  ".join(f"{w:>18}" for w in ("python", "program in python", "compiled"))
          + "   (µs per round, host)")
    for ranks in (int(r) for r in args.ranks.split(",")):
        row = per_round(ranks, args.rounds, module)
        print(f"{ranks:>5}  " + "  ".join(f"{row[w]:>18.2f}" if w in row else f"{'-':>18}"
                                          for w in ("python", "program in python", "compiled")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
