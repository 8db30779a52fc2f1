"""The compiled eager replay against the Python one, on the CPU: ns of host time per replayed
call, with a launch that does nothing (no GPU), and the stand-ins that make it run (which the
tests of mpiring.call.hot_replay use too)::

    python -m tools.build_hotpath && python -m tools.replay_bench [--calls 200000] [--rounds 5]

What it runs is what a GPU communicator's replayed call runs: a real control board and agreement
check (one rank, ``MPI.COMM_SELF``), a stand-in GPU backend (:class:`FakeGpu`: its status words,
watchdog word and stream order kept as ``GpuBackend`` keeps them), and a launch that records
(:class:`Launches`: a Python callable on the Python path, the same recorder behind a ctypes
function pointer on the compiled one) or, for the timings, does nothing (a no-op C function; a
no-op Python function). Two tables, with and without the agreement post:

- *whole call*: ``comm.Allreduce(x, out)`` of a shape seen before, through
  ``Communicator.Allreduce`` and ``_collective`` themselves (:class:`ReplayingCommunicator`),
  on CuPy-like arrays (:class:`CupyLike`): the compiled call table (key, lookup and replay in
  one C call), the compiled replay after Python's key and lookup (the call table off), and the
  Python replay;
- *persistent Start*: ``request.Start()`` of ``comm.Allreduce_init(x, out)`` of the same shape
  (:mod:`mpiring.call.persistent`: no key, no lookup), compiled and in Python;
- *replay alone*: from the plan's replay on (``Communicator._collective`` after the lookup),
  compiled and in Python.

The rounds of every case interleave (machine noise moves all cases alike).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import statistics
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
from mpi4py import MPI

from mpiring.algorithms import Collective
from mpiring.call.agreement import FIELDS, AgreementCheck
from mpiring.call.call_check import CallCheck
from mpiring.call.dispatch import Key, Replay
from mpiring.call.hot_replay import FALLBACK, REPLAYED, CallWords, HotPath, Replayer, compiled, new_lock
from mpiring.call.options import GPU_CHECK
from mpiring.call.replay import CallKeys
from mpiring.communicator import Communicator
from mpiring.context.gpu import ReplayHooks
from mpiring.core.errors import CommunicatorClosedError
from mpiring.cuda.contract import MM_COUNT, STATE, WORDS
from mpiring.cuda.launcher import BoundLaunch, StreamLaunch
from mpiring.cuda.status import skipped_error, status_error
from mpiring.node.control import ControlBoard
from mpiring.node.signals import FAILED
from mpiring.node.timeouts import TimeoutPolicy

MODES = ("compiled", "python")
HAVE_EXTENSION = compiled() is not None
PARAMS = ("ptr", "ptr", "i64", "ptr", "i32", "i64", "i64")  # the direct kernels' parameters
FUNCTION, BLOCKS, THREADS = 0xF00D, 128, 512
TIMEOUT = 30.0
VALUES = {name: 3 + i for i, name in enumerate(FIELDS)}  # a call's fields, as the check compares them
# cuLaunchKernel(f, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMem, stream, params, extra)
LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_void_p)


class FakeDriverError(Exception):
    """What the fake driver's failed launch raises (CuPy raises ``CUDADriverError``)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"CUDA_ERROR {status}: the fake driver refused the launch")
        self.status = status


