"""mpiring.call.hot_replay's CallTable (``mpiring/call/_hotpath.c``): a call's key read off its
arrays, the lookup and the replay in one C call, against the Python reference (``CallKeys.key``,
the plans' dict, the replay): its key is never coarser than Python's (a shape it finds is one
Python would find, with the same replay), it finds nothing Python has no key for, and whole
``Allreduce`` calls through ``Communicator``'s own methods leave the same launches, posts,
counts, events and errors with the table, without it, and with the Python replay. One rank, no
GPU: tools.replay_bench's stand-ins (the peers' cases: tests/mpi/test_mpi_hot_replay.py)."""

from __future__ import annotations

import gc
import sys
import threading
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mpi4py import MPI
from test_hot_replay import EVENTS, describe_error, new_stream, skipped

from mpiring import algorithms
from mpiring.algorithms import Collective
from mpiring.call import hot_replay
from mpiring.call.dispatch import PLAN_ENTRIES
from mpiring.call.replay import CallKeys
from mpiring.core.errors import ConcurrentCallError
from mpiring.core.ops import Op
from tools.replay_bench import (
    HAVE_EXTENSION,
    CupyLike,
    FakeStream,
    Harness,
    MemoryPointer,
    PlanCache,
    ReplayingCommunicator,
    cupy_like,
)

pytestmark = pytest.mark.skipif(not HAVE_EXTENSION, reason="the extension is not built "
                                "(python -m tools.build_hotpath)")
ALLREDUCE = Collective.ALLREDUCE


def table_of(array_type=CupyLike):
    """A CallTable on its own (a lock, a finish that must not be reached, a plan cache)."""
    module = hot_replay.compiled()
    assert module is not None
    address, owner = algorithms.version_word()
    return module.CallTable(array_type=array_type, in_place=MPI.IN_PLACE, version=address,
                            lock=threading.Lock(), finish=_no_finish, keep=owner)


def _no_finish(replay, outcome):
    raise AssertionError(f"finish({replay!r}, {outcome}) reached")


def token():
    """A stand-in for a replay's compiled form (never run: find() only looks)."""
    module = hot_replay.compiled()
    return module.HotReplay.__new__(module.HotReplay)


class Other:
    """An array-like of another type, with the same attributes (never keyed by the table)."""

    def __init__(self, ptr, shape=(8,), strides=(4,), dtype=np.float32) -> None:
        self.data, self.shape, self.strides, self.dtype = MemoryPointer(ptr), shape, strides, np.dtype(dtype)


class Odd(np.ndarray):
    """A CupyLike whose attributes are not what the table keys by value: the table has no key for
    them (Python's key may: the table then just finds nothing)."""

    __slots__ = ("data",)


def odd(ptr, count=8) -> Odd:
    array = np.zeros(count, np.float32).view(Odd)
    array.data = MemoryPointer(ptr)
    return array


# Arrays: two pointers, shapes and strides that Python's key tells apart, equal dtypes that are
# different objects (a structured dtype is made anew each time), a pointer that does not fit
# int64, a float pointer, more dimensions than the table keys.
STRUCT_A, STRUCT_B = np.dtype([("a", "<f4")]), np.dtype([("a", "<f4")])
assert STRUCT_A == STRUCT_B and STRUCT_A is not STRUCT_B


def _view(array) -> CupyLike:
    """A reshaped or sliced CupyLike (a new object: its pointer set again)."""
    array.data = MemoryPointer(0x1000)
    return array


def _arrays() -> list:
    float_pointer = cupy_like(8, 0x1000)
    float_pointer.data = MemoryPointer(0.5 + 0x1000)  # no key here (Python's key has one)
    return [cupy_like(8, 0x1000), cupy_like(8, 0x1000), cupy_like(8, 0x2000), cupy_like(16, 0x1000),
            cupy_like(8, 0x1000, np.int32), cupy_like(8, 0x1000, STRUCT_A), cupy_like(8, 0x1000, STRUCT_B),
            _view(cupy_like(8, 0x1000).reshape(2, 4)), _view(cupy_like(16, 0x1000)[::2]),
            _view(cupy_like(8, 0x1000).reshape(1, 1, 1, 1, 1, 1, 1, 1, 8)),  # more dimensions than keyed
            cupy_like(8, 1 << 70), float_pointer, Other(0x1000), np.zeros(8, np.float32)]


