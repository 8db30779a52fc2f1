"""The GPU side's guard against waiting forever: a status block, an abort, and a watchdog.

* :class:`HostStatus`: where this rank's kernels report a failure (see :mod:`.status`).
* :func:`abort`: stop the communicator on every rank: write ``1 + rank`` into every rank's
  abort word (kernels that write output check it and return), then overwrite every flag this
  rank's waits poll with a value no wait can exceed, so stuck GPU waits finish and the process
  can exit. The abort words go first, on one stream, each write behind a system-wide fence:
  work a release lets through always sees the abort.
* :class:`Watchdog`: the ring's waits are stream memory operations the GPU executes, which
  nothing on the GPU can time out. A thread follows each ring call through two events. The
  timeout bounds the time a call goes without progress, as every wait's does: while a call
  runs, the thread reads this rank's ring flags (which its peers write as they move) every
  ``timeout / SAMPLES``; a change restarts the call's clock. Once the flags have not changed
  for the timeout, it finds the late peer and step from them, records the error, and aborts.
  So a long call that keeps moving never fails, and a stall is noticed within about
  ``(1 + 1 / SAMPLES)`` timeouts. The event-signalled ring has no flags: its host follows the
  call step by step (each host wait bounded by its time without progress), and the watchdog,
  which follows a call once this rank enqueued all of it, sees only the counters of those
  waits move (a peer still enqueueing); else the call's GPU work has one timeout to finish.
  (The one-shot and two-shot kernels time out by themselves: their waits read the GPU clock.)
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import MpiringError, MpiringTimeoutError
from ..node.timeouts import ProgressClock
from .contract import MM_COUNT
from .layout import StagingLayout
from .memops import StreamMemOps
from .resources import LIVE
from .status import ABORT_HINT, WORDS, skipped_error, status_error

log = logging.getLogger(__name__)

NOT_READY = 600  # cudaErrorNotReady, what cudaEventQuery returns for work still running
RELEASE_BYTE = 0x3F  # flags become 0x3F3F...3F: beyond any sequence number, positive as int64
POLL = 0.005  # seconds between the watchdog's looks at the oldest ring call
SAMPLES = 4  # reads of a running call's flags per timeout (progress restarts its clock)
DEPTH = 64  # ring calls followed at once; a 65th waits for the oldest (bounded by the watchdog)


class HostStatus:
    """Sixteen int64 words of pinned host memory, mapped into the GPU at the same address
    (``csrc/status.cuh``): a failure, and the calls the GPU-side agreement check skipped."""

    def __init__(self) -> None:
        import cupy

        self._rt = rt = cupy.cuda.runtime
        self.ptr = rt.hostAlloc(WORDS * 8, 1 | 2)  # cudaHostAllocPortable | cudaHostAllocMapped
        LIVE["host_status"] += 1
        self.words = np.ctypeslib.as_array((ctypes.c_int64 * WORDS).from_address(self.ptr))
        self.words[:] = 0
        self.raised = 0  # skipped calls already raised (ST_MM_COUNT as of the last error)

    def error(self, rank: int, timeout: float) -> MpiringError | None:
        return status_error(self.words, rank, timeout)

    def skipped(self, rank: int, describe: Callable[[str, int], str]) -> MpiringError | None:
        """The error of the calls skipped since the last one raised (each is raised once), or None."""
        if self.words[MM_COUNT] == self.raised:  # the common case, read at every call: none
            return None
        err, self.raised = skipped_error(self.words, rank, self.raised, describe)
        return err

    def close(self) -> None:
        if self.ptr:
            self.words = None
            self._rt.freeHost(self.ptr)
            self.ptr = 0
            LIVE["host_status"] -= 1


def abort(staging, layout: StagingLayout, memops: StreamMemOps, stream: int, also: Sequence = ()) -> None:
    """Abort the communicator from this rank (see the module docstring); enqueued on ``stream``.
    ``also``: further stagings of this communicator whose flags the waits of its rows poll
    (:meth:`Watchdog.also_release`), released after the abort words like the main one's."""
    me = staging.rank
    for r in range(staging.size):
        memops.write(stream, staging.addr(r, layout.abort), me + 1)
    for held in (staging, *also):
        release(held, stream)


