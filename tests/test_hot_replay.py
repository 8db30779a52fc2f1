"""mpiring.call.hot_replay: the compiled replay does what the Python replay does, call for call:
the same launches (function, grid, block, stream and the parameter values read back through the
pointer), the same agreement posts (the board's words after N calls), the same counts, and the
same outcome of every rare case (failed, closed, a GPU or watchdog failure, a capture, a failed
launch, a stream change, calls the GPU check skipped). One rank, a board of its own (the peers'
cases: tests/mpi/test_mpi_hot_replay.py). No GPU: the launch is a recording fake."""

from __future__ import annotations

import ctypes
import importlib.util

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpiring.call import hot_replay
from mpiring.core import descriptor
from mpiring.core.errors import MpiringError
from mpiring.cuda.contract import (
    KIND,
    KIND_ONESHOT,
    MM_CALL,
    MM_COUNT,
    MM_KIND,
    MM_MINE,
    MM_PEER,
    MM_THEIRS,
    PEER,
    SEQ,
    STATE,
    TIMED_OUT,
)
from tools.replay_bench import (
    BLOCKS,
    FUNCTION,
    HAVE_EXTENSION,
    MODES,
    THREADS,
    FakeStream,
    Harness,
)


def describe_error(err: BaseException | None) -> str | None:
    """An exception as the tests compare it: its type and message."""
    return None if err is None else f"{type(err).__name__}: {err}"


needs_extension = pytest.mark.skipif(not HAVE_EXTENSION, reason="the extension is not built "
                                     "(python -m tools.build_hotpath)")
ARGS = (0x7F00_0000_1000, 0x7F00_0000_2000, 123_456_789_012, 0xC0FFEE, 1, -5, 1 << 40)


@pytest.fixture(params=MODES)
def harness(request):
    if request.param == "compiled" and not HAVE_EXTENSION:
        pytest.skip("the extension is not built (python -m tools.build_hotpath)")
    h = Harness(request.param)
    yield h
    h.close()


def run_both(script) -> tuple[dict, dict]:
    """``script(harness)`` on a compiled and a Python harness; their states afterwards."""
    states = []
    for mode in MODES:
        h = Harness(mode)
        try:
            outcome = script(h)
            states.append({**h.state(), "outcome": outcome})
        finally:
            h.close()
    return states[0], states[1]


def calls(h: Harness, n: int, replay=None) -> list[str]:
    """``n`` calls of one replay; what each did (or raised)."""
    replay = replay or h.replay(ARGS)
    done = []
    for _ in range(n):
        try:
            done.append(h.call(replay))
        except Exception as err:  # noqa: BLE001 - compared between the paths
            done.append(describe_error(err))
    return done


@needs_extension
def test_the_launch_gets_the_function_grid_block_stream_and_the_bound_params() -> None:
    h = Harness("compiled")
    try:
        replay = h.replay(ARGS)
        assert replay.hot.run() == hot_replay.FALLBACK  # no stream yet: Python orders it
        assert h.call(replay) == "replayed"
        # The first compiled call hands the skipped count to Python once (it knows what it raised)
        assert replay.hot.run() == hot_replay.REPLAYED_REPORT
        h.check.after()
        for _ in range(4):
            assert replay.hot.run() == hot_replay.REPLAYED  # nothing for Python to do
        assert len(h.launches.log) == 6
        for entry, params in zip(h.launches.log, h.launches.params_seen, strict=True):
            assert entry == (FUNCTION, (BLOCKS, 1, 1), (THREADS, 1, 1), 0, 0x5000, ARGS, 0)
            assert params == replay.enqueue.launch.params  # the bound buffer, never a copy
        assert h.words.replayed[0] == 6 and h.agreement.calls == 6
    finally:
        h.close()