ARRAYS = _arrays()
USER_OP = MPI.Op.Create(lambda a, b, t: None, commute=True)


class Name(str):
    """A str subclass: no key (Python's or the table's)."""


SENDS = [None, MPI.IN_PLACE, *ARRAYS]
OPS = [MPI.SUM, MPI.PROD, MPI.MAX, Op.SUM, Op.MAX, "sum", USER_OP, object()]
ALGORITHMS = [None, "oneshot", "twoshot", Name("oneshot"), ["oneshot"]]
BATCHES = [None, 1, 2, -1, True, 2.0, 1 << 70, np.int64(2)]
COLLECTIVES = [Collective.ALLREDUCE, Collective.ALLGATHER]

CALLS = st.tuples(st.sampled_from(COLLECTIVES), st.sampled_from(SENDS), st.sampled_from(ARRAYS),
                  st.sampled_from(OPS), st.sampled_from(ALGORITHMS), st.sampled_from(BATCHES))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CALLS, min_size=1, max_size=30), st.lists(CALLS, min_size=1, max_size=30))
def test_the_table_finds_only_what_pythons_key_finds(learned, asked) -> None:
    """Learn the calls as the communicator does (a shape Python keys gets one replay; the
    table learns it under its own key, if it has one); then every call the table finds is
    one whose Python key holds that very replay, and every call it learned it finds."""
    keys, table = CallKeys(CupyLike), table_of()
    plans: dict = {}
    for args in learned:
        key = keys.key(*args)
        if key is None:
            continue
        replay = plans.setdefault(key, object())
        learned_here = table.learn(*args, replay, token())
        assert table.find(*args) is (replay if learned_here else None)
    for args in learned + asked:
        found = table.find(*args)
        if found is not None:
            key = keys.key(*args)
            assert key is not None and plans.get(key) is found, args


def _base_call() -> tuple:
    """Allreduce(send, recv, SUM, algorithm="oneshot", batches=1) of 8 float32 out of place."""
    return (ALLREDUCE, cupy_like(8, 0x2000), cupy_like(8, 0x1000), MPI.SUM, "oneshot", 1)


# One field of _base_call() changed, everything else equal (a shape alone: the same pointer and
# strides, twice the elements).
ONE_FIELD_CHANGED = {
    "collective": lambda c: (Collective.ALLGATHER, *c[1:]),
    "send pointer": lambda c: (c[0], cupy_like(8, 0x3000), *c[2:]),
    "in place": lambda c: (c[0], None, *c[2:]),
    "recv pointer": lambda c: (c[0], c[1], cupy_like(8, 0x4000), *c[3:]),
    "shape": lambda c: (c[0], cupy_like(16, 0x2000), cupy_like(16, 0x1000), *c[3:]),
    "recv shape": lambda c: (c[0], c[1], cupy_like(16, 0x1000), *c[3:]),
    "dtype": lambda c: (c[0], cupy_like(8, 0x2000, np.int32), cupy_like(8, 0x1000, np.int32), *c[3:]),
    "strides": lambda c: (c[0], c[1], _view(cupy_like(16, 0x1000)[::2]), *c[3:]),
    "op": lambda c: (*c[:3], MPI.MAX, *c[4:]),
    "algorithm": lambda c: (*c[:4], "twoshot", c[5]),
    "batches": lambda c: (*c[:5], 2),
}


@pytest.mark.parametrize("field", ONE_FIELD_CHANGED)
def test_a_call_that_differs_in_one_field_is_another_shape(field) -> None:
    """The table learns one call, then does not find it with any one field changed (Python's
    key tells them apart too); learned as well, each finds its own replay."""
    keys, table = CallKeys(CupyLike), table_of()
    base = _base_call()
    other = ONE_FIELD_CHANGED[field](_base_call())
    assert keys.key(*base) != keys.key(*other), "the variant must be another shape for Python too"
    first, second = object(), object()
    assert table.learn(*base, first, token())
    assert table.find(*other) is None
    assert table.learn(*other, second, token())
    assert table.find(*base) is first and table.find(*other) is second


