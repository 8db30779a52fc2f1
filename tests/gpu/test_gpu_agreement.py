"""The agreement check on the GPU (the default, ``check="gpu"``): oneshot, twoshot and
oneshot-ll compare their peers' call descriptors in their kernels (``csrc/agree.cuh``), with no
host wait; a difference skips the call on every rank, writes nothing, is raised by
``synchronize()`` or a later call, and leaves the communicator usable. A rank whose call checks
on the host, or that rejects its arguments, launches a notice so its peers' kernels do not
wait for it in vain.

Run under mpirun on 2+ GPUs, or on one shared GPU (``MPIRING_SHARE_GPU=1``: jobs/gpu-shared.sh).
"""

from __future__ import annotations

import random

import cupy
import numpy as np
import pytest
from gpu_helpers import SHARED_GPU, WORLD, agree, gpu_nap, poison, rank_input, reference

import mpiring

RANK, SIZE = WORLD.rank, WORLD.size
LAST = SIZE - 1
pytestmark = pytest.mark.mpi(min_size=2)
GPU_CHECKED = ("oneshot-ll", "oneshot", "twoshot")
COUNTS = {"oneshot-ll": 4096, "oneshot": 20_000, "twoshot": 300_000}


@pytest.mark.parametrize("algo", [*GPU_CHECKED, "oneshot-ll:per-rank-grids"])
def test_a_mismatch_at_call_5000_of_10000_is_skipped_everywhere_and_raised_once(algo, monkeypatch):
    """10,000 calls on changing data, one rank late now and then; at call 5,000 the last rank
    passes one element fewer. Every rank raises RankMismatchError exactly once (naming both
    counts), at whichever later call or synchronize() finds it; call 5,000 writes nothing on
    any rank; every other call is exact on every element (compared on the GPU, no host wait);
    the communicator stays usable throughout. "per-rank-grids": oneshot-ll with a different grid
    on every rank (``MPIRING_LL_BLOCK_LINES``), so the skipped call's lines are cleared by
    blocks that differ from those that pushed them."""
    if algo == "oneshot-ll:per-rank-grids":
        algo = "oneshot-ll"
        monkeypatch.setenv("MPIRING_LL_BLOCK_LINES", str(32 * (RANK + 1)))
    count, bad_call, calls = COUNTS[algo], 5000, 10_000
    chance = random.Random(14)  # the same draws on every rank
    stream = cupy.cuda.get_current_stream()
    base = rank_input(RANK, count, cupy.float32)
    want = reference(mpiring.Op.SUM, SIZE, count).astype(cupy.float32)
    x, out = cupy.empty_like(base), cupy.empty_like(base)
    skipped_out = cupy.empty_like(base)
    poison(skipped_out)
    wrong = cupy.zeros((), dtype=cupy.int64)
    raised: list[tuple[int, Exception]] = []
    with mpiring.Communicator(WORLD, gpu=True, algorithm=algo) as c:
        assert c.check_mode == "gpu"
        for call in range(calls):
            shift = call % 5
            cupy.add(base, shift, out=x)  # changing data: the result moves by SIZE * shift
            n = count - 1 if call == bad_call and RANK == LAST else count
            target = skipped_out if call == bad_call else out
            late, nap = chance.random() < 0.02, chance.uniform(0, 200e-6)  # drawn on every rank
            if late and RANK == call % SIZE:
                gpu_nap(stream, nap)
            try:
                c.Allreduce(x[:n], target[:n])
            except mpiring.MpiringError as err:
                raised.append((call, err))
            if call != bad_call:
                wrong += cupy.count_nonzero(out != want + SIZE * shift)
        try:
            c.synchronize()
        except mpiring.MpiringError as err:
            raised.append((calls, err))
        c.Allreduce(x, out)  # still usable
        c.synchronize()
        ok_after = bool((out == want + SIZE * ((calls - 1) % 5)).all())
    errors = []
    if len(raised) != 1 or not isinstance(raised[0][1], mpiring.RankMismatchError):
        errors.append(f"expected one RankMismatchError, got {[(k, repr(e)) for k, e in raised]}")
    else:
        call, err = raised[0]
        mine, theirs = (count - 1, count) if RANK == LAST else (count, count - 1)
        if call < bad_call or f"count (this rank {mine}" not in str(err) or f" {theirs})" not in str(err):
            errors.append(f"at call {call}: {err}")
    if int(cupy.count_nonzero(~cupy.isnan(skipped_out))):
        errors.append(f"the skipped call wrote {int(cupy.count_nonzero(~cupy.isnan(skipped_out)))} elements")
    if int(wrong):
        errors.append(f"{int(wrong)} wrong elements in the other calls")
    if not ok_after:
        errors.append("the call after the run is wrong")
    agree(not errors, "; ".join(errors))


def _ranks_call(c, algos: dict[int, str], count: int, *, dtype=cupy.float32):
    """One out-of-place allreduce with a per-rank algorithm (default: the first entry's); returns
    (error raised by the call or by synchronize(), where, output)."""
    x = rank_input(RANK, count, dtype)
    out = cupy.empty_like(x)
    poison(out)
    cupy.cuda.get_current_stream().synchronize()
    algo = algos.get(RANK, algos[-1])
    try:
        c.Allreduce(x, out, algorithm=algo)
    except mpiring.MpiringError as err:
        return err, "call", out
    try:
        c.synchronize()
    except mpiring.MpiringError as err:
        return err, "synchronize", out
    return None, "", out


