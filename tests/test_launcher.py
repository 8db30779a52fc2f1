"""mpiring.cuda.launcher: the argument buffer a packed launch hands to cuLaunchKernel holds,
behind each of its pointers, exactly the value of that argument (read back as the driver
does: through the void* array), and rewriting it for the next launch leaves earlier launches'
values to the driver (which copied them)."""

from __future__ import annotations

import ctypes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.cuda.launcher import PackedLaunch

KINDS = {"ptr": (ctypes.c_uint64, st.integers(0, 2**64 - 1)),
         "i64": (ctypes.c_int64, st.integers(-(2**63), 2**63 - 1)),
         "i32": (ctypes.c_int32, st.integers(-(2**31), 2**31 - 1))}


class Driver:
    """Reads the parameters as cuLaunchKernel would, from kernelParams (a void*[])."""

    def __init__(self, params: tuple[str, ...]) -> None:
        self.params, self.launches = params, []

    def __call__(self, f, gx, gy, gz, bx, by, bz, shmem, stream, kernel_params, extra) -> None:
        slots = (ctypes.c_void_p * len(self.params)).from_address(kernel_params)
        values = [KINDS[p][0].from_address(slots[i]).value for i, p in enumerate(self.params)]
        self.launches.append(((f, gx, gy, gz, bx, by, bz, shmem, stream, extra), values))


@given(st.data())
def test_each_parameter_reads_back_exactly(data) -> None:
    params = tuple(data.draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=8)))
    driver = Driver(params)
    launch = PackedLaunch(params, 256, driver_launch=driver)
    for _ in range(3):  # the same buffer, rewritten per launch
        args = [data.draw(KINDS[p][1]) for p in params]
        launch(1234, 7, 99, *args)
        assert driver.launches[-1] == ((1234, 7, 1, 1, 256, 1, 1, 0, 99, 0), args)


def test_the_kernels_signatures_pack() -> None:
    """The parameter lists mpiring launches with (direct.cu's oneshot/twoshot, fold.cu's fold,
    copy and average) pack their arguments into distinct 8-byte slots."""
    for params, args in ((("ptr", "ptr", "i64", "ptr", "i32"), (1 << 47, (1 << 47) + 64, 1 << 40, 5, 1)),
                         (("ptr", "ptr", "ptr", "i64", "i32", "ptr", "ptr"), (1, 2, 3, 4, 0, 6, 7)),
                         (("ptr", "i64", "i32", "ptr", "ptr"), (8, 1 << 33, 4, 9, 10))):
        driver = Driver(params)
        PackedLaunch(params, 128, driver_launch=driver)(1, 1, 1, *args)
        assert driver.launches == [((1, 1, 1, 1, 128, 1, 1, 0, 1, 0), list(args))]


def test_an_unknown_parameter_kind_is_refused() -> None:
    with pytest.raises(KeyError):
        PackedLaunch(("float",), 32, driver_launch=Driver(()))


@given(st.data())
def test_a_bound_launch_replays_its_own_arguments(data) -> None:
    """Each BoundLaunch packs its arguments once into a buffer of its own: launches of several
    bound ones, interleaved with packed launches, each hand the driver exactly their values."""
    params = tuple(data.draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=8)))
    driver = Driver(params)
    launch = PackedLaunch(params, 512, driver_launch=driver)
    bound = []
    for function in range(3):
        args = [data.draw(KINDS[p][1]) for p in params]
        bound.append((launch.bind(100 + function, 5 + function, *args), function, args))
    for _ in range(2):
        for one, function, args in bound:
            other = [data.draw(KINDS[p][1]) for p in params]
            launch(7, 1, 3, *other)  # the shared buffer, rewritten between replays
            one(55)
            assert driver.launches[-1] == ((100 + function, 5 + function, 1, 1, 512, 1, 1, 0, 55, 0), args)
            assert driver.launches[-2] == ((7, 1, 1, 1, 512, 1, 1, 0, 3, 0), other)


def test_a_launch_may_ask_for_fewer_threads_never_more() -> None:
    """oneshot-ll picks its block size per call (``direct_kernels.ll_shape``): a launch or a bound
    launch takes ``threads`` up to the kernels' ``__launch_bounds__``, the packed ones' default."""
    driver = Driver(("i32",))
    launch = PackedLaunch(("i32",), 512, driver_launch=driver)
    launch(1, 4, 2, 9, threads=64)
    launch.bind(1, 4, 9, threads=96)(2)
    launch(1, 4, 2, 9)
    assert [call[0][4] for call in driver.launches] == [64, 96, 512]
    for bad in (0, 513):
        with pytest.raises(ValueError, match="1 to 512"):
            launch(1, 4, 2, 9, threads=bad)
        with pytest.raises(ValueError, match="1 to 512"):
            launch.bind(1, 4, 9, threads=bad)
