"""ce-twoshot's compiled host path against its Python reference, on the CPU (no GPU, no driver):

* a call shape's program (AllToAllEngine.program), read in Python, issues exactly the device
  calls the reference walk of the issue order (AllToAllEngine.enqueue) issues: same order, same
  arguments, for any plan, rank, rounds before the call and buffer addresses;
* the C executor (mpiring/cuda/_streamprog.c, built here from its source), calling recording
  stand-ins of the driver's entry points, makes exactly the driver calls ce-twoshot's Python
  device makes through cuda.bindings and cuLaunchKernel (waits, writes and their flags, copies,
  fold launches with their grids and every parameter read back), over consecutive calls; a
  driver failure at any call stops both at that call with the same error and no rounds counted;
* the program cache: one program per call shape, rounds and parity; bounded;
* MPIRING_CE_AREA_MIB: parsed, bounded, a power of two, the staging's size.

The simulated GPUs of tests/test_alltoall_engine.py run every path too (results, not calls).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mpiring.algorithms import ce_twoshot
from mpiring.core import settings as mpiring_settings
from mpiring.core.errors import InvalidArgumentError
from mpiring.cuda import streamprog
from mpiring.cuda.alltoall_layout import AllToAllLayout
from mpiring.cuda.memops import StreamMemOps
from mpiring.ring import alltoall_engine
from mpiring.ring.alltoall_engine import AllToAllEngine
from mpiring.ring.alltoall_schedule import AllToAllPlan, Rounds
from mpiring.ring.schedule import Phase
from tools import streamprog_bench as bench

AREA = 1024  # bytes per staging area in these tests


class Recorder:
    """A device that records what it is asked, as tuples."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def prepare(self, fn: int, itemsize: int) -> None:
        pass

    def wait_geq(self, stream: int, addr: int, value: int) -> None:
        self.calls.append(("wait", stream, addr, value))

    def write(self, stream: int, addr: int, value: int) -> None:
        self.calls.append(("write", stream, addr, value))

    def copy(self, stream: int, dst: int, src: int, nbytes: int) -> None:
        self.calls.append(("copy", stream, dst, src, nbytes))

    def fold(self, stream: int, out: int, mine: int, table: int, me: int, ranks: int, count: int) -> None:
        self.calls.append(("fold", stream, out, mine, table, me, ranks, count))


def streams(size: int, shared: bool) -> dict:
    """Stream handles as ce-twoshot makes them: one per phase (shared) or one per peer."""
    found: dict = {("rs", p): 100 if shared else 100 + p for p in range(size)}
    found |= {("ag", p): 200 if shared else 200 + p for p in range(size)}
    return found | {"fold": 7, "collect": 8}


def engine(size: int, rank: int, device, shared: bool = False) -> AllToAllEngine:
    addr = lambda r, offset: ((r + 1) << 44) + offset  # noqa: E731 - every rank's staging, mapped here
    return AllToAllEngine(rank, AllToAllLayout(size, AREA), addr, device, streams(size, shared))


