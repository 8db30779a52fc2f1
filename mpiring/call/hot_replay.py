"""The compiled eager replay: a replayed call (:mod:`mpiring.call.replay`) in one C call.

A replayed call of a one-launch row does, in order (the reference: :meth:`Replayer.python`)::

    refuse (full path) if the communicator failed or closed, or a capture began since
    usable()            # the GPU status word, the watchdog's error, the peers' failure marks
    check.post(line)    # the agreement check: the descriptor into board line k % D, then count k
    enqueue()           # ordered_stream() (events if the stream changed), then cuLaunchKernel
    replayed += 1; check.after()   # the calls the GPU check skipped, if any since

In Python that is about forty function calls. A :class:`HotReplay` (the C extension
``mpiring/call/_hotpath.c``, one object per bound replay, made with the replay by
:meth:`HotPath.bind`) holds every address those steps touch and does the common case with a
few loads, the post's stores and one ``cuLaunchKernel`` through a function pointer. Whatever
is rare it hands back undone (:data:`FALLBACK`): a failure to raise, a wait for the slowest
rank, a stream change, a capture; the Python replay then runs the call exactly as before. The
state both paths use lives in shared words (the communicator's :class:`CallWords`, the
agreement check's ``PostWords``, the GPU backend's ``ReplayHooks``), so they interleave freely.

The call table (``CallTable``, one per communicator, made by :meth:`HotPath.call_table`) goes one
step further back: ``Communicator.Allreduce`` calls its ``run()`` first, which takes the
communicator's lock, reads the call's key off its arrays in C (what ``CallKeys.key`` reads),
finds the ``HotReplay`` of that shape and runs it, all in one C call; it answers None where it
did nothing (then ``_collective`` runs the call, in Python as before). Python fills it
(``learn``) with the replays it runs, and it is emptied with the plans. Its key is never coarser
than Python's: a shape it finds is one whose plan Python would find (``_hotpath.c`` says how).

Memory ordering: the post writes the line, then *release*-stores the count (an inter-process
rule: the peers read the count, fence, then the line; Python's post fences with
``MPI_Win_sync``); the wait check acquire-loads the peers' counts before the line is reused.

Off (every replay in Python): where the extension is not built (``python -m tools.build_hotpath``,
or ``pip install``), with ``MPIRING_HOTPATH=0``, on several nodes (failure notices arrive by
MPI, which only Python polls), and for replays that are not one bound launch.
"""

from __future__ import annotations

import logging
import threading
from array import array
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from .. import algorithms
from ..core import extensions
from ..cuda.launcher import StreamLaunch, driver_error
from .call_check import CallCheck

if TYPE_CHECKING:
    from ..context.gpu import ReplayHooks
    from ..node.control import ControlBoard
    from .dispatch import Dispatcher, Replay

# HotReplay.run()'s outcomes (the extension's own constants; checked when it is loaded).
FALLBACK = 0  # nothing done: the Python replay runs the call
REPLAYED = 1  # posted, launched and counted: done
REPLAYED_REPORT = 2  # done, and the GPU check skipped calls since: CallCheck.after() raises them
LAUNCH_FAILED = 3  # posted, then cuLaunchKernel failed: the communicator fails, as in Python

EXTENSION = "mpiring.call._hotpath"
log = logging.getLogger(__name__)


def compiled(environ: dict[str, str] | None = None) -> ModuleType | None:
    """The extension module, or None where it is not built or ``MPIRING_HOTPATH=0``."""
    module = extensions.optional(EXTENSION, environ)
    if module is None:
        return None
    outcomes = (module.FALLBACK, module.REPLAYED, module.REPLAYED_REPORT, module.LAUNCH_FAILED)
    if outcomes != (FALLBACK, REPLAYED, REPLAYED_REPORT, LAUNCH_FAILED):
        raise ImportError(f"{EXTENSION} answers {outcomes}, not this module's outcomes: rebuild it "
                          "(python -m tools.build_hotpath)")
    return module