def test_the_table_keys_what_python_keys_for_the_usual_calls() -> None:
    """CuPy arrays, in place or not, MPI's ops, Op, names, None or int batches: keyed."""
    table, hot = table_of(), token()
    x, out = cupy_like(8, 0x1000), cupy_like(8, 0x2000)
    for send in (None, MPI.IN_PLACE, x):
        for op in (MPI.SUM, Op.MAX, "sum"):
            for algorithm, batches in ((None, None), ("oneshot", 2)):
                assert table.learn(ALLREDUCE, send, out, op, algorithm, batches, object(), hot)
    assert len(table) == 2 * 3 * 2  # (in place: None and IN_PLACE one key; x) x ops x (algorithm, batches)


def test_in_place_is_one_shape_and_the_pointer_is_read_at_every_call() -> None:
    table, replay = table_of(), object()
    out = cupy_like(8, 0x2000)
    assert table.learn(ALLREDUCE, None, out, MPI.SUM, None, None, replay, token())
    assert table.find(ALLREDUCE, MPI.IN_PLACE, out, MPI.SUM, None, None) is replay
    out.data = MemoryPointer(0x3000)  # the same object, another pointer
    assert table.find(ALLREDUCE, None, out, MPI.SUM, None, None) is None
    out.shape = (2, 4)  # the same pointer and size, reshaped in place
    out.data = MemoryPointer(0x2000)
    assert table.find(ALLREDUCE, None, out, MPI.SUM, None, None) is None


def test_a_new_row_in_the_algorithm_table_drops_every_entry() -> None:
    table = table_of()
    out = cupy_like(8, 0x2000)
    assert table.learn(ALLREDUCE, None, out, MPI.SUM, None, None, object(), token())
    row = algorithms.Algorithm("table-test-row", 4343, algorithms.HOST, lambda b, c: None,
                               summary="-", best_for="-")
    algorithms.register(row)
    try:
        assert table.find(ALLREDUCE, None, out, MPI.SUM, None, None) is None and len(table) == 0
        assert table.learn(ALLREDUCE, None, out, MPI.SUM, None, None, object(), token())
    finally:
        algorithms.unregister(row.name)
    assert table.find(ALLREDUCE, None, out, MPI.SUM, None, None) is None


def test_a_full_table_starts_again_and_clear_empties_it() -> None:
    module = hot_replay.compiled()
    assert module.TABLE_ENTRIES == PLAN_ENTRIES  # as many shapes as the plans' cache keeps
    table, hot = table_of(), token()
    for i in range(module.TABLE_ENTRIES):
        assert table.learn(ALLREDUCE, None, cupy_like(8, 0x1000 + 64 * i), MPI.SUM, None, None, i, hot)
    assert len(table) == module.TABLE_ENTRIES
    assert table.find(ALLREDUCE, None, cupy_like(8, 0x1000), MPI.SUM, None, None) == 0
    table.learn(ALLREDUCE, None, cupy_like(8, 0x1), MPI.SUM, None, None, "new", hot)
    assert len(table) == 1 and table.find(ALLREDUCE, None, cupy_like(8, 0x1), MPI.SUM, None, None) == "new"
    table.clear()
    assert len(table) == 0 and table.find(ALLREDUCE, None, cupy_like(8, 0x1), MPI.SUM, None, None) is None


def test_the_table_follows_call_keys_array_type() -> None:
    h = Harness("compiled")
    comm = ReplayingCommunicator(h)
    try:
        table, keys = comm.call_keys.compiled, comm.call_keys
        x, out = cupy_like(8, 0x1000), cupy_like(8, 0x2000)
        assert table.learn(ALLREDUCE, x, out, MPI.SUM, None, None, object(), token())
        keys.array_type = Odd  # a test's stand-in type: what was learned goes
        assert table.array_type is Odd and len(table) == 0
        assert not table.learn(ALLREDUCE, x, out, MPI.SUM, None, None, object(), token())
        assert table.learn(ALLREDUCE, None, odd(0x1000), MPI.SUM, None, None, object(), token())
        keys.array_type = None
        assert len(table) == 0 and not table.learn(ALLREDUCE, None, odd(0x1000), MPI.SUM, None, None,
                                                   object(), token())
    finally:
        comm.close()
        h.close()


