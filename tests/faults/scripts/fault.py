"""One fault scenario on the host transport, run on every rank by tests/faults/test_faults.py:

    mpiexec -n K python [-m mpi4py] fault.py SCENARIO VICTIM

Every rank writes what it saw to ``$MPIRING_FAULT_OUT/rank<r>.json``, rewritten after every
event, so that a rank killed later still leaves what it saw before. The test judges the files.

Calls reduce exact inputs (small positive integers in float64, so every order of summation
gives the same bits) out of place into an output poisoned with a negative value no partial or
final sum can take; each element of an output is then "correct", "untouched" (still poison)
or "other" (a partial reduction).

Scenarios (``VICTIM`` is the faulty rank; the communicator's timeout is ``MPIRING_TIMEOUT``):

* ``raise``: the victim raises before call 2; the others make call 2.
* ``mismatch``: calls 2, 3, 4 differ on the victim in count, dtype, op; call 5 agrees.
* ``skip``: the victim skips call 2, then closes after the others have given up.
* ``kill``: the victim dies at its 10th send of call 2: ``os._exit`` (no cleanup, no
  MPI_Finalize, nothing more from it: what SIGKILL does to it, as its peers see it). Not the
  signal itself: hydra's proxy SIGKILLs every rank when it reaps a rank that died of a signal,
  ``-disable-auto-cleanup`` or not (MPICH 5, src/pm/hydra/proxy/pmip.c), and whether it reaps
  it while the others still run is a race (its socket events against the kernel's exit), which
  load decides; a rank that exits is reaped without that.
* ``stop``: the victim SIGSTOPs itself at its 10th send of call 2; a child it started resumes
  it after ``MPIRING_FAULT_RESUME`` seconds.
* ``straggler``: 30 calls of random sizes, ops and placements; one random rank per call
  sleeps at random steps. ``MPIRING_FAULT_UNSAFE=1`` turns the pipeline's waits off (the
  test's proof that it can see wrong data).
* ``setup``: the victim never creates the communicator.
* ``fold-raise``: the victim's 5th fold of call 2 raises (issue 17: peers must stop at once).
* ``sigint``: the victim gets SIGINT (Ctrl-C) at its 10th send of call 2.
* ``seterr``: the victim runs under ``np.seterr(all="raise")``; call 2 overflows float16.
* ``late``: the victim enters call 2 0.9 timeouts late, then stalls at its 10th send: its
  peers raise about one timeout after the stall (the timeout bounds the time without
  progress), not one timeout after the call began.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from typing import Any

import numpy as np
from fault_record import close, event, save, state, wait_for  # (this script's directory)
from mpi4py import MPI

import mpiring

COUNT = 50_000  # float64 in 4 KiB slots: 33 mini-batches, 4 transfers each per rank on 3 ranks
POISON = -12345.0  # inputs are positive: no partial or final sum is negative
SLOT = 4096

world = MPI.COMM_WORLD
rank, size = world.rank, world.size
timeout = float(os.environ["MPIRING_TIMEOUT"])
KILLED = 137  # the victim's exit status in ``kill`` (a shell's for SIGKILL)
# After a rank died, MPICH may end the job as soon as a survivor calls MPI again (closing,
# finalizing): so no survivor does until every survivor recorded what it saw. That is an
# ordering, not a delay: the bound only ends a broken run before the launcher's limit (30 s).
SURVIVORS_WAIT = 20.0






def inputs(count: int, dtype: Any = np.float64, r: int = rank, salt: int = 0) -> np.ndarray:
    """Rank ``r``'s input: small positive integers, exact in every dtype used."""
    return ((np.arange(count, dtype=np.int64) * 7 + salt) % 13 + 1 + r).astype(dtype)


def expected(count: int, dtype: Any = np.float64, op: str = "sum", salt: int = 0) -> np.ndarray:
    stack = np.stack([inputs(count, np.int64, r, salt) for r in range(size)])
    reduce = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[op]
    return reduce(stack, axis=0).astype(dtype)


