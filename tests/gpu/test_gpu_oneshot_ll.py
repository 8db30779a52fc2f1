"""oneshot-ll on the GPU: exact results over thousands of calls on changing data with a
straggler, graph replays, unaligned views and its size limit (a mismatch found by the kernel:
test_gpu_agreement.py).

The matrix of every dtype, op and placement runs over it in test_gpu_allreduce.py (it is a row
of the table); here are the properties of its protocol: lines carry their call's flag, a slot
is reused every other call with no barrier (so a rank may run one call ahead of a late peer),
and the call's descriptor travels with the data.
"""

from __future__ import annotations

import random

import cupy
import numpy as np
import pytest
from gpu_helpers import LIMITS, WORLD, agree, gpu_nap, mismatches, poison, rank_input, reference, span_for
from mpi4py import MPI

import mpiring

RANK, SIZE = WORLD.rank, WORLD.size
LIMIT = LIMITS["oneshot-ll"]  # 1 MiB slots split among the ranks: 64 KiB on 8, 128 KiB on 4
pytestmark = pytest.mark.mpi(min_size=2)


def test_ten_thousand_calls_on_changing_data_with_a_straggler():
    """10,000 calls, sizes from 1 element to the limit, every dtype and op, out of place and in
    place, one rank held back on the GPU at random calls (so its peers run ahead into the next
    slot): every element of every call checked, in groups of 32 enqueued back to back."""
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot-ll") as c:
        errors = _calls_on_changing_data(c, 10_000, seed=2026)
    agree(not errors, "; ".join(errors[:10]))


@pytest.mark.parametrize("block_lines", ["32", "128", "per-rank"])
def test_spread_grids_on_changing_data_with_a_straggler(monkeypatch, block_lines):
    """Blocks of fewer lines (``MPIRING_LL_BLOCK_LINES``) spread a message over more SMs; a
    rank's grid is its own ("per-rank": rank r's blocks take 64 * (r + 1) lines, so every rank
    differs): 2,000 calls as above, every element checked."""
    value = str(64 * (RANK + 1)) if block_lines == "per-rank" else block_lines
    monkeypatch.setenv("MPIRING_LL_BLOCK_LINES", value)  # read when the communicator is made
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot-ll") as c:
        errors = _calls_on_changing_data(c, 2_000, seed=2027)
    agree(not errors, "; ".join(errors[:10]))


def _calls_on_changing_data(c: mpiring.Communicator, calls: int, seed: int) -> list[str]:
    """``calls`` oneshot-ll calls of random sizes, dtypes, ops and placements with a straggler,
    checked in groups of 32; the errors found."""
    chance = random.Random(seed)  # the same draws on every rank: the calls are collective
    dtypes = ("float32", "float16", "float64", "int32", "int64")
    ops = list(mpiring.core.ops.REDUCTIONS)
    errors: list[str] = []
    stream = cupy.cuda.get_current_stream()
    pending = []
    for call in range(calls):
        dtype, op = chance.choice(dtypes), chance.choice(ops)
        most = LIMIT // np.dtype(dtype).itemsize
        count = chance.choice([1, 2, 3, 7, 1023, most, chance.randrange(1, most + 1)])
        x = rank_input(RANK, count, dtype, salt=call, span=span_for(op))
        if chance.random() < 0.5:
            out = cupy.empty_like(x)
            poison(out)
            c.Allreduce(x, out, op)
        else:
            out = x
            c.Allreduce(MPI.IN_PLACE, out, op)
        late, delay = chance.random() < 0.05, chance.uniform(0, 300e-6)  # drawn on every rank
        if late and RANK == call % SIZE:
            gpu_nap(stream, delay)
        pending.append((call, op, dtype, count, out))
        if len(pending) == 32:
            errors += _check(pending)
            pending.clear()
    errors += _check(pending)
    c.synchronize()
    return errors


def _check(pending) -> list[str]:
    errors = []
    for call, op, dtype, count, out in pending:
        wrong = mismatches(out, reference(op, SIZE, count, salt=call))
        if wrong:
            errors.append(f"call {call} {op.name} {dtype} n={count}: {wrong} wrong")
    return errors


def test_graph_replays_on_changing_data():
    """A captured call replayed 500 times, the input rewritten before each replay: the call
    count lives on the GPU, so each replay uses the next slot and flag."""
    count = 3001
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot-ll") as c:
        stream = cupy.cuda.Stream(non_blocking=True)
        x = cupy.empty(count, dtype=cupy.float32)
        out = cupy.empty_like(x)
        with stream:
            x[...] = rank_input(RANK, count, cupy.float32)
            c.Allreduce(x, out)  # the first call on the capture stream, before capturing
            stream.begin_capture()
            c.Allreduce(x, out)
            graph = stream.end_capture()
        errors = []
        for k in range(500):
            with stream:
                x[...] = rank_input(RANK, count, cupy.float32, salt=k)
                poison(out)
                graph.launch(stream)
                wrong = mismatches(out, reference(mpiring.Op.SUM, SIZE, count, salt=k))
            if wrong:
                errors.append(f"replay {k}: {wrong} wrong")
        stream.synchronize()
        c.synchronize()
    agree(not errors, "; ".join(errors[:10]))


def test_unaligned_views_and_half_lines():
    """Views off an 8-byte boundary and counts that end inside a line: element-wise loads and
    stores, nothing outside the view touched."""
    errors = []
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot-ll") as c:
        for dtype in ("float16", "float32", "int32"):
            for count, offset in ((1, 1), (3, 1), (1001, 3), (5, RANK % 2), (4097, RANK % 4)):
                base = cupy.empty(count + offset + 1, dtype=dtype)
                x = base[offset:offset + count]
                x[...] = rank_input(RANK, count, dtype, salt=count)
                out_base = cupy.full(count + 2, 77, dtype=dtype)
                out = out_base[1:1 + count]
                c.Allreduce(x, out)
                wrong = mismatches(out, reference(mpiring.Op.SUM, SIZE, count, salt=count))
                if wrong or int(out_base[0]) != 77 or int(out_base[-1]) != 77:
                    errors.append(f"{dtype} n={count} offset={offset}: {wrong} wrong or neighbours touched")
    agree(not errors, "; ".join(errors))


def test_the_limit_is_enforced_and_auto_falls_back():
    with mpiring.Communicator(WORLD, gpu=True) as c:
        assert c.max_bytes("oneshot-ll") == LIMIT
        x = cupy.ones(LIMIT // 4 + 1, dtype=cupy.float32)
        with pytest.raises(mpiring.InvalidArgumentError, match="oneshot-ll"):
            c.Allreduce(MPI.IN_PLACE, x, algorithm="oneshot-ll")
        y = cupy.ones(LIMIT // 4, dtype=cupy.float32)
        c.Allreduce(MPI.IN_PLACE, y, algorithm="oneshot-ll")
        agree(bool((y == SIZE).all()), "the largest oneshot-ll message is wrong")