class Launches:
    """The fake driver: every launch as ``(function, grid, block, shared, stream, parameter
    values, extra)``, the values read back through the ``kernelParams`` pointer it got."""

    def __init__(self, kinds: tuple[str, ...] = PARAMS) -> None:
        self.kinds = kinds
        self.log: list[tuple[Any, ...]] = []
        self.params_seen: list[int] = []
        self.status = 0  # what the next launches answer (nonzero: they fail)
        self.pointer = LAUNCH_T(self.record)  # kept alive with this object
        self.address = ctypes.cast(self.pointer, ctypes.c_void_p).value

    def record(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        values = []
        for i, kind in enumerate(self.kinds):
            slot = ctypes.c_uint64.from_address(params + 8 * i).value
            values.append((ctypes.c_int32 if kind == "i32" else ctypes.c_int64).from_address(slot).value)
        self.params_seen.append(params)
        self.log.append((function or 0, (gx, gy, gz), (bx, by, bz), shared, stream or 0, tuple(values),
                         extra or 0))
        return self.status

    def python(self, *args: Any) -> None:
        """CuPy's ``driver.launchKernel``: raises where the driver answers an error."""
        status = self.record(*args)
        if status:
            raise FakeDriverError(status)


class FakeStream:
    """A CuPy stream as ordered_stream() sees it: a handle."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class FakeGpu:
    """The parts of ``GpuBackend`` a replay touches, written as it writes them: ``failure()``
    (the watchdog's error, else the status block's), ``skipped()`` (HostStatus.skipped),
    ``ordered_stream()`` (events recorded where the stream changes), ``replay_hooks()``."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.words = np.zeros(WORDS, dtype=np.int64)  # the status block (pinned memory on a GPU)
        self.raised = 0
        self.watchdog_error: Exception | None = None
        self.watchdog_word = array("q", [0])
        self.stream_order: list[Any] = [None, 0]
        self.current = FakeStream(0x5000)
        self.events: list[tuple[str, int]] = []

    def current_stream(self) -> FakeStream:
        return self.current

    def ordered_stream(self) -> FakeStream:
        stream, order = self.current_stream(), self.stream_order
        last = order[0]
        if last is not stream:
            if last is not None and last.ptr != stream.ptr:
                self.events += [("record", last.ptr), ("wait", stream.ptr)]
            order[0], order[1] = stream, stream.ptr
        return stream

    def failure(self) -> Exception | None:
        if self.watchdog_error is not None:
            return self.watchdog_error
        return status_error(self.words.tolist(), self.rank, TIMEOUT)

    def set_watchdog_error(self, err: Exception) -> None:
        self.watchdog_error = err
        self.watchdog_word[0] = 1

    def skipped(self, how) -> Exception | None:
        if self.words[MM_COUNT] == self.raised:
            return None
        err, self.raised = skipped_error(self.words.tolist(), self.rank, self.raised, how)
        return err

    def notice(self, desc) -> None:
        self.events.append(("notice", int(desc[0])))

    def replay_hooks(self) -> ReplayHooks:
        base = int(self.words.ctypes.data)
        return ReplayHooks(base + 8 * STATE, self.watchdog_word.buffer_info()[0], base + 8 * MM_COUNT,
                           self.stream_order, self.current_stream)


class Harness:
    """One rank's communicator, cut down to its replayed calls, in ``mode`` ("compiled" or
    "python"); ``fail`` and ``usable`` are ``Communicator._fail`` and ``_usable``, line for line."""

    def __init__(self, mode: str, comm: MPI.Intracomm = MPI.COMM_SELF, gpu_check: bool = True,
                 timeout: float = TIMEOUT, noop_launch: bool = False) -> None:
        self.mode, self.rank = mode, comm.rank
        self.board = ControlBoard(comm, 0, TimeoutPolicy(timeout))
        self.gpu = FakeGpu(comm.rank)
        self.failed: str | None = None
        self.closed = False
        self.words = CallWords()
        self.agreement = AgreementCheck(comm, timeout, board=self.board.shared)
        self.check = CallCheck(self.agreement, self.fail)
        if gpu_check:
            self.check.use_gpu(self.gpu, GPU_CHECK)  # type: ignore[arg-type]
        self.launches = Launches()
        self.noop_launch = noop_launch  # the timings' launch: does nothing, records nothing
        self.replayer = Replayer(self.words, self.usable, self.fail, self.check, FakeDriverError)
        self.hot = None
        if mode == "compiled":
            module = compiled()
            assert module is not None, "the extension is not built (python -m tools.build_hotpath)"
            address = module.noop_launch_address() if noop_launch else self.launches.address
            self.hot = HotPath.make(self.words, self.gpu.replay_hooks(), self.board, self.check,
                                    launch_address=address)
            assert self.hot is not None, "the extension is not built (python -m tools.build_hotpath)"
        self.words.accept()

    def fail(self, err: BaseException) -> None:
        self.failed = f"{type(err).__name__}: {err}"
        self.words.refuse()
        if not self.closed:
            self.board.mark_failed(self.failed, cause=err)

    def usable(self) -> None:
        if self.failed:
            raise CommunicatorClosedError(f"this communicator failed earlier ({self.failed}) and "
                                          "refuses further use: close it and create a new one")
        if self.closed:
            raise CommunicatorClosedError("this communicator is closed")
        gpu_error = self.gpu.failure()
        if gpu_error is not None:
            self.fail(gpu_error)
            raise gpu_error
        err = self.board.peer_error(self.rank)
        if err is not None:
            self.fail(err)
            raise err

    def replay(self, args: tuple[int, ...] = (0x1000, 0x2000, 2048, 0xC0, 1, 7, 9), checked: bool = True,
               capturing=None) -> Replay:
        """A bound replay of the direct kernel with ``args``, as replay_for() makes it."""
        driver = _noop if self.noop_launch else self.launches.python
        launch = BoundLaunch(PARAMS, THREADS, FUNCTION, BLOCKS, args, driver_launch=driver)
        line = AgreementCheck.line(VALUES) if checked else None
        replay = Replay(StreamLaunch(launch, self.gpu.ordered_stream), line, capturing)
        return replay if self.hot is None else replay._replace(hot=self.hot.bind(replay))

    def call(self, replay: Replay) -> str:
        """One call of a shape seen before, as the communicator makes it: "replayed", or "full
        path" (nothing done); raises what the call raises."""
        return "replayed" if self.replayer.replay(replay) else "full path"

    def refuse(self, closed: bool) -> None:
        """The communicator failed (elsewhere) or closed: what its flags say."""
        if closed:
            self.closed = True
        else:
            self.failed = "MpiringError: an earlier failure"
        self.words.refuse()

    def state(self) -> dict[str, Any]:
        """Everything a call leaves behind that the two paths must leave alike."""
        shared = self.board.shared
        marked = shared.read(self.rank, FAILED) != 0  # then the message is the payload's text
        message = bytes(shared.payloads[self.rank]).split(b"\0", 1)[0] if marked else None
        return dict(launches=list(self.launches.log), events=list(self.gpu.events),
                    board=shared.lines[self.rank].tolist(), message=message,
                    calls=self.agreement.calls, replayed=self.words.replayed[0], failed=self.failed,
                    stream=self.gpu.stream_order[1], raised=self.gpu.raised)

    def close(self) -> None:
        self.board.close(abandon=self.failed is not None)


class MemoryPointer:
    """CuPy's ``MemoryPointer`` as a call's key reads it: ``ptr`` (a C-level attribute)."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class CupyLike(np.ndarray):
    """CuPy's ``ndarray`` as a call's key reads it, at about its cost: ``data.ptr`` (C-level
    attributes, as CuPy's Cython ones), ``shape`` and ``strides`` (a tuple built at every
    read, as CuPy's), ``dtype``. Host memory: nothing reads it."""

    __slots__ = ("data",)


def cupy_like(count: int, ptr: int, dtype: Any = np.float32) -> CupyLike:
    """A :class:`CupyLike` of ``count`` elements whose ``data.ptr`` is ``ptr``."""
    array = np.zeros(count, dtype).view(CupyLike)
    array.data = MemoryPointer(ptr)  # type: ignore[misc,assignment]  # (CupyLike's own slot)
    return array


class PlanCache:
    """What a replayed call reads of the communicator's ``Dispatcher``: its plans by key
    (``planned``), ``clear()`` and the compiled index of their replays (``compiled``)."""

    def __init__(self) -> None:
        self.plans: dict[Key, Any] = {}
        self.compiled: Any = None
        self.generation = 0  # what a persistent request checks (mpiring.call.persistent)

    def planned(self, key: Key | None) -> Any:
        return None if key is None else self.plans.get(key)

    def clear(self) -> None:
        self.plans.clear()
        self.generation += 1
        if self.compiled is not None:
            self.compiled.clear()


class ReplayingCommunicator(Communicator):
    """A communicator cut down to its replayed calls: ``Allreduce`` and ``_collective`` are
    :class:`~mpiring.communicator.Communicator`'s own, over the state of a :class:`Harness`
    (its words, replayer, check, stand-in GPU) and a :class:`PlanCache` of replays planted with
    :meth:`keep`; a call that would take the full path is counted in ``full_path`` instead.
    ``table``: with the compiled call table (where the harness is compiled)."""

    def __init__(self, h: Harness, table: bool = True) -> None:  # no set-up: nothing collective
        self._closed, self._failed, self._planned = False, None, 0
        # The table's ways take the extension's lock, as a communicator does; the others the
        # threading.Lock the communicator took before it.
        self._lock = new_lock() if table else threading.Lock()
        self._words, self._hot, self._replayer = h.words, h.hot, h.replayer
        keys = CallKeys(CupyLike)
        self._held = SimpleNamespace(  # type: ignore[assignment]
            call_keys=keys, gpu=h.gpu, check=h.check, board=h.board)
        self._dispatch = PlanCache()  # type: ignore[assignment]
        self._calls = None
        if table and h.hot is not None:
            self._calls = h.hot.call_table(self._lock, h.replayer.finish, keys, self._dispatch)
        self.full_path = 0

    def keep(self, replay: Replay, recv: Any, send: Any = None, op: Any = MPI.SUM) -> None:
        """Plant ``replay`` as the plan of ``Allreduce(send, recv, op)``'s shape (what the
        full path leaves after the shape's first call)."""
        key = self._held.call_keys.key(Collective.ALLREDUCE, send, recv, op, None, None)
        assert key is not None, "these arrays have no key"
        self._dispatch.plans[key] = SimpleNamespace(replay=replay)  # type: ignore[attr-defined]

    def _run(self, *_args: Any, **_kwargs: Any) -> None:
        self._planned += 1
        self.full_path += 1

    def forget(self) -> None:
        """Drop every plan, and the call table's entries, as the check setter and close() do."""
        self._dispatch.clear()

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """A call in progress in another thread (it holds the communicator's lock)."""
        with self._lock:
            yield

    def close(self) -> None:
        self._closed = True
        self.forget()


def _noop(*_args: Any) -> None:
    """The Python path's launch that does nothing (CuPy's launchKernel is one C call too)."""


def as_communicator_does(h: Harness, replay: Replay) -> Callable[[], Any]:
    """One replayed call as ``Communicator._collective`` makes it (its inlined replay)."""
    hot, finish = replay.hot, h.replayer.finish

    def call() -> None:
        outcome = hot.run() if hot is not None else FALLBACK
        if not (outcome == REPLAYED or finish(replay, outcome)):
            raise AssertionError("the benchmark's replay fell to the full path")
    return call


class Case:
    """One timed case: its label, its calls (``run``), what to close afterwards, and how many of
    its calls took the full path (``full_path``: none may)."""

    def __init__(self, label: str, run: Callable[[], Any], closing: list[Any],
                 full_path: Callable[[], int] = lambda: 0) -> None:
        self.label, self.run, self.closing, self.full_path = label, run, closing, full_path
        self.ns: list[float] = []

    def close(self) -> None:
        for thing in self.closing:
            thing.close()


def planted(mode: str, checked: bool,
            table: bool) -> tuple[Harness, ReplayingCommunicator, CupyLike, CupyLike]:
    """A communicator that has seen ``Allreduce(x, out)`` (8 KiB float32, out of place): its
    replay is kept, with a launch that does nothing."""
    h = Harness(mode, noop_launch=True)
    comm = ReplayingCommunicator(h, table)
    x, out = cupy_like(2048, 0x7F00_0000_0000), cupy_like(2048, 0x7F00_0010_0000)
    comm.keep(h.replay(checked=checked), out, x)
    return h, comm, x, out


def whole_call(mode: str, checked: bool, table: bool) -> Case:
    """``comm.Allreduce(x, out)`` of a shape seen before (:func:`planted`)."""
    h, comm, x, out = planted(mode, checked, table)
    how = ("compiled call table" if table else "compiled replay, Python key") if mode == "compiled" \
        else "Python replay"

    def call() -> None:
        comm.Allreduce(x, out)
    return Case(f"Allreduce: {how}", call, [comm, h], lambda: comm.full_path)


def persistent_start(mode: str, checked: bool) -> Case:
    """``request.Start()`` of ``comm.Allreduce_init(x, out)`` (the same shape and arrays as
    :func:`whole_call`), after its first Start found the planted replay."""
    h, comm, x, out = planted(mode, checked, table=mode == "compiled")
    request = comm.Allreduce_init(x, out)
    request.Start()  # through _collective: keeps the planted replay
    how = "compiled replay" if mode == "compiled" else "Python replay"
    return Case(f"persistent Start: {how}", request.Start, [comm, h], lambda: comm.full_path)


def replay_alone(mode: str, checked: bool) -> Case:
    h = Harness(mode, noop_launch=True)
    return Case(f"replay alone: {mode}", as_communicator_does(h, h.replay(checked=checked)), [h])


def measure(cases: list[Case], calls: int, rounds: int) -> None:
    """ns per call of each case, one per round (after a warm-up), rounds interleaved."""
    for case in cases:
        for _ in range(min(calls, 10_000)):
            case.run()
    for _ in range(rounds):
        for case in cases:
            run = case.run
            start = time.perf_counter_ns()
            for _ in range(calls):
                run()
            case.ns.append((time.perf_counter_ns() - start) / calls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.replay_bench",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--calls", type=int, default=200_000, help="replayed calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (the median is shown)")
    args = parser.parse_args(argv)
    modes = MODES if HAVE_EXTENSION else ("python",)
    if not HAVE_EXTENSION:
        print("the extension is not built (python -m tools.build_hotpath): the Python replay only")
    print(f"host time per replayed call, no-op launch, median of {args.rounds} interleaved rounds of "
          f"{args.calls} calls (min - max)")
    print("| case | agreement post | ns per call |\n| --- | --- | --- |")
    for checked in (True, False):
        cases = [whole_call("compiled", checked, table) for table in (True, False) if HAVE_EXTENSION]
        cases += [whole_call("python", checked, False)] + [persistent_start(mode, checked) for mode in modes]
        cases += [replay_alone(mode, checked) for mode in modes]
        try:
            measure(cases, args.calls, args.rounds)
            fell = [case.label for case in cases if case.full_path()]
            assert not fell, f"calls of {fell} took the full path: the benchmark lost its point"
        finally:
            for case in cases:
                case.close()
        for case in cases:
            print(f"| {case.label} | {'posted' if checked else 'off'} | {statistics.median(case.ns):.0f} "
                  f"({min(case.ns):.0f} - {max(case.ns):.0f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
