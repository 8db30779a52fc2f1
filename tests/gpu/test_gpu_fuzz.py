"""Random allreduces through every GPU row, every element checked on the GPU.

Every case draws, from one seed shared by the ranks: a row of the algorithm table (and auto),
a dtype (float32, float16, int32, and bfloat16 through torch tensors), a reduction, a size
class and an odd-or-even count in it (from one element to beyond every staging region: the
one-shot slot, two-shot's chunk, two ring slots), and a placement (out of place, in place,
the same array twice, or views at a random element offset into larger buffers, whose guard
elements must stay untouched). Inputs are small integers that change with every case, so
every sum is exact in every dtype and the result is compared with zero tolerance.

Bounded in time: a minute by default, ``--fuzz-seconds S`` for longer, after a warm-up that
compiles (and checks) every row × dtype × reduction once. The seed is drawn
afresh each run and printed in every failure with the case, so ``--fuzz-seed N`` replays it;
``--fuzz-rows twoshot,ring`` draws from those rows only.
``MPIRING_FUZZ_REPORT=path`` makes rank 0 append one JSON line of what ran (cases per row).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import cupy
import numpy as np
import pytest
from gpu_helpers import WORLD, agree, rank_input, reference, runnable, span_for
from matrix import GPU_ALGORITHMS
from mpi4py import MPI

import mpiring
from mpiring.cuda.layout import DEFAULT_SLOT_BYTES, ONESHOT_BYTES, TWOSHOT_BYTES

RANK, SIZE = WORLD.rank, WORLD.size
pytestmark = pytest.mark.mpi(min_size=2)

try:
    import torch
except ImportError:  # bfloat16 cases need torch (CuPy has no bfloat16)
    torch = None

DTYPES = ["float32", "float16", "int32"] + (["bfloat16"] if torch is not None else [])
OPS = [mpiring.Op.SUM, mpiring.Op.SUM, mpiring.Op.SUM, mpiring.Op.MAX, mpiring.Op.MIN, mpiring.Op.PROD]
PLACEMENTS = ["out", "in", "same", "views"]
# Bytes per size class, each drawn log-uniformly: tiny, up to oneshot-ll's largest rows (256 KiB,
# on 2 ranks), inside one one-shot slot, around two-shot's chunk, and past two ring slots.
CLASSES = [(2, 256), (256, 256 << 10), (256 << 10, ONESHOT_BYTES), (ONESHOT_BYTES, 4 * TWOSHOT_BYTES),
           (4 * TWOSHOT_BYTES, 2 * DEFAULT_SLOT_BYTES + 3 * TWOSHOT_BYTES)]
# The largest message of the rows that refuse larger ones (one-shot's slot row, oneshot-ll's rows).
LIMITS = {"oneshot": ONESHOT_BYTES // SIZE // 16 * 16, "oneshot-ll": (1 << 20) // SIZE // 16 * 8}


@pytest.fixture(scope="module")
def seconds(request) -> float:
    return float(request.config.getoption("fuzz_seconds"))


@pytest.fixture(scope="module")
def rows(request) -> list[str]:
    given = request.config.getoption("fuzz_rows")
    return runnable(GPU_ALGORITHMS if given is None else given.split(","))


@pytest.fixture(scope="module")
def seed(request) -> int:
    given = request.config.getoption("fuzz_seed")
    return int(WORLD.bcast(int.from_bytes(os.urandom(4), "little") if given is None else given))


def draw_case(rng: np.random.Generator, algos: list[str]) -> dict:
    """One case, the same on every rank (``rng`` is seeded alike everywhere)."""
    algo = algos[rng.integers(len(algos))]
    dtype = DTYPES[rng.integers(len(DTYPES))]
    op = OPS[rng.integers(len(OPS))]
    itemsize = 2 if dtype in ("float16", "bfloat16") else 4
    limit = LIMITS.get(algo)
    classes = [c for c in CLASSES if limit is None or c[0] < limit]
    lo, hi = classes[rng.integers(len(classes))]
    if limit is not None:
        hi = min(hi, limit)
    nbytes = int(np.exp(rng.uniform(np.log(lo), np.log(hi))))
    count = max(1, nbytes // itemsize - int(rng.integers(0, 8)))  # odd or even, never aligned on purpose
    placement = PLACEMENTS[rng.integers(len(PLACEMENTS))]
    offsets = (int(rng.integers(1, 8)), int(rng.integers(1, 8)))  # elements, for "views"
    return dict(algo=algo, dtype=dtype, op=op, count=count, placement=placement, offsets=offsets)


class Arrays:
    """The case's arrays in its dtype: CuPy arrays, or torch tensors for bfloat16."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype

    def make(self, values: cupy.ndarray):
        if self.dtype == "bfloat16":
            narrow = torch.from_dlpack(values.astype(cupy.float32)).to(torch.bfloat16)
            torch.cuda.synchronize()
            return narrow
        return values.astype(self.dtype)

    def poisoned(self, count: int):
        if self.dtype == "int32":
            return cupy.full(count, np.iinfo(np.int32).min, dtype=cupy.int32)
        return self.make(cupy.full(count, np.nan))

    def as_float64(self, x) -> cupy.ndarray:
        if self.dtype == "bfloat16":
            wide = x.float()
            torch.cuda.synchronize()  # torch's stream, then CuPy's
            return cupy.from_dlpack(wide).astype(cupy.float64)
        return x.astype(cupy.float64)


