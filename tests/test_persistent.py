"""mpiring.call.persistent: a Start runs the kept replay only while the communicator's plans and
the algorithm table are those its full-path Start saw; anything the replay hands back, or any
change, runs the call's own path. Pure logic, with stand-ins for the communicator's hooks (the
communicator itself: tests/mpi/test_mpi_persistent.py; on GPUs: tests/gpu/test_gpu_replay.py)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mpiring import algorithms
from mpiring.algorithms import Collective
from mpiring.call.dispatch import Replay
from mpiring.call.hot_replay import FALLBACK, LAUNCH_FAILED, REPLAYED, REPLAYED_REPORT
from mpiring.call.persistent import PersistentAllreduce, StartHooks
from mpiring.core.errors import ConcurrentCallError, InvalidArgumentError

ARGS = (Collective.ALLREDUCE, "send", "recv", "sum", None, None)


class Hot:
    """A compiled replay's stand-in: ``run()`` answers the next scripted outcome (REPLAYED once
    the script is spent)."""

    def __init__(self) -> None:
        self.outcomes: list[int] = []
        self.runs = 0

    def run(self) -> int:
        self.runs += 1
        return self.outcomes.pop(0) if self.outcomes else REPLAYED


class Communicator:
    """The hooks a request takes, recording what ran: ``full`` (the call's path), ``hot`` runs,
    ``finished`` (outcomes handed to finish), and whether each happened under the lock."""

    def __init__(self, compiled: bool = True, replays: bool = True) -> None:
        self.lock = threading.Lock()
        self.dispatcher = SimpleNamespace(generation=0)
        self.hot = Hot()
        replay = Replay(lambda: None, None, None, hot=self.hot if compiled else None)
        self.replay = replay if replays else None
        self.full: list[tuple] = []
        self.finished: list[int] = []
        self.finish_answer = True  # what finish() answers for an outcome other than REPLAYED
        self.unlocked: list[str] = []

    def call(self, *args):
        if self.lock.locked():
            self.unlocked.append("call under the lock")
        self.full.append(args)
        return self.replay

    def finish(self, replay: Replay, outcome: int) -> bool:
        if not self.lock.locked():
            self.unlocked.append("finish outside the lock")
        self.finished.append(outcome)
        return outcome != FALLBACK and self.finish_answer

    def hooks(self) -> StartHooks:
        return StartHooks(self.call, self.lock, self.finish, lambda what: ConcurrentCallError(what),
                          self.dispatcher)


def test_the_first_start_takes_the_full_path_and_later_ones_replay() -> None:
    c = Communicator()
    request = PersistentAllreduce(c.hooks(), ARGS)
    for _ in range(5):
        request.Start()
    assert c.full == [ARGS] and c.hot.runs == 4 and c.unlocked == []


@pytest.mark.parametrize("outcome", [FALLBACK, LAUNCH_FAILED, REPLAYED_REPORT])
def test_what_the_replay_hands_back_goes_to_finish_under_the_lock(outcome) -> None:
    c = Communicator()
    request = PersistentAllreduce(c.hooks(), ARGS)
    request.Start()
    c.hot.outcomes = [outcome]
    request.Start()
    assert c.finished == [outcome] and c.unlocked == [] and not c.lock.locked()
    # finish answers False for FALLBACK (the full path must run the call): it does, once
    assert c.full == [ARGS] * (2 if outcome == FALLBACK else 1)


def test_an_exception_from_finish_releases_the_lock() -> None:
    c = Communicator()

    def fail(replay, outcome):
        raise RuntimeError("launch failed")

    hooks = c.hooks()._replace(finish=fail)
    request = PersistentAllreduce(hooks, ARGS)
    request.Start()
    c.hot.outcomes = [LAUNCH_FAILED]
    with pytest.raises(RuntimeError, match="launch failed"):
        request.Start()
    assert not c.lock.locked()


def test_dropped_plans_or_a_new_row_send_the_next_start_down_the_full_path() -> None:
    c = Communicator()
    request = PersistentAllreduce(c.hooks(), ARGS)
    request.Start()
    c.dispatcher.generation += 1
    request.Start()
    request.Start()
    assert len(c.full) == 2 and c.hot.runs == 1
    version = algorithms.version_word()[1]
    version[0] += 1  # what algorithms.register does (a new row can change auto's pick)
    try:
        request.Start()
    finally:
        version[0] -= 1
    assert len(c.full) == 3


def test_plans_dropped_during_the_full_path_leave_its_replay_unused() -> None:
    c = Communicator()
    inner = c.call

    def call_that_clears(*args):
        c.dispatcher.generation += 1  # e.g. the plan table was full
        return inner(*args)

    request = PersistentAllreduce(c.hooks()._replace(call=call_that_clears), ARGS)
    request.Start()
    request.Start()
    assert len(c.full) == 2 and c.hot.runs == 0


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_replay_without_a_compiled_form_is_finished_in_python(compiled) -> None:
    c = Communicator(compiled=compiled)
    request = PersistentAllreduce(c.hooks(), ARGS)
    request.Start()
    request.Start()
    assert c.finished == ([] if compiled else [FALLBACK])
    assert len(c.full) == (1 if compiled else 2)  # (the stand-in's finish sends FALLBACK back)


def test_no_replay_means_the_full_path_every_time() -> None:
    c = Communicator(replays=False)
    request = PersistentAllreduce(c.hooks(), ARGS)
    for _ in range(3):
        request.Start()
    assert c.full == [ARGS] * 3


def test_a_start_while_another_call_runs_raises_and_runs_nothing() -> None:
    c = Communicator()
    request = PersistentAllreduce(c.hooks(), ARGS)
    request.Start()
    with c.lock, pytest.raises(ConcurrentCallError, match="allreduce"):
        request.Start()
    assert c.hot.runs == 0 and len(c.full) == 1


def test_a_freed_request_refuses_to_start_and_lets_go_of_its_arrays() -> None:
    c = Communicator()
    request = PersistentAllreduce(c.hooks(), ARGS)
    request.Start()
    request.Wait()
    request.Free()
    with pytest.raises(InvalidArgumentError, match="freed"):
        request.Start()
    assert c.hot.runs == 0 and len(c.full) == 1


OPERATIONS = st.lists(st.sampled_from(["start", "clear", "fallback", "report", "no-replay"]), max_size=40)


@settings(max_examples=200, deadline=None)
@given(OPERATIONS)
def test_any_sequence_runs_each_start_once_by_replay_or_full_path(operations) -> None:
    """Every Start runs the call exactly once (a replayed run or a full path, never both, never
    neither); a replay runs only while no clear happened since the full path that kept it."""
    c = Communicator()
    request = PersistentAllreduce(c.hooks(), ARGS)
    starts = replayed_ok = 0
    valid = False  # whether the request holds a replay kept since the last clear
    for op in operations:
        if op == "clear":
            c.dispatcher.generation += 1
            valid = False
            continue
        if op == "no-replay":
            c.replay = None
            continue
        if op in ("fallback", "report"):
            c.hot.outcomes.append(FALLBACK if op == "fallback" else REPLAYED_REPORT)
            continue
        starts += 1
        runs, full = c.hot.runs, len(c.full)
        request.Start()
        ran_hot = c.hot.runs - runs
        took_full = len(c.full) - full
        assert ran_hot <= 1 and took_full <= 1
        assert ran_hot == 0 or valid, "a replay ran after its plans were dropped"
        if ran_hot and not took_full:
            replayed_ok += 1
        elif ran_hot:
            assert c.finished[-1] == FALLBACK  # handed back: the full path ran the call instead
        valid = c.replay is not None if took_full else valid
    assert len(c.full) + replayed_ok == starts
    assert c.unlocked == [] and not c.lock.locked()