def test_refusals_and_bad_arguments() -> None:
    module = hot_replay.compiled()
    table = table_of()
    with pytest.raises(TypeError, match="hot must be a HotReplay"):
        table.learn(ALLREDUCE, None, cupy_like(8, 0x1000), MPI.SUM, None, None, object(), object())
    with pytest.raises(TypeError, match="takes"):
        table.run(ALLREDUCE, None, cupy_like(8, 0x1000))
    with pytest.raises(ValueError, match="aligned int64"):
        module.CallTable(array_type=CupyLike, in_place=MPI.IN_PLACE, version=3, lock=threading.Lock(),
                         finish=_no_finish, keep=None)
    with pytest.raises(RuntimeError, match="__init__"):
        module.CallTable.__new__(module.CallTable).find(ALLREDUCE, None, None, None, None, None)
    with pytest.raises(TypeError, match="a type or None"):
        table.array_type = 3


# -- whole calls: Communicator.Allreduce with the table, without it, with the Python replay ----

WAYS = ("table", "compiled", "python")  # the call table; the compiled replay after Python's key; Python


def communicator(way: str) -> tuple[Harness, ReplayingCommunicator]:
    h = Harness("python" if way == "python" else "compiled")
    return h, ReplayingCommunicator(h, table=way == "table")


def run_ways(script) -> dict[str, dict]:
    """``script(h, comm)`` with each way; the states afterwards (and the full-path count)."""
    states = {}
    for way in WAYS:
        h, comm = communicator(way)
        try:
            outcome = script(h, comm)
            states[way] = {**h.state(), "outcome": outcome, "full path": comm.full_path}
        finally:
            comm.close()
            h.close()
    return states


def allreduce(comm: ReplayingCommunicator, *args, **kwargs) -> str:
    """One call; "replayed", "full path" (the full path ran it), or the error it raised."""
    before, replayed = comm.full_path, comm.stats().replayed
    try:
        comm.Allreduce(*args, **kwargs)
    except Exception as err:  # noqa: BLE001 - compared between the ways
        return describe_error(err) or ""
    if comm.full_path > before:
        return "full path"
    return "replayed" if comm.stats().replayed > replayed else "nothing"


def test_whole_calls_replay_through_the_table() -> None:
    h, comm = communicator("table")
    try:
        x, out = cupy_like(2048, 0x7000), cupy_like(2048, 0x9000)
        comm.keep(h.replay(), out, x)
        assert [allreduce(comm, x, out) for _ in range(3)] == ["replayed"] * 3
        assert len(comm.call_keys.compiled) == 1  # learned at the first replay: later ones in C
        assert allreduce(comm, x, cupy_like(2048, 0x9000)) == "replayed"  # another object, same shape
        assert allreduce(comm, out, x) == "full path"  # another shape
        assert allreduce(comm, x, out, MPI.MAX) == "full path"
        assert h.words.replayed[0] == 4 and comm.full_path == 2
    finally:
        comm.close()
        h.close()


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_every_rare_case_ends_alike_through_the_table(event) -> None:
    """Three calls, the event, three calls, through Communicator.Allreduce: what each did or
    raised, the board, launches, events, failure mark and counts are the same all three ways."""
    def script(h, comm) -> list:
        h.capturing = False
        x, out = cupy_like(2048, 0x7000), cupy_like(2048, 0x9000)
        comm.keep(h.replay(capturing=lambda: h.capturing), out, x)
        done = [allreduce(comm, x, out) for _ in range(3)]
        EVENTS[event](h)
        return done + [allreduce(comm, x, out) for _ in range(3)]
    states = run_ways(script)
    assert states["table"] == states["compiled"] == states["python"]
    assert states["table"]["outcome"][:3] == ["replayed"] * 3


OPERATIONS = st.sampled_from(["call a", "call a", "call a", "call b", "call c", "new stream", "old stream",
                              "skipped", "capture on", "capture off", "clear", "new row", "busy"])


