"""``mpiring.Communicator``: the public API, in mpi4py's idiom.

A communicator finds its ranks' nodes (``mpiring.node.groups``), allocates its staging memory once
per node (the control board in node shared memory, and a GPU backend when there are GPUs),
and then runs ``Allreduce``, ``Reduce_scatter_block`` and ``Allgather`` on host or GPU arrays
with the algorithm asked for: a row of the table in ``mpiring.algorithms``.

One call, in order: describe and check the buffers, resolve the algorithm (``auto`` -> a row;
``mpiring.call.dispatch``); the agreement check (every rank learns whether any rank rejected its
call or disagrees); the row's entry for the collective, on the backend of the buffers' memory.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import warnings
from typing import Any, NamedTuple, cast

import numpy as np
from mpi4py import MPI

from . import algorithms
from .algorithms import Collective, SmWork
from .auto import tuning as auto_tuning
from .auto.table import TuningTable
from .call.agreement import FIELDS
from .call.dispatch import Dispatcher, Key, Replay
from .call.hot_replay import FALLBACK, REPLAYED, CallWords, HotPath, Replayer, new_lock
from .call.options import Options, check_comm, empty_like
from .call.persistent import PersistentAllreduce, StartHooks
from .call.replay import CallKeys, replay_for
from .context.rails import INTERS
from .core.buffers import Memory
from .core.consensus import REJECTED
from .core.errors import (
    CommunicatorClosedError,
    ConcurrentCallError,
    InvalidArgumentError,
    MpiringError,
    SetupError,
    UnavailableError,
)
from .core.topology import Topology
from .cuda.launcher import BoundLaunch
from .cuda.streams import torch_stream
from .lifetime import Resources
from .node.control import ControlBoard
from .node.groups import Groups, duplicate, make_groups
from .node.setup_steps import settling
from .node.signals import Watch
from .ring.alltoall_tracing import TraceHook
from .ring.pipeline import RingPipeline

log = logging.getLogger(__name__)
_ALLREDUCE = Collective.ALLREDUCE  # (a module global: read per call)


class CallStats(NamedTuple):
    """What this rank's calls on a communicator did so far (:meth:`Communicator.stats`): how
    many took the full path and how many were replayed, and how the agreement check ran them.
    A snapshot of counters the calls keep anyway (a replayed call adds one increment), for a
    program or a test that wants to see that its steady state replays, or to number its calls
    as the check's errors do."""

    planned: int
    """Calls that took the full path: described, checked and planned afresh
    (:mod:`mpiring.call.dispatch`), those rejected there included."""
    replayed: int
    """Calls that replayed a launch bound at an earlier call of their shape
    (:mod:`mpiring.call.replay`)."""
    checked: int
    """Calls this rank entered into the agreement check, on the host or posted for the GPU: the
    next call is call ``checked + 1`` in the check's errors ("agreement check of call N").
    0 with ``check=False`` and on one rank (no one to disagree with)."""
    check_in_board: bool
    """Whether the agreement check compares the ranks' calls in the node's control board (one
    node: shared memory, no MPI message), else with one small nonblocking MPI allreduce per call
    (several nodes). Where checked calls would be compared, also with ``check=False``."""

    @property
    def calls(self) -> int:
        """Calls that reached this rank's full path or a replay: ``planned + replayed``."""
        return self.planned + self.replayed


