"""Issue 17 on the GPU path: the set-up agreement and the thread guard are the host's code
(mpiring.core.consensus in the set-up allgather; the lock in Communicator); these check them with
gpu=True. Run: ``mpiexec -n 2 python -m pytest -q --with-mpi tests/gpu/test_gpu_reliability.py``."""

from __future__ import annotations

import threading
from typing import Any

import cupy
import pytest
from gpu_helpers import WORLD

import mpiring

pytestmark = pytest.mark.mpi(min_size=2)


def verdict(problems: list[str]) -> None:
    lines = [f"rank {r}: {p}" for r, ps in enumerate(WORLD.allgather(problems)) for p in ps]
    if lines:
        pytest.fail("\n".join(lines[:30]), pytrace=False)


def test_gpu_slot_bytes_must_agree() -> None:
    """Rank 1 asks for other ring slots: every rank raises SetupError naming slot_bytes and the
    ranks, before any staging is allocated; a good communicator works afterwards."""
    slot = (64 << 20) if WORLD.rank == 1 else (128 << 20)
    problems: list[str] = []
    try:
        mpiring.Communicator(WORLD, gpu=True, slot_bytes=slot, timeout=60).close()
        problems.append("no SetupError")
    except mpiring.SetupError as err:
        if "slot_bytes differs across ranks" not in str(err) or "on rank 1" not in str(err):
            problems.append(f"SetupError says: {err}")
    with mpiring.Communicator(WORLD, gpu=True, timeout=60) as comm:
        y = comm.allreduce(cupy.ones(1000, dtype=cupy.float32), algorithm="ring")
        comm.synchronize()
        if not bool((y == WORLD.size).all()):
            problems.append("a good communicator afterwards is wrong")
    verdict(problems)


def test_gpu_second_thread_raises_concurrent_call_error() -> None:
    """While one thread is inside a GPU ring call (held before it enqueues), another thread's
    call and synchronize() raise ConcurrentCallError; the first call completes correctly."""
    problems: list[str] = []
    with mpiring.Communicator(WORLD, gpu=True, timeout=60) as comm:
        inside, release = threading.Event(), threading.Event()
        pipeline = comm.ring_pipeline(gpu=True)
        run = pipeline.run

        def held(*args: Any) -> None:
            inside.set()
            release.wait(30)
            run(*args)

        pipeline.run = held
        x = cupy.ones(1 << 20, dtype=cupy.float32)
        out = cupy.zeros_like(x)
        device = cupy.cuda.Device()

        def first_call() -> None:
            with device:
                comm.Allreduce(x, out, algorithm="ring")

        first = threading.Thread(target=first_call)
        first.start()
        if not inside.wait(30):
            problems.append("the first call never reached the ring")
        for name, intrude in {"Allreduce": lambda: comm.Allreduce(x, cupy.zeros_like(x)),
                              "synchronize": comm.synchronize}.items():
            try:
                intrude()
                problems.append(f"{name}: no ConcurrentCallError")
            except mpiring.ConcurrentCallError as err:
                if "MPI forbids concurrent calls" not in str(err):
                    problems.append(f"{name}: {err}")
        release.set()
        first.join(60)
        pipeline.run = run
        comm.synchronize()
        if not bool((out == WORLD.size).all()):
            problems.append("the first call's result is wrong")
    verdict(problems)