def start(comm: ReplayingCommunicator, request) -> str:
    """One persistent request's Start (``comm.Allreduce_init``); what it did, as :func:`allreduce`
    says it."""
    before, replayed = comm.full_path, comm.stats().replayed
    try:
        request.Start()
    except Exception as err:  # noqa: BLE001 - compared with the plain calls'
        return describe_error(err) or ""
    if comm.full_path > before:
        return "full path"
    return "replayed" if comm.stats().replayed > replayed else "nothing"


@pytest.mark.parametrize("event", sorted(EVENTS))
def test_every_rare_case_ends_alike_for_a_persistent_start(event) -> None:
    """The rare-case script above with each call made as a persistent request's Start
    (mpiring.call.persistent): every way, the same outcomes and state as with Allreduce."""
    def script(h, comm, persistent: bool) -> list:
        h.capturing = False
        x, out = cupy_like(2048, 0x7000), cupy_like(2048, 0x9000)
        comm.keep(h.replay(capturing=lambda: h.capturing), out, x)
        request = comm.Allreduce_init(x, out)
        call = (lambda: start(comm, request)) if persistent else (lambda: allreduce(comm, x, out))
        done = [call() for _ in range(3)]
        EVENTS[event](h)
        return done + [call() for _ in range(3)]
    plain = run_ways(lambda h, comm: script(h, comm, False))
    persistent = run_ways(lambda h, comm: script(h, comm, True))
    assert persistent == plain


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPERATIONS, min_size=1, max_size=40))
def test_any_sequence_of_whole_calls_ends_alike(operations) -> None:
    """Calls of three shapes (one checked, one not, one never planned: the full path) mixed
    with stream switches, skipped-call reports, captures, the plans dropped, a row registered
    and a call from another thread while one is in progress: the same state all three ways;
    and the same again with every call made as a persistent request's Start."""
    plain = run_ways(lambda h, comm: sequence(h, comm, operations, False))
    assert plain["table"] == plain["compiled"] == plain["python"]
    assert run_ways(lambda h, comm: sequence(h, comm, operations, True)) == plain


def sequence(h: Harness, comm: ReplayingCommunicator, operations: list[str], persistent: bool) -> list:
    """``operations`` (:data:`OPERATIONS`) on ``comm``; what each call did. ``persistent``: each
    call is the Start of its shape's request, made before the first."""
    h.capturing = False
    streams = [h.gpu.current, FakeStream(0x6000)]
    x, out, other = cupy_like(2048, 0x7000), cupy_like(2048, 0x9000), cupy_like(64, 0xB000)
    planted = {"a": (h.replay(capturing=lambda: h.capturing), out, x),
               "b": (h.replay(tuple(range(7)), checked=False), x, None)}
    for replay, recv, send in planted.values():
        comm.keep(replay, recv, send)
    shapes = {which: (planted[which][1], planted[which][2]) if which in planted else (other, None)
              for which in "abc"}
    requests = {which: comm.Allreduce_init(send, recv) for which, (recv, send) in shapes.items()}

    def call(which: str) -> str:
        recv, send = shapes[which]
        return start(comm, requests[which]) if persistent else allreduce(comm, send, recv)

    done: list = []
    for op in operations:
        if op.startswith("call"):
            done.append(call(op[-1]))
        elif op in ("new stream", "old stream"):
            h.gpu.current = streams[op == "new stream"]
        elif op == "skipped":
            skipped(h)
        elif op == "clear":  # e.g. the check setter: every plan (and the table) goes, then comes back
            comm.forget()
            for replay, recv, send in planted.values():
                comm.keep(replay, recv, send)
        elif op == "new row":
            row = algorithms.Algorithm("sequence-row", 4545, algorithms.HOST, lambda b, c: None,
                                       summary="-", best_for="-")
            algorithms.register(row)
            algorithms.unregister(row.name)
            for replay, recv, send in planted.values():  # the plans' keys named the old version
                comm.keep(replay, recv, send)
        elif op == "busy":  # a call while another thread's is in progress: ConcurrentCallError
            with comm.busy():
                done.append(call("a"))
        else:
            h.capturing = op == "capture on"
    return done