def _untouched(out) -> bool:
    return bool(cupy.isnan(out).all())


@pytest.mark.parametrize("other", ["ring", "nccl", "oneshot-ll", "twoshot"])
def test_a_rank_on_another_row_is_found_and_the_next_call_is_exact(other):
    """The last rank asks for another row than the others' oneshot: a row that checks on the
    host (ring, NCCL) raises at the call and sends a notice; a GPU-checked one (oneshot-ll,
    twoshot) meets the others' kernels. Every rank raises RankMismatchError naming the
    algorithms (at the call, or at synchronize() if its kernel was not done when the call
    returned), nothing is written, and the next calls (oneshot-ll among them, whose lines the
    skipped call may have left) are exact."""
    if other == "nccl" and SHARED_GPU:
        pytest.skip("NCCL refuses ranks that share a GPU")
    with mpiring.Communicator(WORLD, gpu=True) as c:
        err, where, out = _ranks_call(c, {LAST: other, -1: "oneshot"}, 1000)
        host_row = other in ("ring", "nccl") and RANK == LAST
        errors = []
        if not isinstance(err, mpiring.RankMismatchError) or "algorithm (this rank" not in str(err):
            errors.append(f"expected RankMismatchError naming the algorithms, got {err!r}")
        elif host_row and where != "call":  # GPU-checked: at the call if its kernel was done by then
            errors.append(f"raised at {where}")
        if not _untouched(out):
            errors.append("output written")
        for algo in ("oneshot", "oneshot-ll", "twoshot", "oneshot-ll"):
            for n in (1000, 4000):
                err, _, out = _ranks_call(c, {-1: algo}, n)
                want = reference(mpiring.Op.SUM, SIZE, n).astype(cupy.float32)
                if err is not None or not bool((out == want).all()):
                    errors.append(f"{algo} {n} after the mismatch: {err!r}")
    agree(not errors, "; ".join(errors))


def test_a_rank_that_rejects_its_arguments_is_reported_by_every_kernel():
    """The last rank passes buffers of different dtypes (rejected before anything is enqueued):
    it raises InvalidArgumentError at the call; the others' oneshot kernels get its notice and
    raise PeerArgumentError at synchronize(), writing nothing; the next call is exact."""
    errors = []
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot") as c:
        x = rank_input(RANK, 512, cupy.float32)
        out = cupy.empty(512, dtype=cupy.float64 if RANK == LAST else cupy.float32)
        poison(out)
        got = None
        try:
            c.Allreduce(x, out)
            c.synchronize()
        except mpiring.MpiringError as err:
            got = err
        expect = mpiring.InvalidArgumentError if RANK == LAST else mpiring.PeerArgumentError
        if not isinstance(got, expect) or (RANK != LAST and f"rank {LAST} rejected" not in str(got)):
            errors.append(f"expected {expect.__name__}, got {got!r}")
        if not _untouched(out):
            errors.append("output written")
        err, _, out = _ranks_call(c, {-1: "oneshot"}, 512)
        want = reference(mpiring.Op.SUM, SIZE, 512).astype(cupy.float32)
        if err is not None or not bool((out == want).all()):
            errors.append(f"the next call: {err!r}")
    agree(not errors, "; ".join(errors))


def test_zero_elements_on_one_rank_is_a_mismatch_not_a_hang():
    """A GPU-checked call of 0 elements still meets its peers (who were passed more)."""
    errors = []
    with mpiring.Communicator(WORLD, gpu=True, algorithm="twoshot", timeout=60) as c:
        err, _, out = _ranks_call(c, {-1: "twoshot"}, 0 if RANK == LAST else 100)
        if not isinstance(err, mpiring.RankMismatchError) or (RANK != LAST and not _untouched(out)):
            errors.append(f"expected RankMismatchError, nothing written: {err!r}")
        err, _, out = _ranks_call(c, {-1: "twoshot"}, 0)
        if err is not None:
            errors.append(f"a call of 0 elements on every rank: {err!r}")
    agree(not errors, "; ".join(errors))


def test_the_host_check_stays_available_and_raises_at_the_call():
    """check="host": every call is checked on the host before anything is enqueued, so every
    rank raises at the very call."""
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot", check="host") as c:
        assert c.check_mode == "host"
        err, where, out = _ranks_call(c, {LAST: "oneshot-ll", -1: "oneshot"}, 100)
        ok = isinstance(err, mpiring.RankMismatchError) and where == "call" and _untouched(out)
    agree(ok, f"{err!r} at {where}")


def test_descriptors_of_every_dtype_are_compared():
    """A dtype mismatch of the same byte size (float32 against int32) is found too."""
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot-ll") as c:
        err, _, out = _ranks_call(c, {-1: "oneshot-ll"}, 64,
                                  dtype=np.int32 if RANK == LAST else np.float32)
        untouched = bool((out == np.iinfo(np.int32).min).all()) if RANK == LAST else _untouched(out)
    agree(isinstance(err, mpiring.RankMismatchError) and "dtype" in str(err) and untouched, repr(err))