def run_case(comm, case: dict, salt: int) -> str | None:
    """One allreduce of the case; a message naming every kind of damage, or None."""
    algo, dtype, op, count = case["algo"], case["dtype"], case["op"], case["count"]
    arrays = Arrays(dtype)
    expect = reference(op, SIZE, count, salt)  # float64, exact
    x = arrays.make(rank_input(RANK, count, cupy.float64, salt, span_for(op)))
    guard_in = guard_out = None
    if case["placement"] == "views":
        a, b = case["offsets"]
        big_in = arrays.poisoned(count + a + 5)
        big_in[a:a + count] = x
        big_out = arrays.poisoned(count + b + 3)
        x, out = big_in[a:a + count], big_out[b:b + count]
        guard_in, guard_out = (big_in, a, count), (big_out, b, count)
    elif case["placement"] == "out":
        out = arrays.poisoned(count)
    else:
        out = x
    cupy.cuda.runtime.deviceSynchronize()
    if case["placement"] == "in":
        comm.Allreduce(MPI.IN_PLACE, out, op, algorithm=algo)
    else:
        comm.Allreduce(x, out, op, algorithm=algo)
    comm.synchronize()
    got = arrays.as_float64(out)
    wrong = int(cupy.count_nonzero(got != expect))  # NaN (poison) counts as wrong
    problems = []
    if wrong:
        first = int(cupy.argmax(got != expect))
        problems.append(f"{wrong} wrong elements (first at {first}: "
                        f"{float(got[first])} != {float(expect[first])})")
    for name, guard in (("input", guard_in), ("output", guard_out)):
        if guard is None:
            continue
        big, start, n = guard
        whole = arrays.as_float64(big)
        outside = cupy.concatenate([whole[:start], whole[start + n:]])
        if dtype == "int32":
            damaged = int(cupy.count_nonzero(outside != np.iinfo(np.int32).min))
        else:
            damaged = int(cupy.count_nonzero(~cupy.isnan(outside)))
        if damaged:
            problems.append(f"{damaged} elements outside the {name} view written")
    return "; ".join(problems) or None


@pytest.fixture(scope="module")
def comm():
    with mpiring.Communicator(WORLD, gpu=True) as c:
        yield c


def test_random_calls_are_exact(comm, seconds, seed, rows):
    """Random cases until ``--fuzz-seconds`` have passed (rank 0's clock decides for all)."""
    algos = rows
    # Compile every kernel the cases can draw before the clock starts: NVRTC takes seconds per
    # (row, dtype, op), which on a fresh machine would eat most of the window. Checked as well.
    warm = time.monotonic()
    warm_failures = []
    for algo in algos:
        for dtype in DTYPES:
            for op in dict.fromkeys(OPS):
                case = dict(algo=algo, dtype=dtype, op=op, count=1000, placement="out", offsets=(1, 1))
                try:
                    problem = run_case(comm, case, salt=0)
                except mpiring.MpiringError as err:
                    problem = f"raised {err!r}"
                if problem is not None:
                    warm_failures.append(f"warm-up {algo} {dtype} {op.name}: {problem}")
    warm_seconds = time.monotonic() - warm
    agree(not warm_failures, "; ".join(warm_failures))
    rng = np.random.default_rng(seed)
    ran: Counter[str] = Counter()
    failures: list[str] = []
    start = time.monotonic()
    case_no = 0
    while WORLD.bcast(time.monotonic() - start < seconds if RANK == 0 else None):
        case = draw_case(rng, algos)
        try:
            problem = run_case(comm, case, salt=case_no)
        except mpiring.MpiringError as err:
            problem = f"raised {err!r}"
        ran[case["algo"]] += 1
        # Every rank's verdict on this case, before the next: one failure stops the run on all.
        verdicts = WORLD.allgather(problem)
        bad = [f"rank {r}: {p}" for r, p in enumerate(verdicts) if p]
        if bad:
            failures.append(f"seed {seed} case {case_no} {case['algo']} {case['dtype']} "
                            f"{case['op'].name} count={case['count']} {case['placement']} "
                            f"{case['offsets'] if case['placement'] == 'views' else ''}: " + "; ".join(bad))
            if len(failures) >= 5:
                break
        case_no += 1
    report = os.environ.get("MPIRING_FUZZ_REPORT")
    if report and RANK == 0:
        with open(report, "a") as f:
            f.write(json.dumps({"ranks": SIZE, "seed": seed, "warm_up_seconds": round(warm_seconds, 1),
                                "seconds": round(time.monotonic() - start, 1),
                                "cases": case_no, "per_row": dict(ran), "failures": failures}) + "\n")
    agree(not failures, " | ".join(failures) + f" (replay: --fuzz-seed {seed})")