def busy_call(comm: ReplayingCommunicator, x, out) -> str:
    """A call while another thread's call is in progress: ConcurrentCallError."""
    with comm.busy():
        return allreduce(comm, x, out)


def test_a_call_in_progress_elsewhere_is_refused_by_name() -> None:
    h, comm = communicator("table")
    try:
        x, out = cupy_like(2048, 0x7000), cupy_like(2048, 0x9000)
        comm.keep(h.replay(), out, x)
        allreduce(comm, x, out)
        assert busy_call(comm, x, out).startswith(ConcurrentCallError.__name__)
        assert allreduce(comm, x, out) == "replayed"
    finally:
        comm.close()
        h.close()


def test_a_stream_change_through_the_table_waits_once() -> None:
    def script(h, comm) -> list:
        x, out = cupy_like(2048, 0x7000), cupy_like(2048, 0x9000)
        comm.keep(h.replay(), out, x)
        done = [allreduce(comm, x, out) for _ in range(2)]
        new_stream(h)
        return done + [allreduce(comm, x, out) for _ in range(2)]
    states = run_ways(script)
    assert states["table"] == states["python"]
    assert states["table"]["events"] == [("record", 0x5000), ("wait", 0x6000)]


def test_replayed_calls_leave_nothing_behind() -> None:
    """The table's calls allocate nothing that stays (no reference leaks either)."""
    h = Harness("compiled", noop_launch=True)  # (the recording launch keeps every launch)
    comm = ReplayingCommunicator(h)
    try:
        x, out = cupy_like(2048, 0x7000), cupy_like(2048, 0x9000)
        replay = h.replay(checked=False)
        comm.keep(replay, out, x)
        for _ in range(1000):
            comm.Allreduce(x, out)
        counts = [sys.getrefcount(o) for o in (replay, replay.hot, x, out, x.dtype, MPI.SUM)]
        blocks = sys.getallocatedblocks()
        for _ in range(20_000):
            comm.Allreduce(x, out)
        assert [sys.getrefcount(o) for o in (replay, replay.hot, x, out, x.dtype, MPI.SUM)] == counts
        assert sys.getallocatedblocks() - blocks < 50
        assert comm.full_path == 0 and h.words.replayed[0] == 21_000
    finally:
        comm.close()
        h.close()


def test_a_table_in_a_reference_cycle_is_collected() -> None:
    """A communicator's table holds its replayer's finish, which holds the communicator: a cycle
    through the table, which the GC must see through (entries held)."""
    class Owner:
        def finish(self, replay, outcome) -> bool:
            return _no_finish(replay, outcome)

    owner = Owner()
    address, keep = algorithms.version_word()
    owner.table = hot_replay.compiled().CallTable(array_type=CupyLike, in_place=MPI.IN_PLACE, version=address,
                                                  lock=threading.Lock(), finish=owner.finish, keep=keep)
    owner.table.learn(ALLREDUCE, None, cupy_like(8, 0x1000), MPI.SUM, None, None, owner, token())
    gone = weakref.ref(owner)  # (the table, held by the owner alone, goes with it)
    del owner
    gc.collect()
    assert gone() is None


def test_no_table_without_a_keyed_array_type_or_the_extension() -> None:
    h = Harness("compiled")
    try:
        assert h.hot is not None
        assert h.hot.call_table(threading.Lock(), _no_finish, CallKeys(None), PlanCache()) is None
    finally:
        h.close()
    assert hot_replay.HotPath.make(hot_replay.CallWords(), None, None, None) is None  # type: ignore[arg-type]


class Mutable(np.ndarray):
    """An array type whose class a test changes (its strides property replaced, then removed)."""

    __slots__ = ("data",)


def test_a_type_changed_since_is_read_anew() -> None:
    """The table reads an attribute through the data descriptor it found on the type, until the
    type (or a base) changes: then it looks again, as Python's key does at every call."""
    table, keys = table_of(Mutable), CallKeys(Mutable)
    a = np.zeros(8, np.float32).view(Mutable)
    a.data = MemoryPointer(0x1000)
    args = (ALLREDUCE, None, a, MPI.SUM, None, None)
    before = keys.key(*args)
    assert table.learn(*args, "replay", token()) and table.find(*args) == "replay"
    Mutable.strides = property(lambda self: (8,))  # type: ignore[assignment,misc]
    try:
        assert keys.key(*args) != before and table.find(*args) is None
    finally:
        del Mutable.strides
    assert keys.key(*args) == before and table.find(*args) == "replay"


