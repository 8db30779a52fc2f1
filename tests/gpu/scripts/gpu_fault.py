"""One fault scenario on the GPU path, run on every rank by tests/gpu/test_gpu_faults.py:

    mpirun -n K python gpu_fault.py SCENARIO VICTIM ALGORITHM

Every rank writes what it saw to ``$MPIRING_FAULT_OUT/rank<r>.json``, rewritten after every
event, so a rank killed later still leaves what it saw before. The test judges the files.

Calls reduce exact inputs (small positive integers in float32) out of place into an output
poisoned with a negative value no partial or final sum can take; each output element is then
"correct", "untouched" (still poison) or "other" (a partial reduction). A call is
``Allreduce`` then ``synchronize()`` (GPU calls return once enqueued; failures surface there).

Scenarios (``VICTIM`` is the faulty rank; the timeout is ``MPIRING_TIMEOUT``):

* ``kill``: the victim SIGKILLs itself once it has enqueued call 2 behind a long spin kernel
  (so none of its part ran), while call 2 runs on the other GPUs.
* ``stop``: the victim SIGSTOPs itself just before call 2; a child resumes it after
  ``MPIRING_FAULT_RESUME`` s, and it then makes call 2.
* ``skip``: the victim skips call 2, then closes once the others gave up.
* ``mismatch``: calls 2, 3, 4 differ on the victim in count, dtype, op; call 5 agrees.
* ``straggler``: 60 calls of random sizes, ops and algorithms; before each, one random rank
  delays on the host or on its GPU (a spin kernel) by up to 50 ms.

``MPIRING_FAULT_UNSAFE=1`` switches the GPU timeouts off (the watchdog and the kernels' clocks):
the control that shows the tests fail without them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import cupy
import numpy as np
from mpi4py import MPI

import mpiring

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults" / "scripts"))
from fault_record import close, event, save, state, wait_for  # noqa: E402 - shared with the host faults

POISON = -12345.0
COUNTS = {"ring": 8 << 20, "oneshot": 50_000, "twoshot": 4 << 20, "ce-twoshot": 8 << 20}  # float32 elements
SPIN = cupy.RawKernel(r"""
extern "C" __global__ void spin(long long ns) {
  long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}""", "spin")

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
timeout = float(os.environ["MPIRING_TIMEOUT"])


def inputs(count: int, dtype: Any = cupy.float32, r: int = rank, salt: int = 0) -> cupy.ndarray:
    return ((cupy.arange(count, dtype=cupy.int64) * 7 + salt) % 13 + 1 + r).astype(dtype)


def expected(count: int, dtype: Any = cupy.float32, op: str = "sum", salt: int = 0) -> cupy.ndarray:
    acc = inputs(count, cupy.float64, 0, salt)
    for r in range(1, size):
        nxt = inputs(count, cupy.float64, r, salt)
        acc = {"sum": acc + nxt, "max": cupy.maximum(acc, nxt), "min": cupy.minimum(acc, nxt)}[op]
    return acc.astype(dtype)


def classify(out: cupy.ndarray, want: cupy.ndarray) -> dict[str, int]:
    correct = int(cupy.count_nonzero(out == want))
    untouched = int(cupy.count_nonzero((out == POISON) & (out != want)))
    return {"correct": correct, "untouched": untouched, "other": int(out.size) - correct - untouched}


def call(comm: mpiring.Communicator, label: str, algo: str, count: int | None = None,
         dtype: Any = cupy.float32, op: str = "sum") -> None:
    """One recorded out-of-place allreduce: outcome, time, the output's state before and 1 s
    after the call ended (nothing may write it after an error), the input's fate."""
    count = COUNTS[algo] if count is None else count
    x = inputs(count, dtype)
    keep = x.copy()
    out = cupy.full(count, POISON, dtype=dtype)
    cupy.cuda.get_current_stream().synchronize()
    facts: dict[str, Any] = {"call": label, "algorithm": algo}
    start = time.monotonic()
    try:
        comm.Allreduce(x, out, op=op, algorithm=algo)
        comm.synchronize()
        facts["outcome"] = "ok"
    except Exception as err:  # recorded for the test to judge
        facts.update(outcome="error", error=type(err).__name__, message=str(err))
        for name in ("peer", "step", "seq"):
            if hasattr(err, name):
                facts[name] = getattr(err, name)
    facts["elapsed"] = time.monotonic() - start
    cupy.cuda.get_current_stream().synchronize()  # released work (if any) has finished
    want = expected(count, dtype, op)
    facts["output"] = classify(out, want)
    time.sleep(1.0)
    facts["output_later"] = classify(out, want)
    facts["input_intact"] = bool(cupy.array_equal(x, keep))
    event(**facts)


def kill_once_enqueued(comm: mpiring.Communicator, algo: str) -> None:
    """Call 2, then SIGKILL this process as soon as ``Allreduce`` has enqueued it: a spin kernel
    of several timeouts ahead of it on the stream keeps any of this rank's part from running,
    so whatever the row, the others' GPUs are left waiting on flags this rank never writes.
    (Killing at the Nth internal send raced: whether the call went through that method
    depended on the path the call took, and the victim sometimes finished its call.)"""
    count = COUNTS[algo]
    x, out = inputs(count), cupy.full(count, POISON, dtype=cupy.float32)
    cupy.cuda.get_current_stream().synchronize()
    SPIN((1,), (1,), (np.int64(5 * timeout * 1e9),))
    comm.Allreduce(x, out, algorithm=algo)
    os.kill(os.getpid(), signal.SIGKILL)


