"""The all-to-all two-shot's schedule (mpiring.ring.alltoall_schedule), run on a model machine.

Every rank's streams run their operations in order; which stream moves next is drawn at
random, so each run is one interleaving of what copy engines and kernels on several GPUs may
do (any stream may lag behind any other: stragglers included). Staging areas carry a tag: a
copy into an area still holding a round nobody consumed, or a read of an area that holds
nothing, is a hazard. Several calls of changing phases, counts, placements and dtypes run on
one machine, so flags and slots carry over between calls as they do in a communicator.
Results are compared bitwise with the rank-ordered reference (mpiring.core.reproducible).
The control: dropping any one kind of wait makes some run fail, so these tests can fail.
"""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring.core.reproducible import reference
from mpiring.ring.alltoall_schedule import SLOTS, AllToAllPlan, Copy, Fold, Rounds, Signal, Wait
from mpiring.ring.schedule import Phase


class Hazard(AssertionError):
    pass


class Machine:
    """``size`` ranks with their staging (``chunk`` elements an area) and flags, kept across calls."""

    def __init__(self, size: int, chunk: int, dtype: Any, dropped: str | None = None,
                 serial: str | None = None) -> None:
        self.size, self.chunk, self.dtype, self.dropped = size, chunk, np.dtype(dtype), dropped
        self.serial = serial
        self.flags: defaultdict[tuple, int] = defaultdict(int)
        self.staging = {(kind, r, slot, area): np.zeros(chunk, self.dtype) for kind in ("inbound", "gather")
                        for r in range(size) for slot in range(SLOTS) for area in range(size)}
        self.full: dict[tuple, bool] = defaultdict(bool)  # an area holds a round nobody read yet
        self.done = Rounds()

    def view(self, region: tuple, buffers: dict, count: int, writing: bool) -> np.ndarray:
        kind = region[0]
        if kind in ("inbound", "gather"):
            area = region
            if writing and self.full[area]:
                raise Hazard(f"{area} overwritten before it was read")
            if not writing and not self.full[area]:
                raise Hazard(f"{area} read while it holds no round")
            self.full[area] = writing
            return self.staging[area][:count]
        _, rank, lo, hi = region
        assert hi - lo == count, region
        return buffers[kind][rank][lo:hi]

    def ready(self, op: Any) -> bool:
        return not isinstance(op, Wait) or op.flag[0] == self.dropped or self.flags[op.flag] >= op.value

    def run(self, op: Any, buffers: dict) -> None:
        if isinstance(op, Signal):
            assert op.value > self.flags[op.flag], f"{op}: flags only grow"
            self.flags[op.flag] = op.value
        elif isinstance(op, Copy):
            data = self.view(op.src, buffers, op.elements, writing=False).copy()
            self.view(op.dst, buffers, op.elements, writing=True)[...] = data
        elif isinstance(op, Fold):
            parts = [self.view(src, buffers, op.elements, writing=False).copy() for src in op.sources]
            self.view(op.dst, buffers, op.elements, writing=True)[...] = reference(parts)

    def call(self, plan: AllToAllPlan, buffers: dict, rng: np.random.Generator) -> None:
        """Run one call: every rank's streams, interleaved at random, to the end. ``serial``
        machines run each rank's operations one after the other in its issue order (every
        stream of a rank on one hardware queue: the worst case)."""
        if self.serial == "issue order":
            queues = {(r, "all"): deque(op for _, op in plan.issue_order(r, self.done))
                      for r in range(plan.size)}
        elif self.serial == "stream by stream":
            queues = {(r, "all"): deque(op for ops in plan.streams(r, self.done).values() for op in ops)
                      for r in range(plan.size)}
        else:
            queues = {(r, s): deque(ops) for r in range(plan.size)
                      for s, ops in plan.streams(r, self.done).items()}
        queues = {key: q for key, q in queues.items() if q}
        while queues:
            runnable = [key for key, q in queues.items() if self.ready(q[0])]
            if not runnable:
                raise Hazard(f"deadlock: every stream waits: {[(k, q[0]) for k, q in queues.items()]}")
            key = runnable[rng.integers(len(runnable))]
            self.run(queues[key].popleft(), buffers)
            if not queues[key]:
                del queues[key]
        self.done = plan.after(self.done)