def release(staging, stream: int) -> None:
    """Overwrite every flag this rank's waits poll in ``staging`` (its layout's
    ``release_ranges``) with a value no wait can exceed; enqueued on ``stream``."""
    import cupy

    for offset, nbytes in staging.layout.release_ranges():
        cupy.cuda.runtime.memsetAsync(staging.addr(staging.rank, offset), RELEASE_BYTE, nbytes, stream)


# The engine's diagnosis of a stalled call from this rank's flags, as its FlagReader decoded
# them (the ring's: (full, free)): the watchdog reads the flags, the layer that wrote the
# schedule (mpiring.ring.stall, mpiring.ring.alltoall_engine) knows what they mean.
Diagnose = Callable[[Hashable], MpiringError]
FLAG_BYTES = 64 * 8  # the most flag bytes a reader may ask for (the pinned copy's size)


@dataclass(frozen=True)
class FlagReader:
    """Which flags show a call's progress: the first ``nbytes`` of this rank's ``staging``
    (at most :data:`FLAG_BYTES`), as ``decode(words)`` makes of their 64-bit words: a value
    compared between looks (a change is progress) and handed to the call's diagnosis."""

    staging: Any
    nbytes: int
    decode: Callable[[np.ndarray], Hashable]


@dataclass
class _Call:
    start: int  # event recorded on the caller's stream before the call
    end: int  # ... and after it
    # What the call's flags say of where it is stuck -> the error; None: a call of the
    # event-signalled ring (no flags to diagnose).
    diagnose: Diagnose | None
    base: int  # sequence number of its first transfer
    progress: Callable[[], Hashable] | None = None  # the event ring's: what it sees move instead
    reader: FlagReader | None = None  # the flags to read (None with diagnose: the ring's)
    algorithm: str = "ring"  # the row, for the error when the flags cannot be read
    clock: ProgressClock | None = None  # from when the watchdog first saw it running