PLANS = st.builds(
    lambda size, rank, phase, block, extra, chunk, in_place: (
        AllToAllPlan(size, size * block + (extra if phase is Phase.ALLREDUCE else 0), chunk, phase, in_place),
        rank % size),
    st.integers(2, 8), st.integers(0, 7), st.sampled_from(list(Phase)), st.integers(0, 300),
    st.integers(0, 7), st.integers(1, AREA // 8), st.booleans())
DONE = st.integers(0, 5) | st.integers(0, 1 << 40)
ROUNDS = st.builds(Rounds, DONE, DONE)
ADDRESS = st.integers(1, 1 << 20).map(lambda k: (1 << 46) + 2 * k)  # any 2-byte alignment


# -- the program is the reference's calls ---------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(plan=PLANS, done=ROUNDS, itemsize=st.sampled_from([2, 4, 8]), src=ADDRESS, dst=ADDRESS,
       shared=st.booleans())
def test_the_program_issues_what_the_reference_issues(plan, done, itemsize, src, dst, shared) -> None:
    plan, rank = plan
    if plan.chunk * itemsize > AREA:
        plan = AllToAllPlan(plan.size, plan.count, AREA // itemsize, plan.phase, plan.in_place)
    want, got = Recorder(), Recorder()
    reference, compiled = engine(plan.size, rank, want, shared), engine(plan.size, rank, got, shared)
    reference.done = compiled.done = done
    reference.enqueue(plan, src, dst, itemsize)
    compiled.enqueue_program(plan, src, dst, itemsize, lambda p, i, o, s, g: p.issue(got, i, o, s, g))
    assert got.calls == want.calls
    assert compiled.done == reference.done == plan.after(done)


def test_programs_are_kept_per_shape_rounds_and_parity() -> None:
    e = engine(4, 1, Recorder())
    plan = AllToAllPlan(4, 4 * 300, 64)  # 5 rounds: the parity changes from call to call
    made = []
    for done in (Rounds(0, 0), Rounds(1, 1), Rounds(2, 2), Rounds(3, 3), Rounds(4, 4), Rounds(7, 9),
                 Rounds(8, 9)):
        e.done = done
        made.append(e.program(plan, 4))
    # 0, 1: their own; 2 and 4 alike (even), 3 and 7/9 alike (odd); a mix of parities its own
    assert made[2] is made[4] and made[3] is made[5] and len({id(p) for p in made}) == 5
    assert made[6] is not made[5]


def test_the_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    e = engine(3, 0, Recorder())
    for count in range(3, 3 * (alltoall_engine.PROGRAMS_KEPT + 10), 3):
        e.program(AllToAllPlan(3, count, 16), 4)
    assert e.programs_held[0] == alltoall_engine.PROGRAMS_KEPT
    monkeypatch.setattr(alltoall_engine, "PROGRAM_BYTES_KEPT", 10_000)
    big = e.program(AllToAllPlan(3, 3 * 16 * 40, 16), 4)  # 40 rounds: over 10 kB alone
    assert big.nbytes > 10_000 and e.programs_held == (1, big.nbytes)
    assert e.program(AllToAllPlan(3, 3 * 16 * 40, 16), 4) is big


def test_a_program_is_read_only_records_of_fixed_width() -> None:
    program = engine(2, 0, Recorder()).program(AllToAllPlan(2, 100, 16), 4)
    assert program.records.shape[1] == streamprog.WIDTH and not program.records.flags.writeable
    with pytest.raises(ValueError, match="int64 array"):
        streamprog.Program(np.zeros((3, 5), np.int64), 0, 2, 4)


# -- the C executor makes the Python device's driver calls ------------------------------------------


@pytest.fixture(scope="module")
def module(tmp_path_factory: pytest.TempPathFactory):
    import shutil

    if shutil.which("gcc") is None:
        pytest.skip("no gcc to build mpiring/cuda/_streamprog.c")
    return bench.extension(tmp_path_factory.mktemp("streamprog"))


def both(module, plans, rank: int, itemsize: int, buffers, fail_at: int = -1, flush: bool = True,
         shared: bool = False) -> tuple[dict, dict]:
    """``plans`` called one after the other on rank ``rank``, by the Python device and by the
    executor: each side's driver calls, errors and rounds."""
    sides = {}
    for way in ("python", "compiled"):
        calls = bench.DriverCalls(fail_at)
        device = bench.reference_device(calls, flush)
        run = (None if way == "python" else
               bench.executor(module, bench.CFunctions(calls),
                              StreamMemOps(0, bench.FakeDriver(calls, flush))))
        e = engine(plans[0].size, rank, device, shared)
        device.prepare(bench.FUNCTION, itemsize)
        errors = []
        for plan, (src, dst) in zip(plans, buffers, strict=True):
            try:
                ce_twoshot.issue_call(e, run, plan, src, dst, itemsize, bench.FUNCTION)
                errors.append(None)
            except Exception as err:  # noqa: BLE001 - compared between the paths
                errors.append(f"{type(err).__name__}: {err}")
        sides[way] = {"calls": calls.entries, "errors": errors, "done": e.done}
    return sides["python"], sides["compiled"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(2, 8), rank=st.integers(0, 7), calls=st.lists(st.tuples(
    st.sampled_from(list(Phase)), st.integers(0, 400), st.integers(0, 7), st.booleans(), ADDRESS, ADDRESS),
    min_size=1, max_size=4), itemsize=st.sampled_from([1, 2, 4, 8]), flush=st.booleans(),
    shared=st.booleans())
def test_the_executor_makes_the_python_devices_driver_calls(module, size, rank, calls, itemsize, flush,
                                                            shared) -> None:
    chunk = AREA // itemsize
    plans = [AllToAllPlan(size, size * block + (extra if phase is Phase.ALLREDUCE else 0), chunk, phase,
                          in_place)
             for phase, block, extra, in_place, _, _ in calls]
    buffers = [(src, dst) for *_, src, dst in calls]
    python, compiled = both(module, plans, rank % size, itemsize, buffers, flush=flush, shared=shared)
    assert compiled == python
    assert python["errors"] == [None] * len(plans)
    launches = [c for c in python["calls"] if c[0] == "launch"]
    assert any(c[0] == "wait" for c in python["calls"]) or not any(p.count for p in plans)
    for launch in launches:  # the grid: fold_n's rule, with the call's own addresses
        out, mine, _, _, _, count, vectorized = launch[10][:7]
        assert vectorized == int((out | mine) % 16 == 0) and launch[10][7:] == bench.GUARD
        per_block = ce_twoshot.THREADS * (16 // itemsize if vectorized else 1)
        assert launch[2] == min(bench.MAX_BLOCKS, -(-count // per_block))


def test_a_big_call_at_eight_ranks_launches_many_folds_alike(module) -> None:
    plans = [AllToAllPlan(8, 8 * 40_000 + 3, AREA // 2, Phase.ALLREDUCE, False)] * 3
    buffers = [(1 << 46, (1 << 46) + 6), ((1 << 46) + 16, (1 << 47)), ((1 << 46) + 2, (1 << 46) + 2)]
    python, compiled = both(module, plans, 0, 2, buffers)
    assert compiled == python and len(python["calls"]) > 3 * 79 * 80
    assert {c[10][6] for c in python["calls"] if c[0] == "launch"} == {0, 1}  # both fold paths


@pytest.mark.parametrize("phase", list(Phase))
def test_a_driver_failure_stops_both_at_the_same_call_with_the_same_error(module, phase) -> None:
    """Every call of two consecutive calls made to fail in turn: the calls made up to it, the
    error (a wait's, a write's, a copy's RuntimeError, a launch's error), the calls after
    (none of the failed call; a next call still issues) and the rounds counted are the same."""
    plans = [AllToAllPlan(3, 3 * 40, 16, phase, False),
             AllToAllPlan(3, 3 * 40 + (phase is Phase.ALLREDUCE), 16, phase, True)]
    buffers = [(1 << 46, 1 << 47), ((1 << 47) + 4, (1 << 47) + 4)]
    total = len(both(module, plans, 1, 4, buffers)[0]["calls"])
    kinds = set()
    for k in range(total):
        python, compiled = both(module, plans, 1, 4, buffers, fail_at=k)
        assert compiled == python, k
        assert python["calls"][k:k + 1] and sum(e is not None for e in python["errors"]) == 1
        kinds.add(python["errors"][0] or python["errors"][1])
    assert any(k.startswith("RuntimeError: cuStreamWaitValue64 failed: ")
               and "CUDA_ERROR_ILLEGAL_ADDRESS" in k for k in kinds)
    assert any("cuMemcpyAsync failed" in k for k in kinds)
    assert any("cuStreamWriteValue64 failed" in k for k in kinds)
    assert any(k.startswith("FakeLaunchError") for k in kinds) == (phase is not Phase.ALLGATHER)


def test_a_malformed_record_is_refused_before_anything_is_issued(module) -> None:
    calls = bench.DriverCalls()
    memops = StreamMemOps(0, bench.FakeDriver(calls))
    run = bench.executor(module, bench.CFunctions(calls), memops)
    good = engine(2, 0, Recorder()).program(AllToAllPlan(2, 100, 16), 4)
    records = good.records.copy()
    records[3, streamprog.OP] = 9
    with pytest.raises(ValueError, match="record 3 is malformed"):
        run.run(streamprog.Program(records, 0, 2, 4), 1 << 46, 1 << 47, 0, 0, bench.FUNCTION)
    records = good.records.copy()
    waits = np.flatnonzero(records[:, streamprog.OP] == streamprog.WAIT)
    records[waits[0], streamprog.B] = -5  # a wait for a value <= 0
    with pytest.raises(ValueError, match="malformed"):
        run.run(streamprog.Program(records, 0, 2, 4), 1 << 46, 1 << 47, 0, 0, bench.FUNCTION)
    assert calls.entries == []
    run.run(good, 1 << 46, 1 << 47, 0, 0, bench.FUNCTION)
    assert len(calls.entries) == len(good)


def test_the_executor_refuses_bad_set_up(module) -> None:
    with pytest.raises(ValueError, match="nonzero"):
        module.Executor(wait=0, write=1, copy=1, launch=1, wait_flags=0, write_flags=0, threads=256,
                        max_blocks=1, abort=0, status=0)
    with pytest.raises(RuntimeError, match="did not complete"):
        module.Executor.__new__(module.Executor).run(b"", 0, 0, 0, 0, 0, 0, 2, 4)
    run = module.Executor(**{k: 1 for k in ("wait", "write", "copy", "launch", "threads", "max_blocks")},
                          wait_flags=0, write_flags=0, abort=0, status=0)
    with pytest.raises(ValueError, match="whole records"):
        run.run(b"x" * 12, 0, 0, 0, 0, 0, 0, 2, 4)


def test_the_driver_functions_come_from_libcuda_or_say_why_not(module) -> None:
    import ctypes

    try:
        found = module.driver_functions()
    except OSError as err:
        assert "libcuda.so.1" in str(err)
    else:
        lib = ctypes.CDLL("libcuda.so.1")
        assert found["cuLaunchKernel"] == ctypes.cast(lib.cuLaunchKernel, ctypes.c_void_p).value
    assert set(module.noop_functions()) == {"cuStreamWaitValue64", "cuStreamWriteValue64", "cuMemcpyAsync",
                                            "cuLaunchKernel"}


def test_ce_twoshot_uses_the_executor_where_the_driver_is_there(module, monkeypatch, caplog) -> None:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        driver = True
    except OSError:
        driver = False
    monkeypatch.setattr(streamprog, "compiled", lambda environ=None: module)
    memops = StreamMemOps(0, bench.FakeDriver(bench.DriverCalls()))
    made = ce_twoshot.make_executor(memops, bench.GUARD, 8)
    assert (made is not None) == driver
    if not driver:
        assert "compiled stream programs are off" in caplog.text and "libcuda.so.1" in caplog.text


def test_the_setting_turns_the_executor_off() -> None:
    assert streamprog.compiled({"MPIRING_HOTPATH": "0"}) is None
    assert ce_twoshot.make_executor(StreamMemOps(0, bench.FakeDriver(bench.DriverCalls())), bench.GUARD, 8,
                                    {"MPIRING_HOTPATH": "0"}) is None


# -- MPIRING_CE_AREA_MIB ----------------------------------------------------------------------------


def test_the_area_setting() -> None:
    assert ce_twoshot.area_bytes({}) == 32 << 20
    assert ce_twoshot.area_bytes({"MPIRING_CE_AREA_MIB": "8"}) == 8 << 20
    assert ce_twoshot.area_bytes({"MPIRING_CE_AREA_MIB": " 1 "}) == 1 << 20
    assert ce_twoshot.area_bytes({"MPIRING_CE_AREA_MIB": "64"}) == 64 << 20
    for bad in ("3", "0", "128", "-8", "8.0", "lots"):
        said = f"MPIRING_CE_AREA_MIB='{bad}'.*one of 1, 2, 4, 8, 16, 32, 64"
        with pytest.raises(InvalidArgumentError, match=said):
            ce_twoshot.area_bytes({"MPIRING_CE_AREA_MIB": bad})
    mpiring_settings.check_all({"MPIRING_CE_AREA_MIB": "16"})
    with pytest.raises(InvalidArgumentError):
        mpiring_settings.check_all({"MPIRING_CE_AREA_MIB": "12"})
    assert AllToAllLayout(4, ce_twoshot.area_bytes({"MPIRING_CE_AREA_MIB": "32"})).alloc_bytes == 386 << 20


def test_the_ranks_compare_the_area_at_set_up() -> None:
    import os

    from mpiring.call.options import Options
    before = os.environ.get("MPIRING_CE_AREA_MIB")
    try:
        os.environ["MPIRING_CE_AREA_MIB"] = "16"
        assert Options.resolve("auto", None, None, None).setup_values("auto")["MPIRING_CE_AREA_MIB"] == 16
    finally:
        if before is None:
            del os.environ["MPIRING_CE_AREA_MIB"]
        else:
            os.environ["MPIRING_CE_AREA_MIB"] = before
