"""Measuring one benchmark point (allreduce, or a collective of :mod:`.collectives`):
correctness check first, then warm-up and timed loops.

Every stage ends in an agreement among ranks (one ``allgather`` of status and payload), so
an exception on one rank becomes the same verdict on all ranks instead of a hang, and every
rank runs the same number of collective calls.

Timing: ``Barrier``, then a region of ``k`` back-to-back calls timed with CUDA events on the
current CuPy stream (GPU) or ``MPI.Wtime`` (host); per-iteration time = region / k; a few
repetitions give mean/std/min/max/median, and the ranks' figures are combined as
nccl-tests' ``-a`` says (:func:`~mpiring.bench.stats.combine`; by default the slowest rank's).
The check (``-c N``: N calls, each on freshly poisoned output) comes first and counts the
wrong elements over all ranks (nccl-tests' ``#wrong``).

An algorithm that rejects a point's arguments (``InvalidArgumentError``: oneshot above its
size limit, say) makes that point "inapplicable", reported n/a: not a failure, no effect on
the exit status. One that cannot run here at all (``UnavailableError``) is "unavailable".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import InvalidArgumentError, PeerArgumentError, RankMismatchError, UnavailableError
from .capture import capture_guard
from .collectives import ALLGATHER, ALLREDUCE, REDUCE_SCATTER, SizeBuffers, odd_count_near
from .stats import SLOWEST, Stats, combine, iterations_for, summarize

# Errors raised before any data moved: the communicator stays usable after them.
ARGUMENT_ERRORS = (InvalidArgumentError, PeerArgumentError, RankMismatchError, UnavailableError)


@dataclass(frozen=True)
class Point:
    """One measurement: an algorithm at one size, batches value and placement."""

    nbytes: int
    count: int
    dtype: str
    op: str
    algo: str
    batches: int | str | None  # int, "auto", or None for algorithms without batches
    placement: str  # "out" or "in"
    collective: str = ALLREDUCE  # or "reduce_scatter", "allgather" (collectives.NAMES)

    @property
    def batches_label(self) -> str:
        return "-" if self.batches is None else str(self.batches)

    @property
    def call_batches(self) -> int | None:
        return self.batches if isinstance(self.batches, int) else None


@dataclass
class Outcome:
    """What happened at a point, identical on every rank."""

    status: str  # "ok", "fail", "error", "unavailable", "inapplicable", "skipped"
    check: str  # "OK", "FAIL", "off", "-"
    note: str = ""
    stats: Stats | None = None
    slowest_rank: int | None = None
    iters: int | None = None
    warmup: int | None = None
    reps: int | None = None
    errors: list[str] = field(default_factory=list)
    needs_rebuild: bool = False
    overlap: Any = None  # an overlap.OverlapResult with --overlap
    wrong: int | None = None  # wrong elements over all ranks (None: not checked)
    replayed: float | None = None  # share of the timed calls replayed, lowest rank (eager, own rows)


@dataclass(frozen=True)
class TimingPolicy:
    budget_s: float = 0.15
    reps: int = 5
    max_iters: int = 1000
    iters: int | None = None  # fixed timed iterations per repetition
    warmup: int | None = None  # fixed warm-up iterations
    min_warmup: int = 2
    max_warmup: int = 50
    warmup_share: float = 0.1  # auto warm-up fills this share of the budget
    average: int = SLOWEST  # how ranks' times combine (nccl-tests' -a; stats.combine)

    def warmup_for(self, per_iter_s: float) -> int:
        if self.warmup is not None:
            return self.warmup
        if per_iter_s <= 0 or not math.isfinite(per_iter_s):
            return self.max_warmup
        n = math.ceil(self.warmup_share * self.budget_s / per_iter_s)
        return max(self.min_warmup, min(self.max_warmup, n))

    def iters_for(self, per_iter_s: float) -> int:
        if self.iters is not None:
            return self.iters
        return iterations_for(self.budget_s, per_iter_s, self.reps, self.max_iters)


class StageFailed(Exception):
    """A stage failed on at least one rank; ``errors`` lists ``rank N: message`` lines."""

    def __init__(self, status: str, errors: list[str], rebuild: bool,
                 wrong: int | None = None) -> None:
        super().__init__("; ".join(errors))
        self.status = status
        self.errors = errors
        self.rebuild = rebuild
        self.wrong = wrong  # a failed check: wrong elements over all ranks


def _kind(err: Exception) -> str:
    """What a stage's exception means: "unavailable" (the algorithm cannot run here),
    "inapplicable" (it rejects these arguments, e.g. a size over its limit), "peer" (another
    rank rejected its arguments; that rank names the cause), or "error"."""
    if isinstance(err, UnavailableError):
        return "unavailable"
    if isinstance(err, InvalidArgumentError):
        return "inapplicable"
    if isinstance(err, PeerArgumentError):
        return "peer"
    return "error"


def agree(world: Any, fn: Callable[[], Any], share: bool = False) -> Any:
    """Collective: run ``fn`` here; raise :class:`StageFailed` on every rank when it raised
    on any. Returns ``fn``'s result, or with ``share`` every rank's (small, picklable)
    result as a list.

    The failure's status is "unavailable" or "inapplicable" when every rank that names a
    cause (not merely "a peer rejected its arguments") names that one, else "error"; the
    errors list the causes first."""
    value = None
    try:
        value = fn()
        local = ("ok", value if share else None, "", True)
    except Exception as err:  # noqa: BLE001 - any failure must reach the other ranks
        local = (_kind(err), None, f"{type(err).__name__}: {err}", isinstance(err, ARGUMENT_ERRORS))
    gathered = world.allgather(local)
    bad = [(r, g) for r, g in enumerate(gathered) if g[0] != "ok"]
    if not bad:
        return [g[1] for g in gathered] if share else value
    causes = {g[0] for _, g in bad if g[0] != "peer"}
    status = causes.pop() if causes in ({"unavailable"}, {"inapplicable"}) else "error"
    rebuild = not all(g[3] for _, g in bad)  # an error mid-call: the communicator is spent
    bad.sort(key=lambda rg: (rg[1][0] == "peer", rg[0]))
    errors = [f"rank {r}: {g[2]}" for r, g in bad]
    raise StageFailed(status, errors, rebuild)


# (stream, call, k) -> a graph of k calls with launch(stream), the stream current already.
Capture = Callable[[Any, Callable[[], None], int], Any]


def capture_cupy(stream: Any, call: Callable[[], None], k: int) -> Any:
    """``k`` calls captured in one CUDA graph on CuPy's ``stream`` (current), after one call
    outside the capture, so the capture holds only the calls themselves."""
    call()
    with capture_guard():
        stream.begin_capture()
        try:
            for _ in range(k):
                call()
        finally:
            graph = stream.end_capture()
    return graph


class PointMeasurer:
    """Runs points on one communicator; ``world`` is the bench's own MPI communicator. The
    calls name ``algorithm``, or without it the point's own (a bench row that runs another
    algorithm on its own communicator, ``auto-reproducible``, is handed both:
    :func:`mpiring.bench.sweep.target`)."""

    def __init__(self, world: Any, comm: Any, space: Any, policy: TimingPolicy, *,
                 check: int, time_agreement: bool, mpi_op: Any, in_place: Any,
                 overlap: Any = None, graph: bool = False, graph_launches: int = 1,
                 blocking: bool = False, algorithm: str | None = None) -> None:
        self.world, self.comm, self.space, self.policy = world, comm, space, policy
        self.algorithm = algorithm  # what the calls name (None: the point's algo)
        self.check = int(check)  # checked calls per point (nccl-tests' -c); 0: none
        self.time_agreement = time_agreement
        self.mpi_op = mpi_op
        self.in_place = in_place  # MPI.IN_PLACE
        self.overlap = overlap  # an overlap_run.OverlapMeasurer, run after a point's timing
        self.timer = space.timer()
        self.graph = graph  # time calls captured in a CUDA graph (see _timed_graph)
        self.graph_launches = max(1, graph_launches)  # replays timed together (-G N)
        self.blocking = blocking  # -z 1: wait for each timed call to complete
        self._graph_stream: Any = None
        self._capture: Capture | None = None

    def _algorithm(self, point: Point) -> str:
        """The algorithm ``point``'s calls name."""
        return self.algorithm or point.algo

    def _call(self, point: Point, bufs: SizeBuffers) -> Callable[[], None]:
        comm, op, algo, nb = self.comm, self.mpi_op, self._algorithm(point), point.call_batches
        in_place = point.placement == "in"
        send = self.in_place if in_place else bufs.send
        recv = bufs.recv_arg(in_place)
        if point.collective == REDUCE_SCATTER:
            def call() -> None:
                comm.Reduce_scatter_block(send, recv, op, algorithm=algo, batches=nb)
        elif point.collective == ALLGATHER:
            def call() -> None:
                comm.Allgather(send, recv, algorithm=algo, batches=nb)
        else:
            def call() -> None:
                comm.Allreduce(send, recv, op, algorithm=algo, batches=nb)
        return call

    def _timed(self, call: Callable[[], None], k: int) -> float:
        """Seconds per iteration of ``k`` back-to-back calls, after a barrier."""
        if self.graph:
            return self._timed_graph(call, k)
        self.space.synchronize()
        self.world.Barrier()
        self.timer.start()
        if self.blocking:  # nccl-tests' -z 1: the CPU waits for each call before the next
            for _ in range(k):
                call()
                self.space.synchronize()
        else:
            for _ in range(k):
                call()
        return self.timer.stop() / k

    def _timed_graph(self, call: Callable[[], None], k: int) -> float:
        """Seconds per call when ``k`` calls captured in one CUDA graph are replayed, after a
        barrier: the GPU's own time, without the host's launch overhead (nccl-tests' -G N:
        the graph is replayed N times and the time divided by N k). Capture needs a stream
        of its own; the first call on it runs outside the capture, so the capture holds only
        the calls themselves."""
        cp = self.space.cp
        if self._graph_stream is None:
            self._graph_stream = cp.cuda.Stream(non_blocking=True)
        stream = self._graph_stream
        with stream:
            graph = (self._capture or capture_cupy)(stream, call, k)
            graph.launch(stream)  # warm: the first replay uploads the graph
            self.space.synchronize()
            self.world.Barrier()
            self.timer.start()
            for _ in range(self.graph_launches):
                graph.launch(stream)
            return self.timer.stop() / (k * self.graph_launches)

    def measure(self, point: Point, bufs: SizeBuffers, call: Callable[[], None] | None = None,
                capture: Capture | None = None) -> Outcome:
        """Check, then time, one point. ``call`` replaces the communicator's call (a rival's,
        :mod:`mpiring.bench.rivals`); ``capture`` replaces the CuPy graph capture of
        :func:`capture_cupy` (a torch rival's)."""
        self._capture = capture
        try:
            return self._measure(point, bufs, call)
        except StageFailed as err:
            check = "FAIL" if err.status == "fail" else "-"
            return Outcome(err.status, check, note=err.errors[0], errors=err.errors,
                           needs_rebuild=err.rebuild, wrong=err.wrong)

    def _measure(self, point: Point, bufs: SizeBuffers,
                 call: Callable[[], None] | None = None) -> Outcome:
        own = call is None  # mpiring's row, not another library's
        call = call or self._call(point, bufs)
        saved = self.comm.check
        try:
            check_label, wrong = "off", None
            for _ in range(self.check):
                self._check(point, bufs, call)
                check_label, wrong = "OK", 0
            if self.check and own and point.collective == ALLREDUCE:
                self._check_odd_count(point, bufs)
            # the communicator's own setting (its default: on), or off (--no-time-agreement)
            self.comm.check = saved and self.time_agreement
            outcome = self._time(call, check_label, own)
            outcome.wrong = wrong
            if self.overlap is not None and outcome.stats is not None:
                with np.errstate(all="ignore"):  # in place, values grow (see _time)
                    outcome.overlap = self.overlap.measure(call, point.algo,
                                                           outcome.stats.median, outcome.iters,
                                                           size=point.nbytes)
            return outcome
        finally:
            self.comm.check = saved

    def _replayed_share(self, before: Any) -> float | None:
        """Collective: the share of the calls since ``before`` (``Communicator.stats()``) that
        were replayed rather than planned afresh (:mod:`mpiring.call.replay`), on the rank where
        it is lowest; None where no call ran. Eager calls of a kept shape are all replayed
        once one call ran it: a lower share means the timed calls paid the full path."""
        def share() -> float | None:
            after = self.comm.stats()
            replayed = after.replayed - before.replayed
            calls = replayed + after.planned - before.planned
            return replayed / calls if calls else None

        known = [x for x in agree(self.world, share, share=True) if x is not None]
        return min(known) if known else None

    def _check(self, point: Point, bufs: SizeBuffers, call: Callable[[], None]) -> None:
        """One call on poisoned output (in place: on a fresh copy of the input), then every
        element compared with the exact result on every rank; raises ``StageFailed("fail")``
        with the wrong elements counted over all ranks (nccl-tests' #wrong)."""
        space = self.space

        def prepare() -> None:
            if point.placement == "in":
                bufs.prepare_in_place()
            else:
                space.poison(bufs.recv)
            space.synchronize()

        def run_and_compare() -> tuple[list[str], int]:
            self.comm.check = True  # the library's argument agreement, for a clean error
            call()
            space.synchronize()
            problems, wrong = [], 0
            bad = bufs.check_output()
            if bad is not None:
                problems.append("wrong result: " + bad.describe(bufs.count))
                wrong += bad.count
            if point.placement == "out":
                bad_in = bufs.check_input()
                if bad_in is not None:
                    problems.append("sendbuf modified: " + bad_in.describe(bufs.count))
                    wrong += bad_in.count
                    bufs.load_input()
            return problems, wrong

        self._judge(prepare, run_and_compare)

    def _judge(self, prepare: Callable[[], None],
               run_and_compare: Callable[[], tuple[list[str], int]]) -> None:
        """Every rank prepares, then runs and compares one checked call; raises
        ``StageFailed("fail")`` with every rank's problems and the wrong elements over all ranks
        (nccl-tests' #wrong) if any rank found one."""
        agree(self.world, prepare)
        verdicts = agree(self.world, run_and_compare, share=True)
        errors = [f"rank {r}: {p}" for r, (ps, _) in enumerate(verdicts) for p in ps]
        if errors:
            raise StageFailed("fail", errors, rebuild=False,
                              wrong=sum(w for _, w in verdicts))

    def _check_odd_count(self, point: Point, bufs: SizeBuffers) -> None:
        """One more checked call, of an odd count a little under the point's
        (:func:`~mpiring.bench.collectives.odd_count_near`) on the leading elements of the same
        buffers: every result element exact, every element past it untouched on every rank."""
        count = odd_count_near(bufs.count)
        if count is None:
            return
        in_place = point.placement == "in"
        space, comm, op, nb = self.space, self.comm, self.mpi_op, point.call_batches
        algo = self._algorithm(point)

        def prepare() -> None:
            bufs.prepare_prefix(count, in_place)
            space.synchronize()

        def run_and_compare() -> tuple[list[str], int]:
            self.comm.check = True
            send = self.in_place if in_place else bufs.send[:count]
            comm.Allreduce(send, bufs.recv[:count], op, algorithm=algo, batches=nb)
            space.synchronize()
            problems, wrong = [], 0
            bad = bufs.check_output(count)
            if bad is not None:
                problems.append(f"wrong result at count {count}: " + bad.describe(count))
                wrong += bad.count
            past = bufs.check_untouched(count)
            if past is not None:
                problems.append(f"a call of {count} elements wrote past them: "
                                + past.describe(bufs.count - count))
                wrong += past.count
            return problems, wrong

        # The input stays as it was (the call reads a prefix of it); the timed calls need no
        # fresh copy of it.
        self._judge(prepare, run_and_compare)

    def _time(self, call: Callable[[], None], check_label: str, own: bool) -> Outcome:
        # In place, each call reduces the previous result (as in nccl-tests): values grow to
        # inf/NaN, which costs floating-point units nothing but makes numpy warn.
        with np.errstate(all="ignore"):
            return self._time_loops(call, check_label, own)

    def _time_loops(self, call: Callable[[], None], check_label: str, own: bool) -> Outcome:
        policy = self.policy
        probe = max(agree(self.world, lambda: self._timed(call, 1), share=True))
        warmup = policy.warmup_for(probe)
        if warmup:
            probe = max(agree(self.world, lambda: self._timed(call, warmup), share=True))
        iters = policy.iters_for(probe)

        def repetitions() -> tuple[float, ...]:
            return summarize([self._timed(call, iters) for _ in range(policy.reps)]).as_tuple()

        # mpiring's eager rows: how many of the timed calls (not the probe's or the warm-up's,
        # which may plan the shape afresh) were replayed.
        before = agree(self.world, self.comm.stats) if own and not self.graph else None
        per_rank = [Stats(*t) for t in agree(self.world, repetitions, share=True)]
        stats, worst = combine(per_rank, policy.average)
        return Outcome("ok", check_label, stats=stats, slowest_rank=worst, iters=iters,
                       warmup=warmup, reps=policy.reps,
                       replayed=None if before is None else self._replayed_share(before))
