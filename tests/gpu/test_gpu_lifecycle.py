"""Communicator lifetimes on the GPU: a thousand create/close cycles leak no device memory, no
GPU resource (``mpiring.cuda.live_resources()``) and no file descriptor; eight communicators
from split communicators (one with reversed rank order) live side by side and give everything
back; a closed communicator refuses every call; and ``close()`` issued while a call is still
queued on the GPU waits for it instead of freeing staging memory under it or under a peer.

``MPIRING_LIFECYCLE_CYCLES`` sets the number of measured create/close cycles (default 1000)."""

from __future__ import annotations

import gc
import os
import random
import time

import cupy
import numpy as np
import pytest
from gpu_helpers import (
    WORLD,
    agree,
    free_device_bytes,
    gpu_nap,
    mismatches,
    poison,
    rank_input,
    reference,
    span_for,
)
from mpi4py import MPI

import mpiring

CYCLES = int(os.environ.get("MPIRING_LIFECYCLE_CYCLES", "1000"))
WARMUP = 3  # cycles before the baseline: kernels loaded, driver and MPI pools settled
DIRECT = ("ring", "oneshot", "twoshot")
# One-shot takes messages up to a 4 MiB slot / ranks (1 MiB on up to 4 ranks).
ONESHOT_LIMIT = min(1 << 20, (4 << 20) // WORLD.size // 16 * 16)
RANK = WORLD.rank
MIB = 1 << 20

def fit(algo: str, count: int, dtype) -> int:
    """``count``, cut to the one-shot limit for "oneshot" (which refuses larger messages)."""
    return min(count, ONESHOT_LIMIT // np.dtype(dtype).itemsize) if algo == "oneshot" else count


def checked_call(c: mpiring.Communicator, algo: str, count: int, salt: int, *,
                 op: mpiring.Op = mpiring.Op.SUM, dtype: str = "float32",
                 placement: str = "out") -> str | None:
    """One allreduce of exact inputs into a poisoned output, checked element by element."""
    count = fit(algo, count, dtype)
    x = rank_input(RANK, count, dtype, salt, span_for(op))
    if placement == "in":
        out = x
        c.Allreduce(MPI.IN_PLACE, out, op, algorithm=algo)
    else:
        out = cupy.empty_like(x)
        poison(out)
        c.Allreduce(x, out, op, algorithm=algo)
    wrong = mismatches(out, reference(op, WORLD.size, count, salt))
    if wrong:
        return f"{algo} {op.name} {dtype} n={count} {placement} (salt {salt}): {wrong} wrong elements"
    return None


def snapshot() -> tuple[int, dict[str, int], int]:
    """(free device bytes, live GPU resources, open file descriptors) with nothing in flight."""
    gc.collect()  # objects in reference cycles return their pool memory now, not later
    free = free_device_bytes()
    return free, dict(mpiring.cuda.live_resources()), len(os.listdir("/proc/self/fd"))


def resource_diff(now: dict[str, int], base: dict[str, int]) -> dict[str, int]:
    """The live-resource counts that differ from ``base`` (as now - base)."""
    keys = sorted(set(now) | set(base))
    return {k: now.get(k, 0) - base.get(k, 0) for k in keys if now.get(k, 0) != base.get(k, 0)}


def this_ranks_gpu() -> int:
    """The GPU a communicator on WORLD binds by default (its node rank; every rank on one node)."""
    return RANK % cupy.cuda.runtime.getDeviceCount()


@pytest.mark.mpi(min_size=2)
def test_thousand_create_close_cycles():
    errors: list[str | None] = []
    series: list[str] = []
    base = None
    n = WORLD.size
    for cycle in range(WARMUP + CYCLES):
        c = mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20, timeout=120)
        measured = cycle - WARMUP  # negative during the warm-up
        if measured < 0:  # every kernel the loop will use is loaded before the baseline
            errors.append(checked_call(c, DIRECT[cycle % 3], 4099, salt=cycle))
        elif measured % 10 == 0:
            errors.append(checked_call(c, DIRECT[measured // 10 % 3], 4099 + measured, salt=cycle))
        if measured == 0:  # the counters really count this communicator's resources
            during = resource_diff(dict(mpiring.cuda.live_resources()), base[1])
            if during.get("staging") != 1 or during.get("ipc_mappings", 0) < n - 1:
                errors.append(f"with one communicator open, live_resources() grew by {during}: "
                              f"expected staging +1 and ipc_mappings >= +{n - 1}")
        c.close()
        if measured == -1:
            base = last = snapshot()
        elif measured >= 0 and ((measured + 1) % 100 == 0 or measured == CYCLES - 1):
            free, live, fds = snapshot()
            series.append(f"after {measured + 1}: device {base[0] - free:+d} B, fds {fds - base[2]:+d}, "
                          f"live {resource_diff(live, base[1])}")
            last = (free, live, fds)
    free, live, fds = last
    leaks = []
    if base[0] - free > 0:
        leaks.append(f"device memory grew by {base[0] - free} bytes over {CYCLES} cycles")
    if live != base[1]:
        leaks.append(f"live_resources() {live} != {base[1]} before the cycles")
    if fds != base[2]:
        leaks.append(f"open file descriptors went from {base[2]} to {fds}")
    wrong = [e for e in errors if e]
    bad = leaks + wrong[:5] + ([f"... {len(wrong) - 5} more"] if len(wrong) > 5 else [])
    if bad:
        bad.append("per 100 cycles: " + "; ".join(series))
    agree(not bad, "; ".join(bad))


def _eight_at_once(forward, backward, device: int, seed: int, base) -> list[str | None]:
    """Open 4 communicators over ``forward`` and 4 over ``backward`` at once, check what they
    hold, run 200 interleaved checked calls over them, close them all."""
    n = WORLD.size
    errors: list[str | None] = []
    comms = []
    for k in range(8):
        parent = forward if k % 2 == 0 else backward
        comms.append(mpiring.Communicator(parent, gpu=True, device=device,
                                          slot_bytes=(256 << 10) * (1 + k % 4), timeout=120))
    for k, c in enumerate(comms):
        expected = RANK if k % 2 == 0 else n - 1 - RANK
        if (c.rank, c.size, c.device) != (expected, n, device):
            errors.append(f"communicator {k}: rank {c.rank} of {c.size} on GPU {c.device}, expected "
                          f"rank {expected} of {n} on GPU {device}")
    during = resource_diff(dict(mpiring.cuda.live_resources()), base[1])
    if (during.get("staging") != 8 or during.get("ipc_mappings", 0) < 8 * (n - 1)
            or during.get("events", 0) <= 0 or during.get("streams", 0) <= 0):
        errors.append(f"with 8 communicators open, live_resources() grew by {during}: expected "
                      f"staging +8, ipc_mappings >= +{8 * (n - 1)}, and more events and streams")
    rng = random.Random(seed)  # the same calls on every rank
    for call in range(200):
        k = rng.randrange(8)
        algo = rng.choice(("ring", "oneshot", "twoshot", "auto"))
        count = rng.randint(1, 300_000)
        placement = rng.choice(("out", "in"))
        error = checked_call(comms[k], algo, count, salt=1000 + call, placement=placement)
        if error:
            errors.append(f"call {call} on communicator {k}: {error}")
    for c in comms:
        c.close()
    return errors


@pytest.mark.mpi(min_size=2)
def test_eight_communicators_from_split():
    """Four communicators over a split in rank order and four over a split in reversed order
    (other ring neighbours, other node ranks), with different slot sizes, alive together;
    200 interleaved checked calls; then everything is given back. Done twice: the first round
    is the warm-up (kernels, NCCL, which auto may pick, and driver state for eight at once), and
    the second must leave device memory and live resources exactly where the first left them."""
    device = this_ranks_gpu()  # a reversed split must not move this rank to another GPU
    forward = WORLD.Split(color=0, key=RANK)
    backward = WORLD.Split(color=0, key=-RANK)
    start = snapshot()
    errors = _eight_at_once(forward, backward, device, 88, start)
    base = snapshot()
    if base[1] != start[1]:
        errors.append(f"live_resources() {base[1]} after closing all 8 != {start[1]} before")
    errors += _eight_at_once(forward, backward, device, 89, base)
    free, live, _ = snapshot()
    if base[0] - free > 0:
        errors.append(f"device memory grew by {base[0] - free} bytes in the second round of 8")
    if live != base[1]:
        errors.append(f"live_resources() {live} after the second round != {base[1]} before it")
    forward.Free()
    backward.Free()
    agree(not any(errors), "; ".join(e for e in errors if e))


def _refused(name: str, attempt) -> str | None:
    """None if ``attempt()`` raises CommunicatorClosedError, else what happened."""
    try:
        attempt()
    except mpiring.CommunicatorClosedError:
        return None
    except Exception as err:  # any other outcome is the failure to report
        return f"{name} after close raised {type(err).__name__}: {err}"
    return f"{name} after close did not raise"


@pytest.mark.mpi(min_size=2)
def test_use_after_close_raises():
    x = cupy.ones(1000, dtype=cupy.float32)
    out = cupy.empty_like(x)
    c = mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20, timeout=120)
    errors = [checked_call(c, "ring", 1000, salt=1)]
    c.close()
    poison(out)
    errors += [
        _refused("Allreduce", lambda: c.Allreduce(x, out)),
        _refused("Allreduce(IN_PLACE)", lambda: c.Allreduce(MPI.IN_PLACE, out, algorithm="oneshot")),
        _refused("allreduce", lambda: c.allreduce(x, mpiring.Op.MAX)),
        _refused("synchronize", lambda: c.synchronize()),
    ]
    touched = int(cupy.count_nonzero(~cupy.isnan(out)))
    if touched:
        errors.append(f"a refused call wrote {touched} elements of recvbuf")
    if not c.closed:
        errors.append("closed is False after close()")
    try:
        c.close()  # a second close is a no-op
        with mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20, timeout=120) as d:
            d.close()  # and so is the context manager's close after an explicit one
    except Exception as err:  # reported through agree, on every rank
        errors.append(f"closing twice raised {type(err).__name__}: {err}")
    agree(not any(errors), "; ".join(e for e in errors if e))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("stagger", [False, True], ids=["together", "staggered"])
@pytest.mark.parametrize("algo", DIRECT)
def test_close_while_a_call_is_in_flight(algo, stagger):
    """The call waits on the GPU behind a nap (20 ms + 10 ms per rank) when close() is called,
    so close() must wait for it; with ``stagger`` the ranks also reach close() at different
    times (rank r sleeps 30 ms * r). Afterwards the output is exact on every rank and every
    GPU resource is given back."""
    count = fit(algo, 1 << 26, "float32")  # 256 MiB (one-shot: its limit)
    stream = cupy.cuda.Stream(non_blocking=True)
    before = dict(mpiring.cuda.live_resources())
    c = mpiring.Communicator(WORLD, gpu=True, timeout=120)
    with stream:
        x = rank_input(RANK, count, cupy.float32, salt=5)
        out = cupy.empty_like(x)
        poison(out)
        gpu_nap(stream, 0.020 + 0.010 * RANK)
        c.Allreduce(x, out, algorithm=algo)
    if stagger:
        time.sleep(0.030 * RANK)
    errors = []
    try:
        c.close()  # no synchronize before it: the call is still queued
    except Exception as err:  # reported through agree, on every rank
        errors.append(f"close() raised {type(err).__name__}: {err}")
    stream.synchronize()
    with stream:
        wrong = mismatches(out, reference(mpiring.Op.SUM, WORLD.size, count, salt=5))
    if wrong:
        errors.append(f"{algo}: {wrong} of {count} elements wrong after close() during the call")
    if not c.closed:
        errors.append("closed is False after close()")
    after = dict(mpiring.cuda.live_resources())
    if after != before:
        errors.append(f"live_resources() {after} after close != {before} before")
    agree(not errors, "; ".join(errors))