def classify(out: np.ndarray, want: np.ndarray) -> dict[str, int]:
    """How many elements are correct, untouched (poison) or something else."""
    correct = out.view(np.uint8).reshape(out.size, -1) == want.view(np.uint8).reshape(want.size, -1)
    correct = correct.all(axis=1) if out.size else np.zeros(0, bool)
    untouched = (out == POISON) & ~correct
    return {"correct": int(correct.sum()), "untouched": int(untouched.sum()),
            "other": int(out.size - correct.sum() - untouched.sum())}


def call(comm: mpiring.Communicator, label: str, count: int = COUNT, dtype: Any = np.float64,
         op: str = "sum") -> np.ndarray:
    """One out-of-place allreduce, recorded: outcome, time, the output's state, the input's fate."""
    x = inputs(count, dtype)
    keep = x.copy()
    out = np.full(count, POISON, dtype=dtype)
    start = time.monotonic()
    facts: dict[str, Any] = {"call": label}
    try:
        comm.Allreduce(x, out, op=op)
        facts["outcome"] = "ok"
    except BaseException as err:  # recorded for the test to judge (KeyboardInterrupt too)
        facts.update(outcome="error", error=type(err).__name__, message=str(err))
        for name in ("peer", "algorithm", "step", "seq"):
            if hasattr(err, name):
                facts[name] = getattr(err, name)
    facts["elapsed"] = time.monotonic() - start
    facts["output"] = classify(out, expected(count, dtype, op))
    facts["input_intact"] = bool(np.array_equal(x, keep))
    event(**facts)
    return out






def sabotage(comm: mpiring.Communicator, at_send: int, action: Any) -> None:
    """Run ``action`` when this rank's transport starts its ``at_send``-th send from now."""
    link = comm.ring_pipeline(gpu=False).transport
    send, sends = link.send, [0]

    def counted(*args: Any) -> None:
        sends[0] += 1
        if sends[0] == at_send:
            action()
        send(*args)

    link.send = counted


def straggle(comm: mpiring.Communicator, who: list[int], rng: np.random.Generator) -> None:
    """Make the transport of rank ``who[0]`` sleep at random steps, sometimes long."""
    link = comm.ring_pipeline(gpu=False).transport

    def wrap(method: Any) -> Any:
        def slow(*args: Any) -> None:
            if who[0] == rank and rng.random() < 0.02:
                time.sleep(0.15 if rng.random() < 0.03 else rng.uniform(0, 0.004))
            method(*args)
        return slow

    for name in ("send", "fold", "wait_slot_free", "wait_slot_full", "post_slot_full", "post_slot_free"):
        setattr(link, name, wrap(getattr(link, name)))
    if os.environ.get("MPIRING_FAULT_UNSAFE") == "1":  # the control: no waits, so races show
        link.wait_slot_free = link.wait_slot_full = lambda slot, seq: None


def run_straggler(comm: mpiring.Communicator) -> None:
    plan = np.random.default_rng(2024)  # the same plan on every rank
    who = [0]
    straggle(comm, who, np.random.default_rng([2024, rank]))
    for i in range(30):
        who[0] = int(plan.integers(size))
        count = int(plan.integers(0, 40_000))
        dtype = [np.float64, np.float32, np.int64, np.int32][int(plan.integers(4))]
        op = ["sum", "max", "min"][int(plan.integers(3))]
        salt = int(plan.integers(1000))
        x = inputs(count, dtype, salt=salt)
        in_place = bool(plan.integers(2))
        out = x.copy() if in_place else np.full(count, POISON, dtype=dtype)
        start = time.monotonic()
        try:
            comm.Allreduce(MPI.IN_PLACE if in_place else x, out, op=op)
            facts = {"outcome": "ok"}
        except Exception as err:  # recorded for the test to judge
            facts = {"outcome": "error", "error": type(err).__name__, "message": str(err)}
        facts.update(call=f"straggler {i}: {op} {np.dtype(dtype).name}[{count}] "
                          f"{'in place' if in_place else 'out of place'}, rank {who[0]} straggling",
                     elapsed=time.monotonic() - start, output=classify(out, expected(count, dtype, op, salt)))
        event(**facts)