def new_lock(environ: dict[str, str] | None = None) -> Any:
    """A communicator's lock (``acquire(False)``, ``release()``, ``with``): the extension's
    ``CallLock``, which a ``CallTable`` takes without a Python call, or ``threading.Lock()``
    where the extension is off."""
    module = compiled(environ)
    return threading.Lock() if module is None else module.CallLock()


class CallWords:
    """A communicator's own words that every replay of its calls reads or counts (int64, in
    arrays whose addresses the compiled replays hold; the communicator keeps this object, and so
    them, alive longer than any replay)."""

    def __init__(self) -> None:
        self.refusing = array("q", [1])  # nonzero: failed or closed (or not yet set up): full path
        self.replayed = array("q", [0])  # calls replayed, compiled or not (CallStats.replayed)

    def refuse(self) -> None:
        """From now on every call takes the full path (which raises): failed or closed."""
        self.refusing[0] = 1

    def accept(self) -> None:
        """Set-up completed: calls may be replayed."""
        self.refusing[0] = 0


class HotPath:
    """Per communicator: what every compiled replay of its calls shares, and their maker.

    Args:
        module: the extension (:func:`compiled`).
        words: the communicator's :class:`CallWords`.
        hooks: the GPU backend's words and stream order (``GpuBackend.replay_hooks()``).
        failure_words: the addresses of the node peers' failure marks
            (``ControlBoard.failure_words()``).
        check: the communicator's agreement check (its post's words, if it posts).
        launch_address: the address of a function with ``cuLaunchKernel``'s signature (default:
            the driver's, from ``libcuda.so.1``); tests pass a ctypes callback that records.
    """

    def __init__(self, module: ModuleType, words: CallWords, hooks: ReplayHooks, failure_words: list[int],
                 check: CallCheck, launch_address: int | None = None) -> None:
        self.module, self.words, self.hooks, self.check = module, words, hooks, check
        self.failure_words = tuple(failure_words)
        self.launch_address = module.cuda_launch_address() if launch_address is None else launch_address
        agreement = check.agreement
        self.post = agreement.post_words() if agreement.posts else None
        self._keep = (words, hooks, agreement)  # what the addresses point into

    @classmethod
    def make(cls, words: CallWords, hooks: ReplayHooks | None, board: ControlBoard | None,
             check: CallCheck, environ: dict[str, str] | None = None,
             launch_address: int | None = None) -> HotPath | None:
        """The hot path of a communicator, or None where its replays stay in Python (no GPUs,
        several nodes, no extension, ``MPIRING_HOTPATH=0``)."""
        module = compiled(environ)
        failure_words = None if board is None else board.failure_words()
        if module is None or hooks is None or failure_words is None:
            return None
        try:
            return cls(module, words, hooks, failure_words, check, launch_address)
        except OSError as err:  # no libcuda.so.1 to launch through: the Python replay does
            log.warning("the compiled replay is off: %s", err)
            return None

    def call_table(self, lock: Any, finish: Callable[[Replay, int], bool], keys: Any,
                   dispatcher: Dispatcher) -> Any:
        """The communicator's compiled key, lookup and replay (a ``CallTable``, see the module
        docstring), or None where ``keys`` (its ``mpiring.call.replay.CallKeys``) keys no array
        type (``replay=False``). It keys ``keys.array_type`` (and follows it), takes ``lock`` as
        ``Communicator._collective`` does (directly where it is a :func:`new_lock`), hands what
        is not a plain replay to ``finish`` (``Replayer.finish``), and is emptied with
        ``dispatcher``'s plans."""
        if keys.array_type is None:
            return None
        address, owner = algorithms.version_word()
        table = self.module.CallTable(array_type=keys.array_type, in_place=MPI.IN_PLACE, version=address,
                                      lock=lock, finish=finish, keep=owner)
        keys.compiled = dispatcher.compiled = table
        return table

    def bind(self, replay: Replay) -> Any:
        """The compiled form of ``replay`` (a ``HotReplay``), or None where it is not one bound
        launch on the caller's ordered stream (:class:`~mpiring.cuda.launcher.StreamLaunch`)."""
        enqueue = replay.enqueue
        if not isinstance(enqueue, StreamLaunch):
            return None
        if replay.line is not None and self.post is None:
            return None  # (never: a replay posts only where the check posts)
        launch, hooks, post = enqueue.launch, self.hooks, self.post
        line = b"" if replay.line is None else replay.line.astype("<i8").tobytes()
        return self.module.HotReplay(
            refusing=self.words.refusing.buffer_info()[0], gpu_state=hooks.gpu_state,
            watchdog_failed=hooks.watchdog_failed, peer_failed=self.failure_words,
            capturing=replay.capturing,
            progress=0 if post is None else post.progress, lines=() if post is None else post.lines,
            line=line, count=0 if post is None else post.count,
            all_counts=() if post is None else post.all_counts,
            current_stream=hooks.current_stream, stream_order=hooks.stream_order,
            launch=self.launch_address, function=launch.function, grid=launch.blocks,
            block=launch.threads, params=launch.params, replayed=self.words.replayed.buffer_info()[0],
            skipped=hooks.skipped if self.check.reports_skipped else 0,
            keep=(self._keep, launch))