def test_plain_attributes_are_read_as_python_reads_them() -> None:
    """A type without data descriptors (instance attributes): read through getattr, anew."""
    table = table_of(Other)
    o = Other(0x1000)
    args = (ALLREDUCE, None, o, MPI.SUM, None, None)
    assert table.learn(*args, "replay", token()) and table.find(*args) == "replay"
    o.shape, o.strides = (2, 4), (16, 4)
    assert table.find(*args) is None
    o.shape, o.strides = (8,), (4,)
    o.data = MemoryPointer(0x2000)
    assert table.find(*args) is None
    o.data = MemoryPointer(0x1000)
    assert table.find(*args) == "replay"


class Raising(np.ndarray):
    """An array type whose ``shape`` raises ``error`` (when set)."""

    __slots__ = ("data", "error")

    @property
    def shape(self):  # type: ignore[override]
        if self.error is not None:
            raise self.error
        return np.ndarray.shape.__get__(self)


@pytest.mark.parametrize("lock", ["CallLock", "threading.Lock"])
def test_an_attribute_that_raises_is_no_key_and_an_interrupt_goes_through(lock) -> None:
    """An Exception while reading the key: no key here (Python reads it again and raises it);
    anything else (KeyboardInterrupt) propagates at once, and the lock is released."""
    the_lock = hot_replay.new_lock() if lock == "CallLock" else threading.Lock()
    address, keep = algorithms.version_word()
    table = hot_replay.compiled().CallTable(array_type=Raising, in_place=MPI.IN_PLACE, version=address,
                                            lock=the_lock, finish=_no_finish, keep=keep)
    r = np.zeros(8, np.float32).view(Raising)
    r.data, r.error = MemoryPointer(0x1000), None
    args = (ALLREDUCE, None, r, MPI.SUM, None, None)
    assert table.learn(*args, "replay", token()) and table.find(*args) == "replay"
    r.error = ValueError("no shape today")
    assert table.find(*args) is None and table.run(*args) is None
    assert not table.learn(*args, "replay", token())
    r.error = KeyboardInterrupt()
    for method in (table.find, table.run):
        with pytest.raises(KeyboardInterrupt):
            method(*args)
    assert not the_lock.locked()


@pytest.mark.parametrize("way", WAYS)
def test_threads_racing_on_one_communicator_never_share_a_call(way) -> None:
    """Four threads calling one communicator at once, with the interpreter switching threads as
    often as it can: every call either replays (one launch) or raises ConcurrentCallError
    (nothing launched); no launch is lost or doubled, and the lock is free at the end."""
    h, comm = communicator(way)
    interval = sys.getswitchinterval()
    try:
        x, out = cupy_like(2048, 0x7000), cupy_like(2048, 0x9000)
        comm.keep(h.replay(), out, x)
        outcomes: list[list[str]] = [[] for _ in range(4)]
        start = threading.Barrier(len(outcomes))

        def calls(mine: list[str]) -> None:
            start.wait()
            mine.extend(allreduce(comm, x, out) for _ in range(400))

        sys.setswitchinterval(1e-6)
        threads = [threading.Thread(target=calls, args=(mine,)) for mine in outcomes]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        sys.setswitchinterval(interval)
        assert not any(t.is_alive() for t in threads)
        every = [o for mine in outcomes for o in mine]
        replayed = every.count("replayed")
        refused = [o for o in every if o != "replayed"]
        assert len(every) == 1600 and all(o.startswith(ConcurrentCallError.__name__) for o in refused), \
            sorted(set(refused))
        assert len(h.launches.log) == replayed == comm.stats().replayed
        assert allreduce(comm, x, out) == "replayed"  # the lock was left free
    finally:
        sys.setswitchinterval(interval)
        comm.close()
        h.close()
