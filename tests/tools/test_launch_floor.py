"""``tools.launch_floor`` (``tools/csrc/launch_floor.c``), no GPU: built at run time with the
flags of the package's extensions, its ``Launch.run()`` calls the launch it was given (a ctypes
callback with ``cuLaunchKernel``'s signature, as ``tests/test_hot_replay.py``'s) with exactly
the function, grid, block, stream and parameters it was given, a bound launch's own (read back
through its ``kernelParams``) included, names a failed launch's CUresult, refuses bad arguments,
and keeps what it was told to; where it cannot be built it says why."""

from __future__ import annotations

import ctypes
import gc
import shutil
import weakref
from types import SimpleNamespace

import numpy as np
import pytest
from keyed_arrays import Keyed
from mpi4py import MPI

import mpiring
from mpiring import algorithms
from mpiring.algorithms import HOST, Algorithm
from mpiring.cuda.launcher import BoundLaunch, StreamLaunch
from tools import launch_floor

# cuLaunchKernel(f, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMem, stream, params, extra)
LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_void_p)
FUNCTION, GRID, BLOCK, STREAM = 0xF00D, 5, 96, 0x5000


class Driver:
    """A fake driver's cuLaunchKernel: every launch as (function, grid xyz, block xyz, shared,
    stream, params, extra), and the ``values`` its first ``n`` parameters point to; it answers
    ``status``."""

    def __init__(self, n: int = 0, status: int = 0) -> None:
        self.launches: list[tuple] = []
        self.values: list[list[int]] = []
        self.n, self.status = n, status
        self.callback = LAUNCH_T(self.launch)  # kept: C holds its address
        self.address = ctypes.cast(self.callback, ctypes.c_void_p).value

    def from_python(self, *args) -> None:
        """As CuPy's ``driver.launchKernel`` (a BoundLaunch's ``driver_launch``: extra 0)."""
        self.launch(*args[:-1], None)

    def launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        self.launches.append((function, gx, gy, gz, bx, by, bz, shared, stream, params, extra))
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        self.values.append([ctypes.c_int64.from_address(slots[i]).value for i in range(self.n)])
        return self.status


@pytest.fixture(scope="module")
def module():
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    built, why = launch_floor.load()
    assert built is not None, why
    return built


def test_run_makes_exactly_the_launch_it_was_given(module) -> None:
    driver = Driver()
    params = (ctypes.c_void_p * 2)(0x10, 0x20)
    address = ctypes.addressof(params)
    launch = module.Launch(launch=driver.address, function=FUNCTION, grid=GRID, block=BLOCK, stream=STREAM,
                           params=address, keep=params)
    assert launch.run() is None and launch.run() is None
    assert driver.launches == [(FUNCTION, GRID, 1, 1, BLOCK, 1, 1, 0, STREAM, address, None)] * 2


def test_a_bound_launch_alone_is_the_launch_its_replay_makes(module) -> None:
    """``launch_floor.floor`` of a BoundLaunch: its function, grid, block and parameter array,
    on the stream given; the same call the Python replay makes (default stream 0 allowed)."""
    python, driver = Driver(3), Driver(3)
    bound = BoundLaunch(("ptr", "i64", "i32"), BLOCK, FUNCTION, GRID, (0xA000, -7, 42),
                        python.from_python)
    bound(STREAM)
    launch_floor.floor(module, bound, STREAM, driver.address).run()
    launch_floor.floor(module, bound, 0, driver.address).run()
    assert driver.launches[0] == python.launches[0] == (FUNCTION, GRID, 1, 1, BLOCK, 1, 1, 0, STREAM,
                                                        bound.params, None)
    assert driver.launches[1][8] is None  # stream 0: the default stream (ctypes reads NULL as None)
    assert driver.values == [[0xA000, -7, 42]] * 2 == python.values * 2


def test_a_failed_launch_raises_naming_its_cuResult(module) -> None:
    driver = Driver(status=719)  # CUDA_ERROR_LAUNCH_FAILED
    params = (ctypes.c_void_p * 1)(0)
    launch = module.Launch(driver.address, FUNCTION, 1, 1, 0, ctypes.addressof(params), params)
    with pytest.raises(RuntimeError, match="cuLaunchKernel failed: CUresult 719"):
        launch.run()
    assert len(driver.launches) == 1


