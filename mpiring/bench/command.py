"""How a collective command (``mpiring.bench``, ``mpiring.bench.tune``) starts and ends: on a
duplicate of ``MPI.COMM_WORLD``, rank 0 reporting, errors every rank sees alike ending it with
status 3, anything else on one rank aborting the job (the others may wait in a collective that
would never return), and an interrupt (Ctrl-C, or SIGTERM as Slurm sends at a time limit)
ending it with 128 + the signal's number once the results so far are saved.

:class:`InterruptGuard` turns SIGTERM into an exception like Ctrl-C's, and calls a function as
soon as either signal arrives, from a thread of its own: the main thread may be blocked in an
MPI call waiting for a rank that already stopped, and mpi4py releases the GIL there, so the
results are saved all the same.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from mpi4py import MPI

from ..launch import warn_if_singleton
from .report import Reporter
from .results import Row


class BenchError(Exception):
    """A problem every rank sees alike: the run stops cleanly (exit status 3)."""


class Interrupted(BaseException):
    """SIGTERM arrived (Ctrl-C raises ``KeyboardInterrupt``): stop where the run is."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


def interrupt_status(err: BaseException) -> int:
    """The exit status of an interrupted run: 128 + the signal's number (130 for Ctrl-C)."""
    return 128 + (err.signum if isinstance(err, Interrupted) else int(signal.SIGINT))


class InterruptGuard:
    """While active: SIGTERM raises :class:`Interrupted` in the main thread (as SIGINT raises
    ``KeyboardInterrupt``), and ``on_signal(name)`` runs in a helper thread the moment
    either signal arrives, even while the main thread waits inside MPI.

    Only the main thread can install signal handlers; elsewhere the guard does nothing."""

    def __init__(self, on_signal: Callable[[str], None]) -> None:
        self.on_signal = on_signal
        self._active = False
        self._old_term: Any = None
        self._old_wakeup = -1
        self._pair: tuple[socket.socket, socket.socket] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is not threading.main_thread():
            return self
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._pair = (reader, writer)
        self._old_term = signal.signal(signal.SIGTERM, self._raise)
        self._old_wakeup = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        self._thread = threading.Thread(target=self._watch, name="mpiring-bench-signals",
                                        daemon=True)
        self._thread.start()
        self._active = True
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self._active or self._pair is None:
            return
        self._active = False
        signal.set_wakeup_fd(self._old_wakeup)
        signal.signal(signal.SIGTERM, self._old_term)
        reader, writer = self._pair
        with contextlib.suppress(OSError):
            writer.shutdown(socket.SHUT_RDWR)  # wakes the thread's recv with b""
        writer.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        reader.close()

    @staticmethod
    def _raise(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    def _watch(self) -> None:
        assert self._pair is not None
        reader = self._pair[0]
        while True:
            try:
                data = reader.recv(64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in (signal.SIGINT, signal.SIGTERM):
                    with contextlib.suppress(Exception):  # never kill the watcher
                        self.on_signal(signal.Signals(signum).name)


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
    except (KeyboardInterrupt, Interrupted) as err:
        reporter.stop()
        status = interrupt_status(err)
        sys.stderr.write(f"{prog}: rank {world.rank}: {err or 'interrupted by SIGINT'}, "
                         "ending the job\n")
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
