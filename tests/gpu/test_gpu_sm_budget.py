"""The SM budget on the GPU (issue 14, item 1): with ``Communicator(sm_budget=N)`` none of
mpiring's own kernels launches more than N blocks (so together they hold at most N SMs), every
row still reduces exactly, oneshot-ll's largest message shrinks to N * 8 KiB below 8 SMs, and
a budget above the GPU's SMs is the GPU's SMs.

Every launch mpiring makes goes through ``cupy.cuda.driver.launchKernel`` (mpiring.cuda.launcher
binds it when a launcher is made), so a recorder put there before the communicator is made sees
the grid of every fold, copy, one-/two-shot and oneshot-ll kernel; CuPy's own kernels (the
test's arithmetic) do not go through it.

Run under mpirun on 1+ GPUs, or on one shared GPU (``MPIRING_SHARE_GPU=1``: jobs/gpu-shared.sh).
"""

from __future__ import annotations

import cupy
import pytest
from cupy.cuda import driver
from gpu_helpers import WORLD, agree, fit, poison, rank_input, reference, runnable
from mpi4py import MPI

import mpiring
from mpiring.core.errors import InvalidArgumentError

RANK, SIZE = WORLD.rank, WORLD.size
BUDGET = 8
ROWS = runnable(("ring", "ring-events", "oneshot", "twoshot", "oneshot-ll", "auto"))
pytestmark = pytest.mark.mpi


@pytest.fixture
def grids(monkeypatch) -> list[int]:
    """The grid (blocks) of every kernel mpiring launches from now on."""
    seen: list[int] = []
    launch = driver.launchKernel

    def recorded(function, gx, *rest):
        seen.append(gx)
        return launch(function, gx, *rest)
    monkeypatch.setattr(driver, "launchKernel", recorded)
    return seen


@pytest.mark.parametrize("algo", ROWS)
def test_every_kernel_stays_within_the_budget_and_every_call_is_exact(algo, grids) -> None:
    problems = []
    with mpiring.Communicator(WORLD, gpu=True, algorithm=algo, sm_budget=BUDGET) as c:
        # The budget's own limit (oneshot-ll: BUDGET x 8 KiB), below the rank count's.
        limit = c.max_bytes(algo, gpu=True)
        cap = (1 << 62) if limit is None else limit // 4
        sizes = sorted({min(fit(algo, n, cupy.float32), cap) for n in (1000, 16_384, 1 << 20, 12 << 20)})
        if c.sm_budget != BUDGET:
            problems.append(f"comm.sm_budget is {c.sm_budget}, not {BUDGET}")
        for count in sizes:
            want = reference(mpiring.Op.SUM, SIZE, count).astype(cupy.float32)
            out = cupy.empty(count, dtype=cupy.float32)
            for call in range(3):  # the first plans the call; later ones may be replayed
                x = rank_input(RANK, count, cupy.float32) + call
                poison(out)
                c.Allreduce(x, out)
                wrong = int(cupy.count_nonzero(out != want + SIZE * call))
                if wrong:
                    problems.append(f"{count} elements, call {call}: {wrong} wrong")
        c.synchronize()
    if not grids:
        problems.append("no launch was recorded")
    elif max(grids) > BUDGET:
        problems.append(f"a kernel launched {max(grids)} blocks, over the budget of {BUDGET}")
    agree(not problems, "; ".join(problems))


def test_oneshot_ll_messages_shrink_to_the_budget() -> None:
    """A budget of 4 SMs: oneshot-ll takes up to 4 x 8 KiB (one block per 8 KiB of message);
    a larger message is refused on every rank, naming the limit; the communicator goes on."""
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot-ll", sm_budget=4) as c:
        limit = 4 * 8 << 10
        x = cupy.ones(limit // 4 * 2, dtype=cupy.float32)
        with pytest.raises(InvalidArgumentError, match=f"at most {limit} bytes"):
            c.Allreduce(MPI.IN_PLACE, x)
        y = cupy.ones(limit // 4, dtype=cupy.float32)
        c.Allreduce(MPI.IN_PLACE, y)
        c.synchronize()
        agree(bool((y == SIZE).all()), f"{y[:4]} != {SIZE}")


def test_a_budget_over_the_gpus_sms_is_the_gpus_sms() -> None:
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    with mpiring.Communicator(WORLD, gpu=True, sm_budget=10_000) as c:
        agree(c.sm_budget == sms, f"comm.sm_budget {c.sm_budget}, the GPU has {sms} SMs")
    with mpiring.Communicator(WORLD, gpu=True) as c:
        agree(c.sm_budget is None, f"no budget asked, comm.sm_budget {c.sm_budget}")
