"""From one collective call's arguments to the row of the algorithm table that runs it.

:meth:`Dispatcher.prepare` describes and checks the buffers of one call on this rank (raising
what is wrong here, before any rank moves data), resolves ``auto``, and packs the values the
agreement check compares: a :class:`Plan`, kept per call shape — the one cache of a call's
decisions, which also holds the plan's :class:`Replay` once :mod:`mpiring.call.replay` bound one
(calls on CuPy arrays and CUDA tensors, keyed off the arrays: ``key``).
:meth:`Dispatcher.row` is the resolution alone (``resolve()``).
Buffer rules, as mpi4py's (``n`` ranks, ``m`` elements per rank's block):

    Allreduce             send: c        recv: c       (in place: recv holds the input)
    Reduce_scatter_block  send: n * m    recv: m       (in place: recv holds n * m; result in recv[:m])
    Allgather             send: m        recv: n * m   (in place: block r of recv is rank r's input)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from mpi4py import MPI

from .. import algorithms
from ..algorithms import AUTO, Algorithm, Call, Collective
from ..algorithms.base import Run
from ..auto import fallbacks
from ..auto import table as auto_table
from ..core import descriptor
from ..core.buffers import Buffer, Memory, check_pair, describe
from ..core.errors import InvalidArgumentError, UnavailableError
from ..core.ops import Op, check_op_dtype, dtype_code, normalize_op
from ..cuda.launcher import BoundLaunch, StreamLaunch
from .options import check_batches

if TYPE_CHECKING:
    from ..context.base import Backend
    from ..core.topology import Topology

log = logging.getLogger(__name__)
PLAN_ENTRIES = 4096  # plans kept per communicator (one per call shape; up to about 2 KiB each
# with a bound replay): at most about 8 MiB of host memory, the table cleared when full
Key = tuple[Any, ...]  # a call's shape: CallKeys.key (read off the arrays) or described here
# One rank, GPU allreduce: up to here auto runs two-shot (one launch: 14-15 µs per eager call
# on one H200 from 1 KiB to 4 MiB, where the ring took 55-93 µs and NCCL 15-20 µs), above it
# NCCL (64 MiB: 34.7 µs, against 58.5 µs for two-shot and 61 µs for the ring).


class Replay(NamedTuple):
    """What a replayed call does (:mod:`mpiring.call.replay`)."""

    enqueue: Callable[[], None]  # the row's enqueue with every argument fixed (``Algorithm.bind``)
    line: np.ndarray | None  # what the agreement check posts (AgreementCheck.line); None: no check
    # Where a capture begun since could change the row: the backend's ``capturing`` (the full
    # path runs the call while it says True); None: a capture changes nothing.
    capturing: Callable[[], bool] | None
    # The same replay compiled (mpiring.call.hot_replay.HotReplay), or None: the Python path.
    hot: Any = None
    # Where the row checks on the host (no GPU-side check): the values the agreement check
    # compares, and the replay waits for the peers' calls as the full path does (never compiled).
    # None: the check posts ``line``, or there is no check.
    host_check: dict[str, int] | None = None


@dataclass(eq=False, slots=True)
class Plan:
    """What a call of one shape runs, decided once (see :meth:`Dispatcher.prepare`); every
    field is fixed when it is made but ``replay``, set once after its first call ran."""

    row: Algorithm
    run: Run
    backend: Backend
    values: dict[str, int]  # what the agreement check compares (never modified)
    op: Op  # what the row runs (avg: sum, then a division pass)
    in_place: bool
    ask_capture: bool  # whether a capture begun since could change the row (see Dispatcher.row)
    desc: tuple[int, int]  # ``values`` as the GPU-side check carries them (rows with gpu_check)
    replay: Replay | None = None  # the eager fast path of this shape (mpiring.call.replay)


class Prepared(NamedTuple):  # one per call: a NamedTuple is the cheapest immutable record
    call: Call
    row: Algorithm
    run: Run  # the row's entry for the collective
    backend: Backend
    values: dict[str, int]  # what the agreement check compares
    ask_capture: bool  # whether a capture begun since could change the row (see Dispatcher.row)
    plan: Plan | None  # the kept plan of this shape (None: made while capturing, not kept)


class Dispatcher:
    """Per communicator: the default algorithm and batches, ``MPIRING_ALGO``, the tuning table,
    the topology, and the backends of each kind of memory."""

    def __init__(self, algorithm: str, batches: int | None, forced: str | None,
                 tuning: auto_table.TuningTable, topology: Topology, host: Backend,
                 gpu: Backend | None, overlap: bool = False, reproducible: bool = False) -> None:
        self.algorithm, self.batches, self.forced = algorithm, batches, forced
        # Only rows that reduce in rank order (mpiring.core.reproducible): auto picks among them and
        # the others refuse by name. Allgather reduces nothing: every row serves it.
        self.reproducible = reproducible
        self.overlap = overlap  # auto reads the table's overlap entries (makespan beside compute)
        if overlap and topology.nodes == 1 and not tuning.has_overlap(topology.size):
            log.debug("overlap=True, but the tuning table has no overlap entries for %d ranks: auto "
                      "picks what is fastest alone (measure them: mpiring-tune --overlap)",
                      topology.size)
        self.tuning, self.topology, self.host, self.gpu = tuning, topology, host, gpu
        self._plans: dict[Key, Plan] = {}
        self.generation = 0  # counts the times the plans were dropped (:meth:`clear`)
        # The compiled index of the kept plans' replays (mpiring.call.hot_replay's CallTable),
        # emptied whenever the plans go; None: calls look their plans up here only.
        self.compiled: Any = None
        self._made: set[str] = set()  # lazy rows that ran outside a capture (the same on every rank)

    def backend(self, memory: Memory) -> Backend:
        if memory is Memory.HOST:
            return self.host
        if self.gpu is None:
            raise UnavailableError(
                "GPU arrays passed to a communicator created without GPUs (gpu=False, or no CuPy/GPU "
                "at set-up)"
            )
        return self.gpu

    def planned(self, key: Key | None) -> Plan | None:
        """The kept plan of the shape ``key`` (None: no key, or none kept): the fast path's lookup."""
        return None if key is None else self._plans.get(key)

    def replays_kept(self) -> int:
        """Kept plans that hold a replay."""
        return sum(plan.replay is not None for plan in self._plans.values())

    def bound_launches(self) -> list[BoundLaunch]:
        """The bound launches of the kept plans whose replay enqueues one kernel on the caller's
        stream (a :class:`~mpiring.cuda.launcher.StreamLaunch`: the one-launch rows, oneshot,
        twoshot and oneshot-ll), in the order the plans were made; [] on host arrays and with
        ``replay=False``. Read only (nothing here launches or changes): a tool times the same
        launch alone beside the replayed call (``tools.enqueue``'s "kernel alone" rows). Each
        stays valid while its plan is kept (:meth:`clear` drops them)."""
        launches = []
        for plan in self._plans.values():
            enqueue = None if plan.replay is None else plan.replay.enqueue
            if isinstance(enqueue, StreamLaunch):
                launches.append(enqueue.launch)
        return launches

    def clear(self) -> None:
        """Drop every plan (and so every replay: their launches name staging about to go), and
        the compiled index of them."""
        self._plans.clear()
        self.generation += 1  # a persistent request's replay is one of them (mpiring.call.persistent)
        if self.compiled is not None:
            self.compiled.clear()

    def prepare(self, collective: Collective, sendbuf: Any, recvbuf: Any, op: Any,
                algorithm: str | None, batches: int | None, key: Key | None = None) -> Prepared:
        """Describe and check one call on this rank: raises what is wrong with it here.

        Hot path: every check and decision below depends only on the call's shape (the
        buffers' addresses, counts, dtype, memory and read-only flag, the op, the algorithm
        and batches asked for) and on this communicator's fixed settings, so it is made once
        per shape and kept (a :class:`Plan`; bounded, keeps no reference to the buffers),
        under ``key`` (the shape read off the arrays: ``CallKeys.key``) where the call has one,
        else under the described shape. Only the buffers' descriptions are made afresh at
        every call."""
        nb = self.batches if batches is None else check_batches(batches)
        the_op = normalize_op(op)
        if algorithm is not None and type(algorithm) is not str:  # e.g. a list: not a key
            algorithm = algorithms.check_name(algorithm)
        recv = describe(recvbuf, "recvbuf")
        in_place = sendbuf is None or sendbuf is MPI.IN_PLACE
        send = recv if in_place else describe(sendbuf, "sendbuf")
        if key is None:  # tagged: never equal to a key read off the arrays (CallKeys.key)
            key = ("described", collective, the_op, nb, algorithm, algorithms.version(), recv.address,
                   recv.count, recv.dtype, recv.memory, recv.readonly,
                   None if in_place else (send.address, send.count, send.dtype, send.memory))
        plan = self._plans.get(key)
        kept: Plan | None = plan
        # A row that cannot be captured, or one auto's graph entries would replace, is asked
        # afresh whether a graph is being captured now.
        if plan is None or (plan.ask_capture and plan.backend.capturing()):
            plan = self._plan(collective, send, recv, in_place, the_op, algorithm, nb)
            # Not a plan made while capturing: auto then picks among capturable rows only, and
            # an eager call must not inherit that choice (as in row()).
            kept = None
            if not plan.backend.capturing():
                if len(self._plans) >= PLAN_ENTRIES:  # bounded: shapes vary without end in some programs
                    self.clear()
                self._plans[key] = kept = plan
                if plan.row.lazy:  # it runs now, outside a capture: its resources get made
                    self._made.add(plan.row.name)
        call = Call(None if plan.in_place else send, recv, plan.op, nb, plan.desc)
        return Prepared(call, plan.row, plan.run, plan.backend, plan.values, plan.ask_capture, kept)

    def _plan(self, collective: Collective, send: Buffer, recv: Buffer, in_place: bool, the_op: Op,
              algorithm: str | None, nb: int | None) -> Plan:
        """Every check of one call's shape on this rank, and what runs it (see :meth:`prepare`)."""
        backend = self.backend(recv.memory)
        if collective is Collective.ALLREDUCE:
            in_place = in_place or check_pair(send, recv)
        else:
            _check_blocks(collective, None if in_place else send, recv, self.topology.size)
        total = recv.count if collective is not Collective.REDUCE_SCATTER or in_place else send.count
        nbytes = total * recv.dtype.itemsize
        row = self.row(nbytes, recv.memory, algorithm, collective)
        if recv.readonly:
            raise InvalidArgumentError("recvbuf is read-only: the result cannot be written into it")
        backend.check_buffer(recv, "recvbuf")
        if not in_place:
            backend.check_buffer(send, "sendbuf")
        run = row.runner(collective)
        assert run is not None  # row() refuses a row without this collective
        # What makes two ranks' calls differ (mpiring.core.fields). The block collectives'
        # recvbuf count depends on the placement, so their block and placement travel too: one
        # rank in place with n * m elements and one out of place with m agree on the count alone.
        blocks = collective is not Collective.ALLREDUCE
        values = dict(count=recv.count, dtype=dtype_code(recv.dtype), op=int(the_op), algorithm=row.code,
                      batches=nb or 0, memory=int(recv.memory), collective=int(collective),
                      block=total // self.topology.size if blocks else 0, in_place=int(blocks and in_place))
        if the_op is Op.AVG and collective is not Collective.ALLGATHER:
            check_op_dtype(the_op, recv.dtype)
            if self.topology.size == 1:  # the average of one input is that input: a sum
                the_op = Op.SUM
            elif not row.averages:  # sum, then divide what this rank receives by the rank count
                the_op, run = Op.SUM, _then_average(run, collective, self.topology.size)
        if row.check is not None:
            row.check(backend, Call(None if in_place else send, recv, the_op, nb))
        ask = self._ask_capture(row, nbytes, recv.memory, algorithm, collective)
        desc = descriptor.pack(values, recv.dtype.itemsize) if row.gpu_check else (0, 0)
        return Plan(row, run, backend, values, the_op, in_place, ask, desc)

    def row(self, nbytes: int, memory: Memory, algorithm: str | None,
            collective: Collective = Collective.ALLREDUCE) -> Algorithm:
        """The row a call of ``nbytes`` (the whole vector) in ``memory`` runs; raises if it cannot.
        Decided afresh at every ask (graph capture included): the calls themselves reach it only
        through a plan miss (:meth:`prepare` keeps one plan per call shape)."""
        if algorithm is not None and type(algorithm) is not str:  # e.g. a list: not a key
            algorithm = algorithms.check_name(algorithm)
        return self._resolve(nbytes, memory, algorithm, collective)

    def _ask_capture(self, row: Algorithm, nbytes: int, memory: Memory, algorithm: str | None,
                     collective: Collective) -> bool:
        """Whether a remembered eager answer (``row``) must be checked against a capture begun
        since: ``row`` cannot be captured, or auto's graph entries pick another row at this
        size (eager and graph winners differ; the table says where)."""
        if not row.graph_capturable:
            return True
        return self._table_decides(memory, algorithm, collective) and \
            self.tuning.differs(self.topology.size, nbytes, overlap=self.overlap)

    def _table_decides(self, memory: Memory, algorithm: str | None, collective: Collective) -> bool:
        """Whether auto's choice for such a call comes from the tuning table (GPU allreduce on one
        node of several ranks, with no MPIRING_ALGO that serves it)."""
        name = self.algorithm if algorithm is None else algorithm
        return (name == AUTO and memory is Memory.CUDA and collective is Collective.ALLREDUCE
                and self.topology.nodes == 1 and self.topology.size > 1
                and self._forced(memory, collective) is None)

    def _ordered(self, collective: Collective) -> bool:
        """Whether this call must reduce in rank order (reproducible=True; Allgather never reduces)."""
        return self.reproducible and collective is not Collective.ALLGATHER

    def _fits(self, row: Algorithm, memory: Memory, collective: Collective) -> bool:
        return _fits(row, memory, collective, self.topology) and (row.rank_ordered
                                                                  or not self._ordered(collective))

    def _forced(self, memory: Memory, collective: Collective) -> str | None:
        """MPIRING_ALGO, where it serves such a call (and keeps rank order if it must)."""
        forced = self.forced
        return forced if forced is not None and self._fits(algorithms.get(forced), memory, collective) \
            else None

    def _resolve(self, nbytes: int, memory: Memory, algorithm: str | None,
                 collective: Collective) -> Algorithm:
        name = self.algorithm if algorithm is None else algorithms.check_name(algorithm)
        if name == AUTO:  # MPIRING_ALGO replaces auto's choice wherever it can serve the call
            name = self._forced(memory, collective) or self._auto_choice(nbytes, memory, collective)
        row = algorithms.get(name)
        if not row.serves(memory):
            kind = "GPU" if memory is Memory.CUDA else "host"
            raise InvalidArgumentError(
                f"algorithm {row.name!r} reduces {row.describe_memory()} arrays, but these are {kind} "
                f"arrays ({kind} algorithms: {', '.join(algorithms.names(memory, with_auto=False))})")
        if row.runner(collective) is None:
            raise InvalidArgumentError(
                f"algorithm {row.name!r} has no {collective.label}: use "
                f"{', '.join(map(repr, algorithms.names(memory, collective=collective)))}")
        if not row.runs_on(self.topology.nodes):
            choices = [a.name for a in algorithms.rows() if self._fits(a, memory, collective)] + [AUTO]
            raise InvalidArgumentError(
                f"algorithm {row.name!r} runs inside one node, but this communicator spans "
                f"{self.topology.describe()}: use {', '.join(map(repr, choices))}")
        if self._ordered(collective) and not row.rank_ordered:
            choices = [a.name for a in algorithms.rows() if self._fits(a, memory, collective)] + [AUTO]
            raise InvalidArgumentError(
                f"algorithm {row.name!r} does not reduce in rank order, and this communicator is "
                f"reproducible=True (the same bits at every size): use {', '.join(map(repr, choices))}")
        backend = self.backend(memory)
        why = row.unavailable(backend)
        if why is not None:
            raise UnavailableError(why)
        limit = row.max_bytes(backend)
        if limit is not None and nbytes > limit:
            raise InvalidArgumentError(
                f"algorithm {row.name!r} takes messages of at most {limit} bytes, got {nbytes}: "
                "use another algorithm or 'auto'")
        if not row.graph_capturable and backend.capturing():
            capturable = [a.name for a in algorithms.rows() if a.graph_capturable and a.serves(memory)]
            raise InvalidArgumentError(
                f"algorithm {row.name!r} cannot be captured into a CUDA graph (its GPU signals carry "
                f"per-call sequence numbers): use {', '.join(map(repr, capturable))} or 'auto'")
        return row

    def _auto_choice(self, nbytes: int, memory: Memory, collective: Collective) -> str:
        """What auto runs. Across nodes: ``hier`` (allreduce), the flat baseline (the other
        collectives). On one node: the ring for the other collectives; for allreduce the tuning
        table's choice (its graph entries while a CUDA graph is being captured, unless theirs is
        a lazy row that has not run outside a capture yet; its eager ones otherwise), moved to
        the next candidate that can run the call (fits its size limit; capturable while a CUDA
        graph is being captured). With reproducible=True, that choice where its row keeps rank
        order, else a row that does (:meth:`_ordered_choice`)."""
        usual = self._usual_choice(nbytes, memory, collective)
        return self._ordered_choice(nbytes, memory, collective, usual) if self._ordered(collective) else usual

    def _usual_choice(self, nbytes: int, memory: Memory, collective: Collective) -> str:
        gpu = self.gpu if memory is Memory.CUDA else None
        if self.topology.nodes > 1:
            if collective is Collective.ALLREDUCE:
                return fallbacks.ACROSS_NODES
            return fallbacks.ACROSS_NODES_OTHER[memory]
        candidates = algorithms.auto_candidates(memory)
        if gpu is None or collective is not Collective.ALLREDUCE:
            # The ring: the host's one mpiring algorithm. While a CUDA graph is being
            # captured: nccl, which serves every collective and can be captured.
            if (gpu is not None and gpu.capturing()
                    and algorithms.get(fallbacks.WHILE_CAPTURING).unavailable(gpu) is None):
                return fallbacks.WHILE_CAPTURING
            return candidates[0]
        if self.topology.size == 1:  # a copy: one kernel launch, or NCCL's copy when large
            first = fallbacks.ONE_RANK[0] if nbytes <= fallbacks.ONE_RANK_BYTES else fallbacks.ONE_RANK[1]
        else:  # asks the GPU whether it is capturing only where the table's answer depends on it
            size = self.topology.size
            first = self.tuning.choose(size, nbytes, overlap=self.overlap)
            if self.tuning.differs(size, nbytes, overlap=self.overlap) and gpu.capturing():
                graph = self.tuning.choose(size, nbytes, graph=True, overlap=self.overlap)
                if not algorithms.get(graph).lazy or graph in self._made:
                    first = graph
        for name in dict.fromkeys((first, *fallbacks.THEN, *candidates)):
            if _takes(algorithms.get(name), gpu, nbytes):
                return name
        return first

    def _ordered_choice(self, nbytes: int, memory: Memory, collective: Collective, usual: str) -> str:
        """What auto runs with reproducible=True: its ``usual`` choice where that row reduces in
        rank order, else the first such row, in table order, that can run the call (size limit;
        capturable while a graph is captured)."""
        backend = self.backend(memory)
        names = [a.name for a in algorithms.rows() if a.rank_ordered and self._fits(a, memory, collective)]
        if not names:
            kind = "GPU" if memory is Memory.CUDA else "host"
            raise UnavailableError(
                f"reproducible=True: no row reduces {collective.label} of {kind} arrays in rank order on "
                f"{self.topology.describe()} (rows that do: {', '.join(algorithms.rank_ordered(memory))}; "
                "hier adds each node's partial sums, NCCL and the ring pass partial sums along): "
                + ("use Allreduce and keep this rank's block, or " if collective is Collective.REDUCE_SCATTER
                   else "") + "pass host arrays (mpi-twoshot), or reproducible=False")
        for name in ((usual,) if usual in names else ()) + tuple(names):
            if _takes(algorithms.get(name), backend, nbytes):
                return name
        return names[-1]  # _resolve raises what stops it


def _takes(row: Algorithm, backend: Backend, nbytes: int) -> bool:
    """Whether ``row`` can run a call of ``nbytes`` on ``backend`` now: within its size limit,
    available, and capturable if a CUDA graph is being captured (asked only of a row that
    cannot be captured: the hot path asks the GPU no more than it must)."""
    limit = row.max_bytes(backend)
    return ((limit is None or nbytes <= limit) and (row.graph_capturable or not backend.capturing())
            and row.unavailable(backend) is None)


def _then_average(run: Run, collective: Collective, ranks: int) -> Run:
    """``run`` (a sum), then divide what this rank received by ``ranks``: op ``avg`` on a row
    without its own. Allreduce: all of recv; reduce-scatter: this rank's block, the first
    ``total / ranks`` elements of recv (in place, recv holds all ``total``)."""
    def run_then_average(backend: Backend, call: Call) -> None:
        run(backend, call)
        recv = call.recv
        if collective is Collective.ALLREDUCE:
            backend.average(recv, ranks)
        else:
            total = recv.count if call.send is None else call.send.count
            backend.average(recv.part(0, total // ranks), ranks)
    return run_then_average


def _fits(row: Algorithm, memory: Memory, collective: Collective, topology: Topology) -> bool:
    return row.serves(memory) and row.runner(collective) is not None and row.runs_on(topology.nodes)


def _check_blocks(collective: Collective, send: Any, recv: Any, size: int) -> None:
    """The block rules of Reduce_scatter_block and Allgather (see the module docstring)."""
    name = collective.label
    if send is not None and send.dtype != recv.dtype:
        raise InvalidArgumentError(f"{name}: sendbuf is {send.dtype} but recvbuf is {recv.dtype}")
    if send is not None and send.memory != recv.memory:
        raise InvalidArgumentError(f"{name}: sendbuf and recvbuf must both be host or both GPU arrays")
    whole = recv if send is None or collective is Collective.ALLGATHER else send
    if whole.count % size:
        role = "recvbuf" if whole is recv else "sendbuf"
        raise InvalidArgumentError(f"{name}: {role} has {whole.count} elements, not a multiple of the "
                                   f"{size} ranks")
    if send is None:
        return
    block = send.count if collective is Collective.ALLGATHER else recv.count
    if whole.count != block * size:
        raise InvalidArgumentError(
            f"{name}: sendbuf has {send.count} and recvbuf {recv.count} elements; with {size} ranks "
            f"{'recvbuf' if collective is Collective.ALLGATHER else 'sendbuf'} must hold {size} x "
            f"{block} = {block * size}")
    if _overlap(send, recv):
        raise InvalidArgumentError(f"{name}: sendbuf and recvbuf overlap: use MPI.IN_PLACE instead")


def _overlap(a: Any, b: Any) -> bool:
    if a.nbytes == 0 or b.nbytes == 0:
        return False
    return a.address < b.address + b.nbytes and b.address < a.address + a.nbytes