class Watchdog:
    """Follows this rank's ring calls; aborts the communicator when one goes the timeout
    without progress (module docstring)."""

    def __init__(self, device_id: int, staging, memops: StreamMemOps, timeout: float,
                 names: Sequence[int] | None = None) -> None:
        import cupy

        self._rt = rt = cupy.cuda.runtime
        self.device_id = device_id
        self.staging, self.layout, self.memops = staging, staging.layout, memops
        self.rank, self.timeout = staging.rank, timeout  # rank: this rank's place in the staging
        # The communicator rank of each place, for errors (the staging spans one node).
        self.names = list(names) if names is not None else list(range(staging.size))
        self.me = self.names[self.rank]
        # The error, set once by the watchdog thread (the ``error`` property); the word is 1 from
        # then on: what the compiled replay reads (mpiring.call.hot_replay; ``failed_address``).
        self._error: MpiringError | None = None
        self._failed_word = array("q", [0])
        self._rescue = cupy.cuda.Stream(non_blocking=True)  # never blocked by the ring's streams
        LIVE["streams"] += 1
        # A copy of control words [0, 512), in pinned memory: the copy into it is asynchronous,
        # so a read whose stream is blocked cannot block this thread (it is bounded below).
        self._flags_ptr = rt.hostAlloc(FLAG_BYTES, 0)
        LIVE["host_status"] += 1  # (pinned host blocks)
        words = ctypes.c_int64 * (FLAG_BYTES // 8)
        self._flags = np.ctypeslib.as_array(words.from_address(self._flags_ptr))
        lay = self.layout
        # The ring's flags: (full[0], full[1]), (free[0], free[1]) of this rank's staging.
        self._ring_reader = FlagReader(staging, FLAG_BYTES, lambda w: (
            (int(w[lay.ring_full(0) // 8]), int(w[lay.ring_full(1) // 8])),
            (int(w[lay.ring_free(0) // 8]), int(w[lay.ring_free(1) // 8]))))
        self.retired = 0  # ring calls finished so far: progress, for a drain that waits on them
        self._free: list[tuple[int, int]] = []
        for _ in range(DEPTH):
            pair = (rt.eventCreateWithFlags(rt.eventDisableTiming),
                    rt.eventCreateWithFlags(rt.eventDisableTiming))
            self._free.append(pair)
            LIVE["events"] += 2
        self._pending: deque[_Call] = deque()
        self._also: list = []  # further stagings an abort releases (also_release)
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=f"mpiring-watchdog-{self.rank}",
                                        daemon=True)
        self._thread.start()
        LIVE["watchdogs"] += 1

    # -- the caller's side ---------------------------------------------------------------

    def events(self) -> tuple[int, int]:
        """A (start, end) event pair for the next ring call; waits while DEPTH calls are in
        flight (they finish, or this watchdog releases them once one goes the timeout without
        progress)."""
        with self._cond:
            while not self._free:
                if not self._thread.is_alive():
                    raise self.error or MpiringError(f"rank {self.rank}: the watchdog stopped")
                self._cond.wait(POLL)
            return self._free.pop()

    def watch(self, events: tuple[int, int], base: int, diagnose: Diagnose | None,
              progress: Callable[[], Hashable] | None = None, reader: FlagReader | None = None,
              algorithm: str = "ring") -> None:
        """Follow a call whose start and end events were recorded around it; ``base`` is the
        sequence number of its first transfer (or round). ``diagnose(flags)``: the error of the
        call stuck with this rank's flags at those values, as ``reader`` decodes them (default:
        the ring's flags of the communicator's staging, decoded as ``(full, free)``; ``algorithm``
        names the row in the error where the flags cannot be read). A call of
        the event ring (``diagnose`` None) has no flags: ``progress()``, if given, is what
        moves as it does (read from this thread)."""
        if reader is not None and not 0 < reader.nbytes <= FLAG_BYTES:
            raise ValueError(f"a flag reader may read 1 to {FLAG_BYTES} bytes, not {reader.nbytes}")
        with self._cond:
            idle = not self._pending
            self._pending.append(_Call(events[0], events[1], diagnose, base, progress, reader, algorithm))
            if idle:  # the thread sleeps on the condition only while nothing is pending: waking
                self._cond.notify_all()  # it per call costs the caller GIL hand-offs

    def also_release(self, staging) -> None:
        """Release ``staging``'s flags too when this watchdog aborts the communicator: a row with
        a staging of its own (e.g. ce-twoshot's, made at its first call) whose waits are stream
        memory operations, which only a release can end once a peer is gone."""
        with self._cond:
            self._also.append(staging)

    def give_back(self, events: tuple[int, int]) -> None:
        """Return a pair from :meth:`events` that no call recorded after all."""
        with self._cond:
            self._free.append(events)
            self._cond.notify_all()

    def idle(self) -> bool:
        """Whether no ring call is in flight (finished ones may wait for the thread's next look)."""
        with self._cond:
            return all(self._rt.eventQuery(call.end) != NOT_READY for call in self._pending)

    def close(self, drained: bool = True) -> None:
        """Stop the thread. ``drained``: no call is in flight any more (the caller waited), so
        the events go too; otherwise the GPU may still record them, and they stay."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()
        LIVE["watchdogs"] -= 1
        if not drained:
            return
        self._rescue.synchronize()
        self._flags = None
        self._rt.freeHost(self._flags_ptr)
        LIVE["host_status"] -= 1
        with self._cond:
            pairs = self._free + [(call.start, call.end) for call in self._pending]
            self._free, self._pending = [], deque()
        for start, end in pairs:
            self._rt.eventDestroy(start)
            self._rt.eventDestroy(end)
            LIVE["events"] -= 2
        self._rescue = None
        LIVE["streams"] -= 1

    @property
    def error(self) -> MpiringError | None:
        """The failure this watchdog found (a ring call past the timeout), or None."""
        return self._error

    @error.setter
    def error(self, err: MpiringError | None) -> None:
        self._error = err
        self._failed_word[0] = int(err is not None)  # after the error: a reader of 1 finds it

    @property
    def failed_address(self) -> int:
        """The address of an int64 word that is nonzero once :attr:`error` is set (valid as long
        as this watchdog lives)."""
        return self._failed_word.buffer_info()[0]

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._follow()
        except Exception as err:  # never die silently: callers wait on this thread's verdicts
            self.error = self.error or MpiringError(f"rank {self.rank}: the watchdog failed: {err!r}")
            log.exception("rank %d: watchdog failed", self.rank)

    def _follow(self) -> None:
        self._rt.setDevice(self.device_id)  # the CUDA device is per thread
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if self._stopping:  # close() waited for the calls first, or gave up on them
                    return
                call = self._pending[0]
            state = self._rt.eventQuery(call.end)
            if state != NOT_READY:
                if state != 0 and self.error is None:
                    self.error = MpiringError(f"rank {self.rank}: the GPU failed during a ring call "
                                              f"(CUDA error {state})")
                with self._cond:
                    self._pending.popleft()
                    self._free.append((call.start, call.end))
                    self.retired += 1
                    self._cond.notify_all()
                continue
            now = time.monotonic()
            if call.clock is None:
                if self._rt.eventQuery(call.start) != NOT_READY:
                    call.clock = ProgressClock(self.timeout, now, SAMPLES)  # it runs: the clock starts
            elif self.error is None and call.clock.due(now):
                flags = self._read(call)
                # Fire only on a look that saw nothing new once the timeout is up.
                if not call.clock.saw(flags, time.monotonic()) and call.clock.expired(now):
                    self._fire(call, flags)
            time.sleep(POLL)

    def _read(self, call: _Call) -> Hashable | None:
        """What the call shows of its progress now: this rank's ring flags (written by its
        peers as the call moves); for the event ring, its ``progress()``. None: nothing to see,
        or a read of the flags that did not complete within a second."""
        if call.diagnose is None:
            return None if call.progress is None else call.progress()
        rt, reader = self._rt, call.reader or self._ring_reader
        staging = reader.staging
        rt.memcpyAsync(self._flags_ptr, staging.addr(staging.rank, 0), reader.nbytes,
                       rt.memcpyDeviceToHost, self._rescue.ptr)
        # The rescue stream never waits on a flag, but may share a hardware queue with one that
        # does (more streams than CUDA_DEVICE_MAX_CONNECTIONS): so the read is bounded too.
        deadline = time.monotonic() + 1.0
        while rt.streamQuery(self._rescue.ptr) == NOT_READY and time.monotonic() < deadline:
            time.sleep(POLL / 5)
        if rt.streamQuery(self._rescue.ptr) != 0:
            return None
        return reader.decode(self._flags[:reader.nbytes // 8])

    def _fire(self, call: _Call, flags: Hashable | None) -> None:
        """The call went the timeout without progress: name the late peer from ``flags`` (what
        :meth:`_read` just saw), then abort."""
        lay = self.layout
        if call.diagnose is None:  # the event ring: its GPU waits are on events, not on our flags
            self.error = MpiringTimeoutError(
                self.me, self.timeout, "the event-signalled ring call to finish on the GPU (a "
                "peer's copy or fold never completed)", hint=ABORT_HINT,
            ).locate("in the ring-events algorithm", algorithm="ring-events", seq=call.base)
            abort(self.staging, lay, self.memops, self._rescue.ptr, self._also)
            return
        if flags is not None:
            self.error = call.diagnose(flags)
        else:
            self.error = MpiringTimeoutError(
                self.me, self.timeout, f"the {call.algorithm} call to finish on the GPU (this rank's "
                "flags could not be read: its GPU queues are blocked)", hint=ABORT_HINT,
            ).locate(f"in the {call.algorithm} algorithm", algorithm=call.algorithm, seq=call.base)
        log.debug("rank %d: %s", self.rank, self.error)
        abort(self.staging, lay, self.memops, self._rescue.ptr, self._also)