DTYPES = (cupy.float32, cupy.float64, cupy.int32)  # what the scenarios call with
OPS = ("sum", "max", "min")


def warm_calls(scenario: str, algo: str) -> list[tuple[str, Any, str]]:
    """The (algorithm, dtype, op) of every kernel a scenario launches: its row's float32 sum;
    a mismatch also float64 sum and float32 max (the victim's calls); the stragglers' random
    calls every row, dtype and op (auto picks among the kernel rows below)."""
    if scenario == "straggler":
        return [(a, d, o) for a in ("ring", "oneshot", "twoshot", "oneshot-ll") for d in DTYPES for o in OPS]
    if scenario == "mismatch":
        return [(algo, cupy.float32, "sum"), (algo, cupy.float64, "sum"), (algo, cupy.float32, "max")]
    return [(algo, cupy.float32, "sum")]


def compile_kernels(scenario: str, algo: str) -> None:
    """A call of every kernel the scenario launches, on a communicator with a generous timeout,
    before the timed one.

    A rank's first call of a kernel compiles it (NVRTC: about a second while CuPy's cache is
    cold, as on a fresh machine), and its peers wait for it as for any late rank: under the
    jobs' 1 s timeout a compile fails the call it delays. The kernels stay loaded in the
    process for the timed communicator."""
    with mpiring.Communicator(world, gpu=True, slot_bytes=1 << 20, timeout=120.0) as warm:
        for row, dtype, op in warm_calls(scenario, algo):
            x = cupy.ones(1000, dtype=dtype)
            warm.Allreduce(x, cupy.empty_like(x), op=op, algorithm=row)
        warm.synchronize()


def disable_timeouts(comm: mpiring.Communicator) -> None:
    """The control (``MPIRING_FAULT_UNSAFE=1``): no watchdog verdicts, no kernel clocks."""
    comm.disable_gpu_timeouts()


def run_straggler(comm: mpiring.Communicator) -> None:
    plan = np.random.default_rng(2025)  # the same plan on every rank
    for i in range(60):
        algo = ["ring", "oneshot", "twoshot", "auto"][int(plan.integers(4))]
        count = int(plan.integers(1, 50_000 if algo == "oneshot" else 3_000_000))
        dtype = [cupy.float32, cupy.float64, cupy.int32][int(plan.integers(3))]
        op = ["sum", "max", "min"][int(plan.integers(3))]
        who, where, delay = int(plan.integers(size)), int(plan.integers(2)), float(plan.uniform(0, 0.05))
        if who == rank and where == 0:
            time.sleep(delay)
        elif who == rank:
            SPIN((1,), (1,), (np.int64(delay * 1e9),))
        x = inputs(count, dtype, salt=i)
        out = cupy.full(count, POISON, dtype=dtype)
        start = time.monotonic()
        try:
            comm.Allreduce(x, out, op=op, algorithm=algo)
            comm.synchronize()
            facts = {"outcome": "ok"}
        except Exception as err:  # recorded for the test to judge
            facts = {"outcome": "error", "error": type(err).__name__, "message": str(err)}
        facts.update(call=f"straggler {i}: {algo} {op} {np.dtype(dtype).name}[{count}], rank {who} "
                          f"late on the {'host' if where == 0 else 'GPU'} by {delay * 1e3:.0f} ms",
                     elapsed=time.monotonic() - start,
                     output=classify(out, expected(count, dtype, op, salt=i)))
        event(**facts)


def main() -> None:
    scenario, victim, algo = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    others = [r for r in range(size) if r != victim]
    compile_kernels(scenario, algo)
    comm = mpiring.Communicator(world, gpu=True, slot_bytes=1 << 20)
    state["check"] = comm.check
    if os.environ.get("MPIRING_FAULT_UNSAFE") == "1":
        disable_timeouts(comm)
    call(comm, "warm-up", algo)
    if scenario == "straggler":
        run_straggler(comm)
    elif scenario == "mismatch":
        bad = rank == victim
        n = COUNTS[algo]
        call(comm, "count", algo, count=n - 1 if bad else n)
        call(comm, "dtype", algo, dtype=cupy.float64 if bad else cupy.float32)
        call(comm, "op", algo, op="max" if bad else "sum")
        call(comm, "after", algo)
    elif scenario == "skip":
        if rank != victim:
            call(comm, "fault", algo)
        else:
            state["recorded"] = True
            save()
            wait_for(others, 10 * timeout)  # the others give up first; then close learns why
    elif scenario == "kill":
        if rank == victim:
            kill_once_enqueued(comm, algo)
        call(comm, "fault", algo)
    elif scenario == "stop":
        resume = float(os.environ["MPIRING_FAULT_RESUME"])
        if rank == victim:
            subprocess.Popen(["sh", "-c", f"sleep {resume}; kill -CONT {os.getpid()}"])
            os.kill(os.getpid(), signal.SIGSTOP)
        call(comm, "fault", algo)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    state["recorded"] = True
    save()
    if scenario in ("kill", "stop", "skip"):
        wait_for(others, 10 * timeout)
    close(comm)
    if scenario == "kill":  # MPI_Finalize may wait for the dead rank: this test is not about MPI
        sys.stdout.flush()
        os._exit(0)
    if scenario == "stop":  # stay until the victim is done: Finalize would wait for it anyway
        wait_for([victim], float(os.environ["MPIRING_FAULT_RESUME"]) + 10 * timeout)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        state["exception"] = traceback.format_exc()
        state["recorded"] = True
        save()
        raise
