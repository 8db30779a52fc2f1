"""How a collective command (``mpiring.bench``, ``mpiring.bench.tune``) starts and ends: on a
duplicate of ``MPI.COMM_WORLD``, rank 0 reporting, errors every rank sees alike ending it with
status 3, anything else on one rank aborting the job (the others may wait in a collective that
would never return), and an interrupt (Ctrl-C, or SIGTERM as Slurm sends at a time limit)
ending it with 128 + the signal's number once the results so far are saved.

:class:`InterruptGuard` stops a run cleanly: while it is active, SIGINT and SIGTERM raise
nothing. The first one is noted, and a function runs at once in a thread of its own (the
bench saves its files there: the main thread may be blocked in an MPI call waiting for a rank
that already stopped). The ranks stop together at the next point where the run asks
:meth:`InterruptGuard.agreed` (one small allreduce: every rank stops at the same place, so
none is left waiting in a collective), and end normally: no ``MPI_Abort``, which would kill
rank 0 before it writes and leave MPICH's shared-memory segments in ``/dev/shm``. Only a run
that does not get there within the grace period (a hung rank), or a second signal, ends the
job with ``MPI_Abort``: rank 0 first (its files saved), the others a moment later.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from mpi4py import MPI

from ..node.launch import warn_if_singleton
from .report import Reporter
from .results import Row

STOP_GRACE_S = 20.0  # after a signal, how long the run has to reach its next stop check
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class BenchError(Exception):
    """A problem every rank sees alike: the run stops cleanly (exit status 3)."""


def interrupt_status(signal_name: str = "SIGINT") -> int:
    """The exit status of a run interrupted by ``signal_name``: 128 + the signal's number (130
    for Ctrl-C's SIGINT, 143 for SIGTERM)."""
    return 128 + int(signal.Signals[signal_name])


# What the guard calls: on_signal(name) at the first signal; on_overdue(name, why) when the run
# has not stopped within the grace period, or a second signal came.
OnSignal = Callable[[str], None]
OnOverdue = Callable[[str, str], None]


class InterruptGuard:
    """While active: SIGINT and SIGTERM raise nothing; the first is noted (:attr:`pending`) and
    ``on_signal(name)`` runs in a helper thread the moment it arrives, even while the main
    thread waits inside MPI. The run asks :meth:`agreed` (collective) where it can stop. If it
    has not left the guard ``grace_s`` seconds after that signal, or another one arrives,
    ``on_overdue(name, why)`` runs in the helper thread (once).

    Only the main thread can install signal handlers; elsewhere the guard does nothing."""

    def __init__(self, on_signal: OnSignal, on_overdue: OnOverdue | None = None,
                 grace_s: float = STOP_GRACE_S) -> None:
        self.on_signal = on_signal
        self.on_overdue = on_overdue
        self.grace_s = grace_s
        self.signum = 0  # the first signal that arrived (0: none)
        self._active = False
        self._old: dict[int, Any] = {}
        self._old_wakeup = -1
        self._pair: tuple[socket.socket, socket.socket] | None = None
        self._thread: threading.Thread | None = None

    @property
    def pending(self) -> str:
        """The name of the first signal that arrived on this rank ("" for none)."""
        return signal.Signals(self.signum).name if self.signum else ""

    def agreed(self, world: Any) -> str:
        """Collective over ``world``: the signal any rank has received ("" for none; SIGTERM
        over SIGINT), so that every rank stops at the same point."""
        signum = int(world.allreduce(self.signum, op=MPI.MAX))
        return signal.Signals(signum).name if signum else ""

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is not threading.main_thread():
            return self
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._pair = (reader, writer)
        self._old = {int(s): signal.signal(s, self._note) for s in SIGNALS}
        self._old_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="mpiring-bench-signals",
                                        daemon=True)
        self._active = True
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 _tb: TracebackType | None) -> None:
        if not self._active or self._pair is None:
            return
        self._active = False
        signal.set_wakeup_fd(self._old_wakeup)
        for signum, old in self._old.items():
            signal.signal(signum, old)
        reader, writer = self._pair
        with contextlib.suppress(OSError):
            writer.shutdown(socket.SHUT_RDWR)  # wakes the thread's recv with b""
        writer.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        reader.close()

    def _note(self, signum: int, _frame: FrameType | None) -> None:
        """The handler in the main thread: remember the first signal (the helper thread,
        woken through the wakeup fd, does the rest)."""
        self.signum = self.signum or signum

    def _watch(self) -> None:
        assert self._pair is not None
        reader = self._pair[0]
        first, deadline, overdue = "", None, False
        while True:
            reader.settimeout(None if deadline is None else max(1e-3, deadline - time.monotonic()))
            try:
                data = reader.recv(64)
            except TimeoutError:
                data = None
            except OSError:
                return
            if data == b"":  # the guard is leaving
                return
            why = ""
            if data is None:  # the grace period is over
                deadline = None
                why = f"the run did not stop within {self.grace_s:g} s of {first}"
            for signum in data or b"":
                if signum not in SIGNALS:
                    continue
                name = signal.Signals(signum).name
                if not first:
                    self.signum = self.signum or signum  # (the main thread's handler may run later)
                    first, deadline = name, time.monotonic() + self.grace_s
                    with contextlib.suppress(Exception):  # never kill the watcher
                        self.on_signal(name)
                else:
                    why = f"a second signal ({name}) arrived"
            if why and not overdue and self.on_overdue is not None and self._active:
                overdue = True
                with contextlib.suppress(Exception):
                    self.on_overdue(first, why)


def run_collectively(prog: str, world: Any, reporter: Reporter, body: Callable[[], int]) -> int:
    """Run ``body`` (a collective command's work) and return its exit status. A
    :class:`BenchError`, raised alike on every rank, ends it with status 3 and its message; an
    interrupt ends the job with 128 + the signal number; any other exception on one rank aborts
    the whole job, since the others may be waiting for it in a collective call that would
    never return."""
    try:
        return body()
    except BenchError as err:
        reporter.stop()
        reporter.error(f"{prog}: {err}")
        return 3
    except KeyboardInterrupt:  # Ctrl-C outside an InterruptGuard
        reporter.stop()
        status = interrupt_status("SIGINT")
        sys.stderr.write(f"{prog}: rank {world.rank}: interrupted by SIGINT, ending the job\n")
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(status)  # peers may wait in a collective: end them too
        return status
    except BaseException as err:
        reporter.stop()
        sys.stderr.write(f"{prog}: rank {world.rank}: unexpected {type(err).__name__}, "
                         "aborting the job\n")
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(3)
        return 3


def run_on_world(prog: str, progress: str, body: Callable[[Any, Reporter], int],
                 plain: bool = False) -> int:
    """A command's main: ``body(world, reporter)`` on a duplicate of ``MPI.COMM_WORLD``, with
    rank 0 reporting (``plain``: nccl-tests' text table), under :func:`run_collectively`'s
    error rules."""
    warn_if_singleton()
    world = MPI.COMM_WORLD.Dup()
    reporter = Reporter(world.rank == 0, progress, plain=plain)
    try:
        return run_collectively(prog, world, reporter, lambda: body(world, reporter))
    finally:
        if not MPI.Is_finalized():
            world.Free()


def exit_status(rows: list[Row]) -> int:
    """1 if a check failed, else 2 if a point raised an error, else 0 (points skipped,
    unavailable or n/a are no failure)."""
    if any(r.status == "fail" for r in rows):
        return 1
    if any(r.status == "error" for r in rows):
        return 2
    return 0