def main() -> None:
    scenario, victim = sys.argv[1], int(sys.argv[2])
    others = [r for r in range(size) if r != victim]
    if scenario == "setup":
        if rank == victim:
            time.sleep(timeout + 0.5)  # never joins: the others give up first
            state["recorded"] = True
            save()
            return
        start = time.monotonic()
        try:
            mpiring.Communicator(world, gpu=False, slot_bytes=SLOT)
            event(call="set-up", outcome="ok", elapsed=time.monotonic() - start)
        except Exception as err:  # recorded for the test to judge
            event(call="set-up", outcome="error", error=type(err).__name__, message=str(err),
                  elapsed=time.monotonic() - start, peer=getattr(err, "peer", None),
                  step=getattr(err, "step", None))
        state["recorded"] = True
        save()
        return

    comm = mpiring.Communicator(world, gpu=False, slot_bytes=SLOT)
    state["check"] = comm.check
    call(comm, "warm-up")
    if scenario == "straggler":
        run_straggler(comm)
    elif scenario == "raise":
        if rank == victim:
            raise RuntimeError(f"injected failure on rank {rank} before its second allreduce")
        call(comm, "fault")
    elif scenario == "mismatch":
        bad = rank == victim
        call(comm, "count", count=COUNT + 1 if bad else COUNT)
        call(comm, "dtype", dtype=np.float32 if bad else np.float64)
        call(comm, "op", op="max" if bad else "sum")
        call(comm, "after")
    elif scenario == "skip":
        if rank != victim:
            call(comm, "fault")
        else:
            state["recorded"] = True
            save()
            wait_for(others, 3 * timeout)  # the others give up first; then close learns why
    elif scenario in ("kill", "stop"):
        if rank == victim and scenario == "kill":
            sabotage(comm, 10, lambda: os._exit(KILLED))
        elif rank == victim:
            resume = float(os.environ["MPIRING_FAULT_RESUME"])

            def stop() -> None:
                subprocess.Popen(["sh", "-c", f"sleep {resume}; kill -CONT {os.getpid()}"])
                os.kill(os.getpid(), signal.SIGSTOP)

            sabotage(comm, 10, stop)
        out = call(comm, "fault")
        state["recorded"] = True  # before waiting for peers: the victim may be the last
        save()
        wait_for(others, SURVIVORS_WAIT)
        if scenario == "stop":  # after the victim resumed and gave up: did anyone write here since?
            wait_for([victim], float(os.environ["MPIRING_FAULT_RESUME"]) + 3 * timeout)
            state["output_after_victim_resumed"] = classify(out, expected(COUNT))
    elif scenario in ("fold-raise", "sigint", "late"):
        if rank == victim and scenario == "fold-raise":
            link, folds = comm.ring_pipeline(gpu=False).transport, [0]
            fold = link.fold

            def failing(*args: Any) -> None:
                folds[0] += 1
                if folds[0] == 5:
                    raise RuntimeError(f"injected fold failure on rank {rank}")
                fold(*args)

            link.fold = failing
        elif rank == victim and scenario == "sigint":
            sabotage(comm, 10, lambda: os.kill(os.getpid(), signal.SIGINT))
        elif rank == victim:
            time.sleep(0.9 * timeout)
            sabotage(comm, 10, lambda: time.sleep(5 * timeout))
        call(comm, "fault")
        state["recorded"] = True
        save()
        wait_for(others, 3 * timeout)
    elif scenario == "seterr":
        if rank == victim:
            np.seterr(all="raise")
        start = time.monotonic()
        try:
            out = comm.allreduce(np.full(COUNT, 60000, dtype=np.float16))
            event(call="fault", outcome="ok", elapsed=time.monotonic() - start,
                  all_inf=bool(np.isposinf(out).all()))
        except Exception as err:  # recorded for the test to judge
            event(call="fault", outcome="error", error=type(err).__name__, message=str(err),
                  elapsed=time.monotonic() - start)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    state["recorded"] = True
    save()
    if scenario == "kill":  # (the victim never records)
        wait_for(others, SURVIVORS_WAIT)
    else:
        wait_for(list(range(size)), 3 * timeout)
    close(comm)
    if scenario == "kill":  # MPI_Finalize would wait for the dead rank for ever (MPICH's PMI
        os._exit(0)  # barrier): a survivor ends without it, its record saved


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        state["exception"] = traceback.format_exc()
        state["recorded"] = True
        save()
        raise