@needs_extension
@pytest.mark.parametrize("n", [1, 3, 4, 5, 11, 40])
def test_n_calls_leave_the_same_board_counts_and_launches(n) -> None:
    """The post writes line k % D and count k, waits (one rank: never long) where D - 1 calls
    ahead: the board's words, the check's count and the launches are the same both ways."""
    compiled, python = run_both(lambda h: calls(h, n))
    assert compiled == python
    assert compiled["calls"] == n == compiled["replayed"]


@needs_extension
def test_without_the_check_nothing_is_posted() -> None:
    def script(h: Harness) -> list[str]:
        return calls(h, 7, h.replay(ARGS, checked=False))
    compiled, python = run_both(script)
    assert compiled == python and compiled["calls"] == 0 and compiled["replayed"] == 7


def test_the_setting_turns_the_compiled_replay_off() -> None:
    built = importlib.util.find_spec(hot_replay.EXTENSION) is not None  # whatever the environment says
    assert hot_replay.compiled({"MPIRING_HOTPATH": "0"}) is None
    assert (hot_replay.compiled({"MPIRING_HOTPATH": "1"}) is not None) == built


def timed_out(h: Harness) -> None:
    h.gpu.words[[STATE, KIND, PEER, SEQ]] = (TIMED_OUT, KIND_ONESHOT, 1, 17)


def watchdog(h: Harness) -> None:
    h.gpu.set_watchdog_error(MpiringError("rank 0: the watchdog found a ring call stuck"))


def capture(h: Harness) -> None:
    h.capturing = True


def launch_fails(h: Harness) -> None:
    h.launches.status = 700  # CUDA_ERROR_ILLEGAL_ADDRESS


def skipped(h: Harness) -> None:
    """The GPU check skipped a call: the kernel's report (status.cuh's report_mismatch)."""
    words = h.gpu.words
    mine = descriptor.pack({"count": 8, "dtype": 1, "op": 0, "algorithm": 5, "collective": 1}, 4)
    theirs = descriptor.pack({"count": 9, "dtype": 1, "op": 0, "algorithm": 5, "collective": 1}, 4)
    words[[MM_KIND, MM_PEER, MM_CALL]] = (KIND_ONESHOT, 1, 3)
    words[MM_THEIRS:MM_THEIRS + 2] = theirs
    words[MM_MINE:MM_MINE + 2] = mine
    words[MM_COUNT] += 1


def new_stream(h: Harness) -> None:
    h.gpu.current = FakeStream(0x6000)


def same_handle_new_object(h: Harness) -> None:
    h.gpu.current = FakeStream(h.gpu.current.ptr)


EVENTS = {"failed": lambda h: h.refuse(closed=False), "closed": lambda h: h.refuse(closed=True),
          "gpu timeout": timed_out, "watchdog": watchdog, "capture": capture, "launch fails": launch_fails,
          "skipped call": skipped, "new stream": new_stream, "same handle": same_handle_new_object}


@needs_extension
@pytest.mark.parametrize("event", sorted(EVENTS))
def test_every_rare_case_ends_as_in_python(event) -> None:
    """Three calls, the event, three calls: what each call did or raised (type and message),
    the board, the launches and events, the failure mark, the counts: all the same."""
    def script(h: Harness) -> list:
        h.capturing = False
        replay = h.replay(ARGS, capturing=lambda: h.capturing)
        before = calls(h, 3, replay)
        EVENTS[event](h)
        return before + calls(h, 3, replay)
    compiled, python = run_both(script)
    assert compiled == python
    done = compiled["outcome"]
    assert done[:3] == ["replayed"] * 3
    if event in ("failed", "closed", "capture"):
        assert done[3:] == ["full path"] * 3  # the full path raises (or runs the capture)
    elif event in ("gpu timeout", "watchdog", "launch fails"):
        assert done[3].split(":")[0] in ("MpiringTimeoutError", "MpiringError", "FakeDriverError")
        assert done[4:] == ["full path"] * 2 and compiled["failed"]
    elif event == "skipped call":
        assert done[3].startswith("RankMismatchError") and done[4:] == ["replayed"] * 2
    else:
        assert done[3:] == ["replayed"] * 3