def poison(dtype: np.dtype, count: int) -> np.ndarray:
    return np.full(count, np.nan if dtype.kind == "f" else np.iinfo(dtype).min, dtype=dtype)


def one_call(machine: Machine, phase: Phase, block: int, in_place: bool, rng: np.random.Generator) -> None:
    """One call of ``phase`` with blocks of about ``block`` elements: every element checked."""
    n, dtype = machine.size, machine.dtype
    count = n * block if phase is not Phase.ALLREDUCE else n * block + int(rng.integers(0, n))
    if dtype.kind == "f":
        inputs = [rng.standard_normal(count if phase is not Phase.ALLGATHER else block).astype(dtype)
                  for _ in range(n)]
    else:
        inputs = [rng.integers(-1000, 1000, count if phase is not Phase.ALLGATHER else block).astype(dtype)
                  for _ in range(n)]
    if phase is Phase.ALLREDUCE:
        want = [reference(inputs)] * n
    elif phase is Phase.REDUCE_SCATTER:
        total = reference(inputs)
        want = [total[r * block:(r + 1) * block] for r in range(n)]
    else:
        want = [np.concatenate(inputs)] * n
    if in_place:
        if phase is Phase.ALLGATHER:
            outputs = [poison(dtype, count) for _ in range(n)]
            for r in range(n):
                outputs[r][r * block:(r + 1) * block] = inputs[r]
        else:
            outputs = [x.copy() for x in inputs]
        buffers = {"output": outputs, "input": None}
    else:
        out_count = block if phase is Phase.REDUCE_SCATTER else count
        outputs = [poison(dtype, out_count) for _ in range(n)]
        kept = [x.copy() for x in inputs]
        buffers = {"input": inputs, "output": outputs}
    machine.call(AllToAllPlan(n, count, machine.chunk, phase, in_place), buffers, rng)
    for r in range(n):
        got = outputs[r][:len(want[r])]
        width = got.dtype.itemsize
        differ = got.view(np.uint8).reshape(-1, width) != want[r].view(np.uint8).reshape(-1, width)
        assert not differ.any(), (f"rank {r}, {phase.value}, in place {in_place}, count {count}: "
                                  f"{int(differ.any(axis=1).sum())} of {len(got)} elements differ")
        if not in_place:
            assert inputs[r].tobytes() == kept[r].tobytes(), f"rank {r}: the input was written"


CALL = st.tuples(st.sampled_from(list(Phase)), st.integers(0, 9), st.booleans())


@settings(max_examples=300, deadline=None)
@given(size=st.integers(1, 5), chunk=st.integers(1, 7),
       dtype=st.sampled_from(["float32", "float16", "int32"]),
       calls=st.lists(CALL, min_size=1, max_size=4), seed=st.integers(0, 2**32 - 1))
def test_every_interleaving_drawn_gives_the_rank_ordered_result(size, chunk, dtype, calls, seed):
    rng = np.random.default_rng(seed)
    machine = Machine(size, chunk, dtype)
    for phase, block, in_place in calls:
        one_call(machine, phase, block, in_place, rng)


@pytest.mark.parametrize("size", [2, 3, 4, 8])
def test_thousands_of_rounds_over_many_calls_with_one_machine(size):
    """Long runs: the flags and slots of many calls, each stage's rounds numbered on."""
    rng = np.random.default_rng(size)
    machine = Machine(size, chunk=3, dtype="float32")
    rounds = 0
    while rounds < 2000 // size:
        phase = list(Phase)[int(rng.integers(3))]
        block = int(rng.integers(0, 12))
        one_call(machine, phase, block, bool(rng.integers(2)), rng)
        rounds = machine.done.scatter + machine.done.gather
    assert machine.done.scatter > 0 and machine.done.gather > 0