class Replayer:
    """Runs a replayed call: compiled where the replay has a ``hot`` form, else (and whenever
    that hands the call back) in Python, which is the reference the compiled form follows.

    Args:
        words: the communicator's :class:`CallWords`.
        usable: raises (and fails the communicator) if it failed, closed, or a GPU or peer
            failure is known (``Communicator._usable``).
        fail: marks the communicator failed (a failed launch: the peers' sequence numbers no
            longer match).
        check: the communicator's agreement check.
        launch_error: the exception of a failed ``cuLaunchKernel`` (its ``CUresult``).
    """

    def __init__(self, words: CallWords, usable: Callable[[], None], fail: Callable[[BaseException], None],
                 check: CallCheck, launch_error: Callable[[int], BaseException] = driver_error) -> None:
        self.words, self.usable, self.fail, self.check = words, usable, fail, check
        self.launch_error = launch_error

    def replay(self, replay: Replay) -> bool:
        """Run ``replay``: False (nothing done) where the full path must run the call (a capture
        began since; failed or closed). The communicator inlines the first line."""
        outcome = replay.hot.run() if replay.hot is not None else FALLBACK
        return outcome == REPLAYED or self.finish(replay, outcome)

    def finish(self, replay: Replay, outcome: int) -> bool:
        """What is left of a call after ``replay.hot.run()`` answered ``outcome``."""
        if outcome == REPLAYED:
            return True
        if outcome == REPLAYED_REPORT:
            self.check.after()  # raises what the GPU check skipped
            return True
        if outcome == LAUNCH_FAILED:
            err = self.launch_error(replay.hot.launch_status)
            self.fail(err)  # as in python(): the peers' sequence numbers no longer match
            raise err
        return self.python(replay)

    def python(self, replay: Replay) -> bool:
        """The replay in Python (the reference semantics of :mod:`mpiring.call.replay`)."""
        if self.words.refusing[0] or (replay.capturing is not None and replay.capturing()):
            return False
        self.usable()
        if replay.host_check is not None:  # the row checks on the host: wait for the peers' calls
            self.check.host(False, replay.host_check)  # raises on every rank if they differ
        elif replay.line is not None:  # the check's post (one node, the row checks on the GPU)
            self.check.post(replay.line)
        try:
            replay.enqueue()
        except BaseException as err:  # as in the full path: peers' sequence numbers no longer match
            self.fail(err)
            raise
        self.words.replayed[0] += 1
        self.check.after()
        return True