@pytest.mark.parametrize(("change", "message"), [
    (dict(launch=0), "launch, function and params must be nonzero"),
    (dict(function=0), "launch, function and params must be nonzero"),
    (dict(params=0), "launch, function and params must be nonzero"),
    (dict(grid=0), "grid and block must be 1 to"),
    (dict(block=-1), "grid and block must be 1 to"),
    (dict(block=1 << 32), "grid and block must be 1 to"),
    (dict(stream=-1), "an address must be an int from 0 to 2\\*\\*64 - 1, got -1"),
    (dict(function="0xF00D"), "an address must be an int .* got '0xF00D'"),
])
def test_bad_arguments_are_refused_clearly(module, change: dict, message: str) -> None:
    driver = Driver()
    args = dict(launch=driver.address, function=FUNCTION, grid=GRID, block=BLOCK, stream=STREAM, params=0x100,
                keep=None) | change
    with pytest.raises(ValueError, match=message):
        module.Launch(**args)
    assert not driver.launches


def test_an_object_never_initialised_refuses_to_run(module) -> None:
    with pytest.raises(RuntimeError, match="did not complete"):
        module.Launch.__new__(module.Launch).run()


def test_keep_lives_as_long_as_the_launch(module) -> None:
    class Owner:
        pass

    owner = Owner()
    alive = weakref.ref(owner)
    launch = module.Launch(Driver().address, FUNCTION, 1, 1, 0, 0x100, owner)
    del owner
    gc.collect()
    assert alive() is not None
    del launch
    gc.collect()
    assert alive() is None


def test_without_a_compiler_load_says_why(tmp_path) -> None:
    built, why = launch_floor.load(str(tmp_path / "no-such-cc"))
    assert built is None and "no C compiler" in why


def test_the_driver_address_is_libcudas_or_says_why_not() -> None:
    try:
        address = launch_floor.driver_launch_address()
    except OSError as err:
        assert "libcuda.so.1" in str(err)
    else:
        assert address == ctypes.cast(ctypes.CDLL("libcuda.so.1").cuLaunchKernel, ctypes.c_void_p).value


# -- a communicator's kept launches, alone: a host row whose replay is one bound launch -------


def test_a_communicators_kept_launch_alone_is_the_one_its_replays_make(module) -> None:
    """One rank, host arrays dressed as CuPy's: a toy row whose ``bind`` is a StreamLaunch of a
    recording driver. ``Communicator.bound_launches()`` hands out the launch its replay keeps,
    and that launch alone makes the same driver call as each replay."""
    python, driver = Driver(3), Driver(3)

    def run(backend, call) -> None:
        call.recv.array[:] = call.source.array  # one rank: the sum is the input

    def bind(backend, call):
        launch = BoundLaunch(("ptr", "ptr", "i64"), BLOCK, FUNCTION, GRID,
                             (call.source.address, call.recv.address, call.recv.count),
                             python.from_python)
        return StreamLaunch(launch, lambda: SimpleNamespace(ptr=STREAM))

    row = Algorithm("toy-one-launch", 97, HOST, run, summary="a copy", best_for="tests", bind=bind)
    mpiring.register(row)
    try:
        with mpiring.Communicator(MPI.COMM_SELF, gpu=False, check=False) as comm:
            x, out = np.arange(8.0), np.zeros(8)
            comm.Allreduce(x, out, algorithm=row.name)  # no key: never replayed
            assert comm.bound_launches() == [] and comm.replays_kept == 0
            comm.call_keys.array_type = Keyed
            kx, kout = Keyed(x), Keyed(out)
            for _ in range(3):  # the first plans, the others replay
                comm.Allreduce(kx, kout, algorithm=row.name)
            (bound,) = comm.bound_launches()
            assert comm.replays_kept == 1 and len(python.launches) == 2
            launch_floor.floor(module, bound, STREAM, driver.address).run()
            assert driver.launches == python.launches[:1]
            assert driver.values == python.values[:1] == [[x.ctypes.data, out.ctypes.data, 8]]
    finally:
        algorithms.unregister(row.name)