class Communicator:
    """Allreduce (and ``Reduce_scatter_block``, ``Allgather``) over the ranks of ``comm``, on one
    node or many, one GPU per rank.

    Args:
        comm: the MPI communicator whose ranks take part (default ``MPI.COMM_WORLD``);
            it is duplicated, so mpiring's messages never mix with the caller's. Ranks on one
            node share memory (CUDA IPC, MPI shared memory); nodes meet through ``inter``.
        gpu: True to require the GPU path, False for host arrays only, None (default) to use
            GPUs when CuPy finds them.
        device: the GPU of this rank; default: the GPU of this process's first communicator,
            else its rank among the node's ranks.
        algorithm: default algorithm: ``"auto"`` (per message size, from the tuning table;
            ``MPIRING_ALGO`` overrides its choice) or any name of ``mpiring.algorithms.names()``
            (``"ring"``, ``"ring-events"``, ``"oneshot"``, ``"twoshot"``, ``"nccl"``,
            ``"nccl-ring"``, ``"mpi"``).
        batches: mini-batches per call; None picks one by message size.
        slot_bytes: bytes per receive slot (two per rank), at most 4 GiB; bounds staging memory.
        check: the cross-rank agreement check of every call: ``"gpu"`` or True (the default):
            the kernels of oneshot, twoshot and oneshot-ll compare their peers' call on the GPU,
            with no host wait (a difference skips the call on every rank, and is raised by
            :meth:`synchronize` or by a later call, once that call is enqueued); every other
            row's calls are checked on the host before anything is enqueued. ``"host"``: every
            call on the host (a debugging aid: errors at the very call). False: off, and a
            rank that calls differently makes its peers wait until the timeout.
            ``MPIRING_CHECK`` (``gpu``, ``host``, ``1``, ``0``) sets the default.
        timeout: seconds any wait for a peer may go without progress, on the host or the GPU
            (default ``MPIRING_TIMEOUT`` or 300): a call that keeps moving never times out
            (:mod:`mpiring.node.timeouts`); GPU failures surface in :meth:`synchronize` or the next call.
        inter: the engine between nodes for GPU arrays: ``"nccl"``, ``"mpi"`` (a CUDA-aware MPI)
            or ``"auto"`` (default: NCCL where it is installed); host arrays always use MPI.
        sm_budget: the most SMs mpiring's own kernels hold at once per GPU (default
            ``MPIRING_SM_BUDGET``, else none; NCCL's are not bounded); the compute beside them
            should leave those SMs free (torch: ``torch._C._set_sm_carveout_experimental``).
            auto prefers a table tuned under it (``mpiring-tune --sm-budget N``). Equal on every rank.
        overlap: True when calls run beside compute: ``auto`` picks per size the smallest
            makespan beside a GEMM (the tuning table's ``overlap`` entries: ``mpiring-tune
            --overlap``), not the fastest alone; without entries, as usual.
        reproducible: True: every element of an allreduce's or ``Reduce_scatter_block``'s
            result is the ranks' values reduced in rank order, accumulated in float32 for
            2-byte floats and rounded once (:func:`mpiring.core.reproducible.reference`), whatever
            the size, placement, chunking or row: ``auto`` picks among the rows that reduce so
            (oneshot, twoshot, oneshot-ll on GPUs; mpi-twoshot on the host) and the others
            refuse by name. Default ``MPIRING_REPRODUCIBLE`` (off). Equal on every rank.
        replay: True (default): an eager GPU call of a shape seen before replays the launch
            bound at its first call (:mod:`mpiring.call.replay`; same result, less host time).
            False: every call takes the full path (a measurement aid, e.g. ``tools/enqueue.py``).
    """

    def __init__(self, comm: MPI.Intracomm | None = None, *, gpu: bool | None = None,
                 device: int | None = None, algorithm: str = "auto", batches: int | None = None,
                 slot_bytes: int | None = None, check: bool | str | None = None,
                 timeout: float | None = None, inter: str = "auto", sm_budget: int | None = None,
                 overlap: bool = False, reproducible: bool | None = None, replay: bool = True) -> None:
        self._closed = True  # until set-up completes
        self._failed: str | None = None
        self._planned = 0  # calls of the full path (stats()); replayed calls: self._words.replayed
        # Words every replay reads (refusing: failed or closed, kept with _failed and _closed) or
        # counts (replayed): the compiled replays hold their addresses (mpiring.call.hot_replay).
        self._words = CallWords()
        self._hot: HotPath | None = None  # the compiled replay's maker, once set up (if it can)
        # Its CallTable: a call's key, plan lookup and replay in one C call (Allreduce's first step).
        self._calls: Any = None
        # MPI forbids concurrent calls on one communicator: every call, close() and synchronize()
        # holds this lock, taken without waiting (a second thread gets ConcurrentCallError).
        self._lock = new_lock()  # (CallLock where the compiled replay can run: its table takes it in C)
        self._watch = Watch()
        base = MPI.COMM_WORLD if comm is None else comm
        check_comm(base)  # every rank holds the same kind of handle: all raise, before any collective
        rejected: InvalidArgumentError | None = None
        try:  # a rank that rejects its arguments still joins set-up: its peers then raise at once
            opts = Options.resolve(algorithm, batches, check, timeout, slot_bytes, sm_budget, overlap,
                                   reproducible, replay)
            if inter not in INTERS:
                raise InvalidArgumentError(f"inter={inter!r}: choose one of {', '.join(map(repr, INTERS))}")
            given = auto_tuning.explicit()  # MPIRING_TUNING_FILE, read and checked now
        except InvalidArgumentError as err:
            opts, rejected, given = Options.fallback(), err, None
        self.algorithm, self.batches, self._check = opts.algorithm, opts.batches, opts.check
        self.check_mode, self.overlap, self.reproducible = opts.check_mode, opts.overlap, opts.reproducible
        self.timeouts = opts.timeouts
        settings = {**opts.setup_values(inter), REJECTED: str(rejected or "")}
        self.comm = duplicate(base, self.timeout)  # bounded: names the ranks that never arrive, then dups
        self.rank, self.size = self.comm.rank, self.comm.size
        self.groups: Groups | None = None
        self._held = Resources(self.comm, self.timeouts, self._watch, self._fail)
        try:
            with settling(self.comm, self.timeout) as steps:  # ends with every rank's go-ahead, or none
                self.groups = groups = make_groups(self.comm, steps, settings)  # SetupError if they differ
                host = self._held.set_up(groups, gpu, device, opts, inter, steps)
                gpu_context = self._held.gpu  # which table auto uses depends on its NVLink:
                buses = gpu_context.node_buses if gpu_context is not None else None
                self._tuning = auto_tuning.settle(self.comm, groups.topology, buses, given, steps,
                                                  opts.sm_budget)
                self._dispatch = Dispatcher(self.algorithm, self.batches, opts.forced,
                                            self._tuning.table, groups.topology, host, self._held.gpu,
                                            opts.overlap, opts.reproducible)
                hooks = None if self._held.gpu is None else self._held.gpu.replay_hooks()
                self._hot = HotPath.make(self._words, hooks, self._held.board, self._held.check)
                self._replayer = Replayer(self._words, self._usable, self._fail, self._held.check)
                if self._hot is not None:
                    self._calls = self._hot.call_table(self._lock, self._replayer.finish,
                                                       self._held.call_keys, self._dispatch)
        except BaseException as err:  # release what was made
            self._failed = f"set-up failed: {type(err).__name__}: {err}"
            # A SetupError is raised on every rank alike: they meet to free the host board. After
            # anything else peers may not have failed (or be gone): nothing waits for them.
            with contextlib.suppress(MpiringError):  # the set-up error is the one to report
                self._held.release(self.groups, True, peers_failed_too=isinstance(err, SetupError))
            if rejected is not None:  # this rank's own error says more than the set-up error
                raise rejected from None
            raise
        self._closed = False
        self._words.accept()
        log.debug("rank %d: communicator of %d ranks, gpu=%s, compiled replay %s", self.rank, self.size,
                  self.gpu, "on" if self._hot is not None else "off")

    @property
    def timeout(self) -> float:
        """Seconds any wait for a peer may go without progress (:class:`TimeoutPolicy`)."""
        return self.timeouts.seconds

    @property
    def topology(self) -> Topology:
        """Where the ranks are: nodes, places, rails (:class:`mpiring.core.topology.Topology`)."""
        return self._dispatch.topology

    @property
    def tuning(self) -> auto_tuning.Choice:
        """The table auto uses here, its machine key and origin; ``.describe()``: in one line."""
        return self._tuning

    @property
    def tuning_table(self) -> TuningTable:
        """The tuning table auto's choices read on this communicator's calls, as the call path
        holds it: the same object as ``tuning.table`` (:attr:`tuning` says where it came from;
        an empty table: the built-in rule)."""
        return self._dispatch.tuning

    # -- failure state -----------------------------------------------------------------

    def _fail(self, err: BaseException) -> None:
        """Refuse further use, and tell the peers (the control board; other nodes: a notice) so
        they stop at once too."""
        self._failed = f"{type(err).__name__}: {err}"
        self._words.refuse()
        if self._held.board is not None and not self._closed:
            self._held.board.mark_failed(self._failed, cause=err)

    def _usable(self) -> None:
        if self._failed:
            raise CommunicatorClosedError(f"this communicator failed earlier ({self._failed}) and "
                                          "refuses further use: close it and create a new one")
        if self._closed:
            raise CommunicatorClosedError("this communicator is closed")
        gpu_error = self._held.gpu.failure() if self._held.gpu is not None else None
        if gpu_error is not None:  # found by the watchdog or a kernel since the last call
            self._fail(gpu_error)
            raise gpu_error
        err = cast(ControlBoard, self._held.board).peer_error(self.rank)
        if err is not None:
            self._fail(err)
            raise err

    def synchronize(self) -> None:
        """Wait until this rank's GPU calls on this communicator have finished; raise if one failed.

        GPU calls return once enqueued. A failure they meet later (a peer that does not answer
        within the timeout, or an abort by a peer) is raised here, or by the next call. Host
        calls complete before they return: then this only checks for failures."""
        if not self._lock.acquire(False):
            raise self._busy("synchronize()")
        try:
            self._usable()
            if self._held.gpu is not None:
                try:
                    self._held.gpu.synchronize()
                except MpiringError as err:
                    self._fail(err)
                    raise
            self._usable()
            self._held.check.after()
        finally:
            self._lock.release()

    def _busy(self, what: str) -> ConcurrentCallError:
        return ConcurrentCallError(
            f"rank {getattr(self, 'rank', '?')}: {what} was called while another call on this "
            "communicator is in progress (in another thread): MPI forbids concurrent calls on one "
            "communicator; use one communicator per thread, or serialize the calls")

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def check(self) -> bool:
        """Whether calls run the agreement check (``check=``; its mode, ``check_mode``, stays).
        Settable, to the same value on every rank, between calls. A change drops the kept plans
        of call shapes: a replay carries the check (its post, or the host check), or none, as it
        was bound (:mod:`mpiring.call.replay`), so a replay bound with the check off would skip it."""
        return self._check

    @check.setter
    def check(self, on: bool) -> None:
        if not self._lock.acquire(False):
            raise self._busy("the check setter")
        try:
            if bool(on) != self._check:
                self._dispatch.clear()
            self._check = bool(on)
        finally:
            self._lock.release()

    @property
    def compiled_replay(self) -> bool:
        """Whether this communicator's replays run compiled (:mod:`mpiring.call.hot_replay`: the
        extension is built, ``MPIRING_HOTPATH`` is not 0, GPUs on one node); else in Python.
        The same results, counts and errors either way."""
        return self._hot is not None

    @property
    def replays_kept(self) -> int:
        """Call shapes whose launch this communicator keeps bound for replay (:mod:`mpiring.call.replay`):
        0 on host arrays and with ``replay=False``."""
        return self._dispatch.replays_kept()

    def bound_launches(self) -> list[BoundLaunch]:
        """The launches its kept replays make (Dispatcher.bound_launches), for tools timing them alone."""
        return self._dispatch.bound_launches()

    @property
    def call_keys(self) -> CallKeys:
        """How this communicator keys a call's shape off its arrays for the eager replay
        (:class:`mpiring.call.replay.CallKeys`). Its ``array_type`` is the array type whose calls
        get a key (CuPy's on GPUs, None on host arrays, whose calls never replay): a test may set
        a stand-in type there to replay host calls of a toy row with a ``bind`` entry."""
        return self._held.call_keys

    def stats(self) -> CallStats:
        """This rank's counts of its calls so far (:class:`CallStats`): planned, replayed,
        agreement-checked. Cheap (no collective, no lock: the calls keep these counters
        anyway); also on a closed communicator."""
        agreement = self._held.check.agreement
        return CallStats(self._planned, self._words.replayed[0], agreement.calls, agreement.posts)

    @property
    def last_stream(self) -> Any:
        """The CuPy stream this rank's latest GPU call was enqueued on (a torch tensor's: torch's
        current stream, as CuPy sees it), or None before the first one and without GPUs. A later
        call on another stream first waits for it: mpiring's calls never overlap."""
        return None if self._held.gpu is None else self._held.gpu.last_stream

    @property
    def gpu(self) -> bool:
        """Whether this communicator reduces GPU arrays."""
        return self._held.gpu is not None

    @property
    def sm_budget(self) -> int | None:
        """The most SMs this rank's mpiring kernels hold at once (at most the GPU's), or None."""
        return None if self._held.gpu is None else self._held.gpu.sm_budget

    @property
    def device(self) -> int | None:
        """The CUDA device of this rank, or None without GPUs."""
        return None if self._held.gpu is None else self._held.gpu.device_id

    # -- the collectives ---------------------------------------------------------------

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM, *,
                  algorithm: str | None = None, batches: int | None = None) -> None:
        """Reduce ``sendbuf`` over all ranks into ``recvbuf`` (mpi4py's ``Comm.Allreduce``).

        ``sendbuf`` may be ``MPI.IN_PLACE`` or None (reduce ``recvbuf`` in place), or the very
        same array as ``recvbuf``. GPU work is ordered after what the caller queued on the
        current stream (CuPy's; for torch tensors ``torch.cuda.current_stream()``), and later
        work there sees the result. ``op`` is ``MPI.SUM``, ``MPI.PROD``, ``MPI.MAX``,
        ``MPI.MIN`` or ``"avg"`` (floating types: the sum divided by the number of ranks).
        """
        # A shape seen before, compiled: key, lookup and replay in one C call (mpiring.call.hot_replay);
        # None: nothing done, and _collective runs the call.
        calls = self._calls
        if calls is None or calls.run(_ALLREDUCE, sendbuf, recvbuf, op, algorithm, batches) is None:
            self._collective(_ALLREDUCE, sendbuf, recvbuf, op, algorithm, batches)

    def Allreduce_init(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM, *, algorithm: str | None = None,
                       batches: int | None = None) -> PersistentAllreduce:
        """A persistent allreduce (mpi4py's ``Comm.Allreduce_init``): each ``Start()`` runs
        ``Allreduce(sendbuf, recvbuf, op, algorithm=..., batches=...)``, with less host time per
        call where it replays (:mod:`mpiring.call.persistent`). Local: the calls are checked
        against the peers' at each Start, as ``Allreduce``'s are. It holds the arrays until ``Free()``."""
        hooks = StartHooks(self._collective, self._lock, self._replayer.finish, self._busy, self._dispatch)
        return PersistentAllreduce(hooks, (_ALLREDUCE, sendbuf, recvbuf, op, algorithm, batches))

    def Reduce_scatter_block(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM, *,
                             algorithm: str | None = None, batches: int | None = None) -> None:
        """Reduce ``sendbuf`` (``size * m`` elements) over all ranks; rank ``r`` receives block
        ``r`` (``m`` elements) in ``recvbuf`` (mpi4py's ``Comm.Reduce_scatter_block``). With
        ``MPI.IN_PLACE``, ``recvbuf`` holds the ``size * m`` inputs and gets the result in its
        first ``m`` elements (the rest is left undefined)."""
        self._collective(Collective.REDUCE_SCATTER, sendbuf, recvbuf, op, algorithm, batches)

    def Allgather(self, sendbuf: Any, recvbuf: Any, *, algorithm: str | None = None,
                  batches: int | None = None) -> None:
        """Gather every rank's ``sendbuf`` (``m`` elements) into every rank's ``recvbuf``
        (``size * m``, in rank order; mpi4py's ``Comm.Allgather``). With ``MPI.IN_PLACE``,
        rank ``r``'s input is block ``r`` of its ``recvbuf``."""
        self._collective(Collective.ALLGATHER, sendbuf, recvbuf, MPI.SUM, algorithm, batches)

    def _collective(self, collective: Collective, sendbuf: Any, recvbuf: Any, op: Any,
                    algorithm: str | None, batches: int | None) -> Replay | None:
        """Run one call; answer the replay later calls of its shape may run (None: none, or a
        torch tensor's, which must read torch's stream first: a persistent request's Start)."""
        if not self._lock.acquire(False):
            raise self._busy(collective.label)
        try:
            keys = self._held.call_keys
            key = keys.key(collective, sendbuf, recvbuf, op, algorithm, batches)
            plan = self._dispatch.planned(key)  # the one cache of a shape's decisions
            replay = None if plan is None else plan.replay
            # A torch tensor: order the call on torch's current stream (mpiring.cuda.streams).
            stream = (torch_stream(recvbuf) if self._held.gpu is not None
                      and type(recvbuf) is not keys.array_type else None)
            if stream is not None:
                with stream:
                    if replay is None or not self._replayer.replay(replay):
                        self._run(collective, sendbuf, recvbuf, op, algorithm, batches, key)
                return None
            if replay is not None:  # a shape seen before (mpiring.call.replay)
                calls = self._calls
                if replay.hot is not None and calls is not None:  # later calls: all in Allreduce's C call
                    calls.learn(collective, sendbuf, recvbuf, op, algorithm, batches, replay, replay.hot)
                # Replayer.replay, inlined: the compiled replay, with no Python call on its way
                outcome = replay.hot.run() if replay.hot is not None else FALLBACK
                if outcome == REPLAYED or self._replayer.finish(replay, outcome):
                    return replay
            return self._run(collective, sendbuf, recvbuf, op, algorithm, batches, key)
        finally:
            self._lock.release()

    def _run(self, collective: Collective, sendbuf: Any, recvbuf: Any, op: Any,
             algorithm: str | None, batches: int | None, key: Key | None = None) -> Replay | None:
        self._usable()
        rejected: Exception | None = None
        values = dict.fromkeys(FIELDS, 0)
        self._planned += 1
        try:
            prepared = self._dispatch.prepare(collective, sendbuf, recvbuf, op, algorithm, batches, key)
            values.update(prepared.values)
        except Exception as err:  # any local failure must reach the peers, or they hang
            rejected = err
        gpu_check = rejected is None and prepared.row.gpu_check
        checked = self.check and self.size > 1  # one rank has no one to disagree with
        if checked:
            self._held.check.before(rejected is not None, values, gpu_check)
        if rejected is not None:
            raise rejected
        call = prepared.call
        if call.recv.count == 0 and not gpu_check:  # (a GPU-checked call of 0 elements
            return None  # still meets its peers, who may have been passed more)
        try:
            prepared.run(prepared.backend, call)
        except BaseException as err:  # mid-collective: peers' sequence numbers no longer match
            self._fail(err)
            raise
        plan = prepared.plan
        if key is not None and plan is not None and plan.replay is None:  # later calls may replay it
            host_checked = checked and not self._held.check.posts(gpu_check)
            plan.replay = replay_for(collective, prepared, checked, host_checked, self._hot)  # call.replay
        self._held.check.after()  # after this call is enqueued: what the GPU check found earlier
        return None if key is None or plan is None else plan.replay

    def allreduce(self, x: Any, op: Any = MPI.SUM, *, algorithm: str | None = None,
                  batches: int | None = None) -> Any:
        """Return a new array holding the reduction of ``x`` over all ranks (like ``comm.allreduce``)."""
        if not self._lock.acquire(False):
            raise self._busy("allreduce")
        try:
            self._usable()
            try:
                out = empty_like(x)
            except Exception:
                if self.check and self.size > 1:  # reject on every rank, as Allreduce does
                    self._held.check.reject()
                raise
            self._run(Collective.ALLREDUCE, x, out, op, algorithm, batches)
            return out
        finally:
            self._lock.release()

    # -- which algorithm -----------------------------------------------------------------

    def resolve(self, count: int, dtype: Any, algorithm: str | None = None, *,
                gpu: bool | None = None, collective: Collective = Collective.ALLREDUCE) -> str:
        """The algorithm a call of ``count`` elements (the whole vector) of ``dtype`` runs:
        ``algorithm`` (default: the communicator's), with ``"auto"`` replaced by its choice."""
        memory = Memory.CUDA if (self.gpu if gpu is None else gpu) else Memory.HOST
        return self._dispatch.row(int(count) * np.dtype(dtype).itemsize, memory, algorithm, collective).name

    def max_bytes(self, algorithm: str, *, gpu: bool | None = None) -> int | None:
        """The largest message ``algorithm`` takes on this communicator's GPU (or host) arrays,
        in bytes (e.g. oneshot's slot on this rank count, oneshot-ll's share of its slots); None:
        no limit, as for ``"auto"``, which picks a row that takes the message."""
        memory = Memory.CUDA if (self.gpu if gpu is None else gpu) else Memory.HOST
        name = algorithms.check_name(algorithm)
        if name == algorithms.AUTO:
            return None
        return algorithms.get(name).max_bytes(self._dispatch.backend(memory))

    def ring_pipeline(self, *, gpu: bool | None = None, events: bool = False) -> RingPipeline:
        """The pipeline that runs this communicator's ring calls on GPU (default where it has
        GPUs) or host arrays: ``next_seq`` counts its transfers, and its ``transport`` is the
        hook that :func:`mpiring.trace.ring_timeline` (and tests) wrap and put back.

        ``events=True``: the event-signalled ring's (``ring-events``; GPU arrays only), which
        that row's first call makes (collectively): before it, :class:`UnavailableError`."""
        on_gpu = self.gpu if gpu is None else gpu
        backend = self._dispatch.backend(Memory.CUDA if on_gpu else Memory.HOST)
        if events:
            if not on_gpu or self._held.gpu is None:
                raise InvalidArgumentError("events=True: ring-events runs on GPU arrays only")
            ring = self._held.gpu.event_ring
            if ring is None:
                raise UnavailableError("ring-events has not run on this communicator yet: its first "
                                       "call makes its pipeline, on every rank")
            return ring
        pipeline = getattr(backend, "pipeline", None)
        assert isinstance(pipeline, RingPipeline), type(backend).__name__  # every backend has one
        return pipeline

    def ce_twoshot_hook(self) -> TraceHook:
        """Where this rank's ``ce-twoshot`` calls look for a tracer: the hook that
        :func:`mpiring.trace.alltoall_timeline` (and tests) set and put back
        (:class:`mpiring.ring.alltoall_tracing.TraceHook`). Per rank, not collective: it makes
        nothing of the row (its first call makes its staging). Raises
        :class:`UnavailableError` without GPUs (``gpu=False``, or closed): GPU arrays only."""
        if self._held.gpu is None:
            raise UnavailableError("this communicator has no GPUs (gpu=False, or closed): ce-twoshot "
                                   "runs on GPU arrays only")
        return algorithms.ce_twoshot.trace_hook(self._held.gpu)

    def batches_for(self, count: int, dtype: Any, *, gpu: bool | None = None,
                    algorithm: str | None = None, batches: int | None = None) -> int | None:
        """The mini-batch count (``hier``: pieces) an allreduce of ``count`` elements would run
        with (None for algorithms without them): the request or default, raised to fit the slots."""
        on_gpu = self.gpu if gpu is None else gpu
        dtype = np.dtype(dtype)
        memory = Memory.CUDA if on_gpu else Memory.HOST
        row = self._dispatch.row(int(count) * dtype.itemsize, memory, algorithm)
        if row.batches is None:
            return None
        return row.batches(self._dispatch.backend(memory), int(count), dtype, batches)

    def sm_work(self, count: int, dtype: Any, *, gpu: bool | None = None, algorithm: str | None = None,
                batches: int | None = None) -> SmWork | None:
        """What an allreduce of ``count`` elements would hold of the GPU's SMs and how much
        memory its folds would move per byte (:class:`~mpiring.algorithms.base.SmWork`), as
        ``algorithm``'s row states it (``auto``: the row it picks); None where the row states
        nothing (NCCL's and MPI's rows). Per rank, not collective."""
        on_gpu = self.gpu if gpu is None else gpu
        dtype = np.dtype(dtype)
        memory = Memory.CUDA if on_gpu else Memory.HOST
        row = self._dispatch.row(int(count) * dtype.itemsize, memory, algorithm)
        return row.state_sm_work(self._dispatch.backend(memory), int(count), dtype, batches)

    def disable_gpu_timeouts(self) -> None:
        """Testing aid: switch this rank's GPU timeouts off for good — the watchdog's verdicts
        on ring calls and the clocks of the one-shot, two-shot and oneshot-ll kernels — so that
        a peer that stops leaves this rank's GPU waiting for ever. The control run of the GPU
        fault tests uses it to show that they fail without the timeouts. Host waits keep
        :attr:`timeout`. Per rank, not collective; raises :class:`UnavailableError` without
        GPUs (``gpu=False``, or closed)."""
        if self._held.gpu is None:
            raise UnavailableError("this communicator has no GPUs (gpu=False, or closed): no GPU "
                                   "timeouts to switch off")
        self._held.gpu.disable_timeouts()

    # -- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        """Collective: wait for outstanding work, release staging memory and handles. Bounded
        by the timeout. After a failure it does not wait for peers (they may be gone): the host
        shared memory is then left to MPI_Finalize.

        Destroy every CUDA graph that captured a call of the ``nccl`` row (or ``auto`` where it
        picked it) first: closing destroys the NCCL communicator, and ``ncclCommDestroy``
        waits, unbounded, until no graph holds it."""
        if self._closed:
            return
        if not self._lock.acquire(False):
            raise self._busy("close()")
        try:
            self._closed = True
            self._words.refuse()
            self._dispatch.clear()  # the plans' replays name staging that is about to go
            self._held.release(self.groups, self._failed is not None)  # mpiring.lifetime
        finally:
            self._lock.release()

    def __del__(self) -> None:
        """Garbage-collected without close(): warn. Freeing is collective (peers may not drop
        theirs at the same point): a healthy communicator's memory and MPI handles stay until
        MPI_Finalize; a failed one is released at once (that never waits for peers)."""
        if getattr(self, "_closed", True) or sys.is_finalizing():
            return
        warnings.warn(f"{self!r} was garbage-collected without close(): its shared memory and MPI "
                      "communicators stay allocated until MPI_Finalize; close it (or use 'with')",
                      ResourceWarning, stacklevel=2)
        if self._failed is not None:
            self._closed = True
            self._words.refuse()
            with contextlib.suppress(Exception):
                self._dispatch.clear()
                self._held.release(self.groups, True)

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *_exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("failed" if self._failed else "open")
        where = f"{getattr(self, 'rank', '?')}/{getattr(self, 'size', '?')}"
        return f"<mpiring.Communicator rank {where} {state}>"