@needs_extension
def test_a_stream_change_waits_for_the_previous_stream_once() -> None:
    def script(h: Harness) -> list[str]:
        replay = h.replay(ARGS)
        done = calls(h, 2, replay)
        new_stream(h)
        return done + calls(h, 2, replay)
    compiled, python = run_both(script)
    assert compiled == python
    assert compiled["events"] == [("record", 0x5000), ("wait", 0x6000)]
    assert [entry[4] for entry in compiled["launches"]] == [0x5000, 0x5000, 0x6000, 0x6000]


@needs_extension
def test_only_a_bound_launch_on_the_ordered_stream_is_compiled() -> None:
    h = Harness("compiled")
    try:
        replay = h.replay(ARGS)
        assert replay.hot is not None and replay.hot.posts
        other = replay._replace(enqueue=lambda: None, hot=None)
        assert h.hot is not None and h.hot.bind(other) is None
    finally:
        h.close()


@needs_extension
def test_the_extension_refuses_bad_addresses() -> None:
    h = Harness("compiled")
    try:
        replay = h.replay(ARGS)
        assert h.hot is not None
        good = h.hot.bind(replay)
        assert good is not None
        with pytest.raises(ValueError, match="aligned int64"):
            h.hot.module.HotReplay(**{**_arguments(h, replay), "refusing": 3})
        with pytest.raises(ValueError, match="line of 12 bytes"):
            h.hot.module.HotReplay(**{**_arguments(h, replay), "line": b"x" * 12})
        with pytest.raises(TypeError, match="stream_order"):
            h.hot.module.HotReplay(**{**_arguments(h, replay), "stream_order": [None]})
    finally:
        h.close()


def _arguments(h: Harness, replay) -> dict:
    """The keyword arguments HotPath.bind gives the extension, for one replay."""
    captured = {}

    class Spy:
        def HotReplay(self, **kwargs):  # noqa: N802 - the extension's name
            captured.update(kwargs)

    module, h.hot.module = h.hot.module, Spy()
    try:
        h.hot.bind(replay)
    finally:
        h.hot.module = module
    return captured


OPERATIONS = st.sampled_from(["call", "call", "call", "call", "new stream", "old stream", "skipped",
                              "capture on", "capture off", "unchecked call"])


@needs_extension
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPERATIONS, min_size=1, max_size=40))
def test_any_sequence_of_calls_and_changes_ends_alike(operations) -> None:
    """Calls of two shapes (one checked, one not) mixed with stream switches, skipped-call
    reports and captures: both paths end in the same state, every call alike."""
    def script(h: Harness) -> list:
        h.capturing = False
        streams = [h.gpu.current, FakeStream(0x6000)]
        checked = h.replay(ARGS, capturing=lambda: h.capturing)
        unchecked = h.replay(tuple(a + 1 for a in ARGS), checked=False)
        done: list = []
        for op in operations:
            if op in ("call", "unchecked call"):
                done += calls(h, 1, checked if op == "call" else unchecked)
            elif op in ("new stream", "old stream"):
                h.gpu.current = streams[op == "new stream"]
            elif op == "skipped":
                skipped(h)
            else:
                h.capturing = op == "capture on"
        return done
    compiled, python = run_both(script)
    assert compiled == python


@needs_extension
def test_the_driver_address_comes_from_libcuda_or_says_why_not() -> None:
    from mpiring.call import _hotpath  # type: ignore[attr-defined]

    try:
        address = _hotpath.cuda_launch_address()
    except OSError as err:
        assert "libcuda.so.1" in str(err)
    else:
        assert address == ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value


@needs_extension
def test_an_object_never_initialised_refuses_to_run() -> None:
    from mpiring.call import _hotpath  # type: ignore[attr-defined]

    with pytest.raises(RuntimeError, match="did not complete"):
        _hotpath.HotReplay.__new__(_hotpath.HotReplay).run()