@settings(max_examples=150, deadline=None)
@given(size=st.integers(2, 6), chunk=st.integers(1, 5), calls=st.lists(CALL, min_size=1, max_size=4),
       seed=st.integers(0, 2**32 - 1))
def test_the_issue_order_completes_with_every_stream_of_a_rank_on_one_queue(size, chunk, calls, seed):
    """Every operation of a rank run strictly in its issue order (more streams than hardware
    queues, at worst one queue per GPU): no deadlock, and the results are exact."""
    rng = np.random.default_rng(seed)
    machine = Machine(size, chunk, "float32", serial="issue order")
    for phase, block, in_place in calls:
        one_call(machine, phase, block, in_place, rng)


def test_the_control_stream_by_stream_issue_deadlocks_on_one_queue():
    """Enqueued stream by stream instead (every push of the call, then the fold, ...), the
    same serialised run deadlocks: the issue order is what makes it safe."""
    machine = Machine(3, 2, "float32", serial="stream by stream")
    with pytest.raises(Hazard, match="deadlock"):
        one_call(machine, Phase.ALLREDUCE, 9, False, np.random.default_rng(0))


# Each kind of wait, and a run that needs it: (phase, in place) and how many calls.
NEEDED = {"inbound_free": (Phase.ALLREDUCE, False), "arrived": (Phase.ALLREDUCE, False),
          "folded": (Phase.ALLREDUCE, False), "gather_free": (Phase.ALLGATHER, False),
          "gathered": (Phase.ALLGATHER, False), "pushed": (Phase.REDUCE_SCATTER, True)}


@pytest.mark.parametrize("flag", sorted(NEEDED))
def test_the_control_every_kind_of_wait_is_needed(flag):
    """Without the waits on ``flag``, some drawn interleaving reads stale data, overwrites an
    unread slot or returns a wrong element: the checks above can fail."""
    phase, in_place = NEEDED[flag]
    for seed in range(400):
        rng = np.random.default_rng(seed)
        machine = Machine(3, chunk=2, dtype="float32", dropped=flag)
        try:
            for _ in range(3):
                one_call(machine, phase, 7, in_place, rng)
        except AssertionError:
            return
    pytest.fail(f"400 runs without the waits on {flag} all passed: the test cannot see them missing")


def test_every_stage_counts_its_rounds_and_staging_is_bounded():
    plan = AllToAllPlan(4, 4 * 10 + 3, chunk=4)  # blocks of 11 and 10: 3 rounds
    assert plan.rounds == 3 and plan.after(Rounds(5, 7)) == Rounds(8, 10)
    assert AllToAllPlan(4, 40, 4, Phase.REDUCE_SCATTER).after(Rounds(5, 7)) == Rounds(8, 7)
    assert AllToAllPlan(4, 40, 4, Phase.ALLGATHER).after(Rounds(5, 7)) == Rounds(5, 10)
    assert plan.staging_elements() == 2 * SLOTS * 3 * 4  # inbound + gather, 2 slots, 3 peers
    assert AllToAllPlan(4, 0, 4).rounds == 0 and AllToAllPlan(1, 9, 4).streams(0, Rounds()) == {
        "fold": AllToAllPlan(1, 9, 4).streams(0, Rounds())["fold"]}


@pytest.mark.parametrize("bad, message", [
    (dict(size=0, count=4, chunk=1), "rank count"), (dict(size=2, count=-1, chunk=1), "element count"),
    (dict(size=2, count=4, chunk=0), "chunk"),
    (dict(size=3, count=4, chunk=1, phase=Phase.ALLGATHER), "do not divide")])
def test_bad_plans_are_refused_saying_why(bad, message):
    with pytest.raises(ValueError, match=message):
        AllToAllPlan(**bad)
