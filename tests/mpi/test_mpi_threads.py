"""Threads (issue 17, item 2): MPI forbids concurrent calls on one communicator, so a call,
``close()`` or ``synchronize()`` entered while another is in progress on the same communicator
raises ConcurrentCallError at once; two communicators used from two threads keep working."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok, attempt, expect_raised

import mpiring
from mpiring import ConcurrentCallError

pytestmark = pytest.mark.mpi(min_size=1)
world = MPI.COMM_WORLD
COUNT = 20_000


def hold_inside_calls(comm: mpiring.Communicator) -> tuple[threading.Event, threading.Event]:
    """Make this rank's next host ring call wait (inside the call) until ``release`` is set;
    ``inside`` is set once it waits there."""
    inside, release = threading.Event(), threading.Event()
    pipeline = comm.ring_pipeline(gpu=False)
    run = pipeline.run

    def held(*args: Any) -> None:
        inside.set()
        release.wait(30)
        run(*args)

    pipeline.run = held  # type: ignore[method-assign]
    return inside, release


def test_a_second_thread_on_one_communicator_raises_at_once() -> None:
    """While one thread is inside an allreduce, another thread's Allreduce, allreduce,
    Reduce_scatter_block, Allgather, synchronize() and close() raise ConcurrentCallError naming
    the rule; the first call then completes with the right sum and the communicator still works."""
    problems: list[str] = []
    with mpiring.Communicator(world, gpu=False, slot_bytes=4096, timeout=60,
                              algorithm="ring") as comm:
        inside, release = hold_inside_calls(comm)
        out = np.zeros(COUNT)
        first = threading.Thread(target=lambda: comm.Allreduce(np.ones(COUNT), out))
        first.start()
        if not inside.wait(30):
            problems.append("the first call never got inside the ring")
        n = world.size
        intruders = {
            "Allreduce": lambda: comm.Allreduce(np.ones(4), np.zeros(4)),
            "allreduce": lambda: comm.allreduce(np.ones(4)),
            "Reduce_scatter_block": lambda: comm.Reduce_scatter_block(np.ones(n), np.zeros(1)),
            "Allgather": lambda: comm.Allgather(np.ones(1), np.zeros(n)),
            "synchronize": comm.synchronize,
            "close": comm.close,
        }
        for name, intrude in intruders.items():
            problems += [f"{name}: {p}" for p in expect_raised(
                attempt(intrude), ConcurrentCallError, "MPI forbids concurrent calls on one communicator",
                "one communicator per thread")]
        release.set()
        first.join(60)
        if not np.array_equal(out, np.full(COUNT, float(world.size))):
            problems.append(f"the first call's result is wrong: {out[:4]}")
        if comm.closed:
            problems.append("close() from the second thread closed the communicator")
        again = comm.allreduce(np.full(8, 2.0))
        if not np.array_equal(again, np.full(8, 2.0 * world.size)):
            problems.append(f"a later call is wrong: {again}")
    all_ok(problems)


def test_two_communicators_in_two_threads_keep_working() -> None:
    """Each of two threads drives its own communicator (50 calls of its own sizes and values):
    every result is exact."""
    comms = [mpiring.Communicator(world, gpu=False, slot_bytes=4096, timeout=60) for _ in range(2)]
    problems: list[str] = []

    def work(k: int) -> None:
        try:
            for i in range(50):
                count = 1000 + 997 * i + 13 * k
                x = np.full(count, float(k + 1 + world.rank))
                got = comms[k].allreduce(x)
                want = sum(k + 1 + r for r in range(world.size))
                if not np.array_equal(got, np.full(count, float(want))):
                    problems.append(f"thread {k} call {i}: wrong result")
                    return
        except Exception as err:  # judged collectively below
            problems.append(f"thread {k}: {type(err).__name__}: {err}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for comm in comms:
        comm.close()
    all_ok(problems)
