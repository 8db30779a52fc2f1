"""The agreement check of a one-node communicator runs in the control board (no MPI call):
thousands of calls on changing data with stragglers and injected mismatches, on real ranks.
Virtual nodes (MPIRING_VIRTUAL_NODES, tests/faults) take the MPI path of the same check."""

from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

import mpiring
from mpiring.errors import PeerArgumentError, RankMismatchError

CALLS = 2000


@pytest.mark.parametrize("algorithm", ["ring", "mpi"])
def test_thousands_of_checked_calls(world: MPI.Intracomm, algorithm: str) -> None:
    """Every rank runs the same random sequence of calls (count, dtype, op); one in 101 is made
    to disagree on one rank and one in 89 is rejected by one rank: every rank raises at exactly
    those calls and writes nothing, and every other call is exact."""
    size, me = world.size, world.rank
    with mpiring.Communicator(world, gpu=False, timeout=60.0) as comm:
        assert (comm._check.agreement._lines is not None) == (comm.topology.nodes == 1)
        plan = np.random.default_rng(2026)  # the same sequence on every rank
        mine = np.random.default_rng(100 + me)  # stragglers differ per rank
        for k in range(CALLS):
            n = int(plan.integers(1, 400))
            dtype = (np.float64, np.int64, np.float32)[int(plan.integers(3))]
            op, fold = ((MPI.SUM, np.add), (MPI.MAX, np.maximum),
                        (MPI.MIN, np.minimum))[int(plan.integers(3))]
            odd, rejecter = int(plan.integers(size)), int(plan.integers(size))
            rejected = size > 1 and k % 89 == 40
            mismatch = size > 1 and k % 101 == 50 and not rejected  # a rejection wins over a mismatch
            if mine.random() < 0.01:
                time.sleep(mine.random() * 3e-3)
            x = ((np.arange(n) * (2 * me + 1) + k) % 17).astype(dtype)
            if mismatch and me == odd:
                x = np.concatenate([x, x[:1]])  # one element more than the others
            out = np.full(x.size, -99, dtype=dtype)
            if rejected and me == rejecter:
                with pytest.raises(mpiring.errors.InvalidArgumentError):
                    comm.Allreduce(x, out, op="bogus", algorithm=algorithm)
            elif mismatch or rejected:
                with pytest.raises(RankMismatchError if mismatch else PeerArgumentError):
                    comm.Allreduce(x, out, op=op, algorithm=algorithm)
            else:
                comm.Allreduce(x, out, op=op, algorithm=algorithm)
                inputs = [((np.arange(n) * (2 * r + 1) + k) % 17).astype(dtype) for r in range(size)]
                want = inputs[0]
                for other in inputs[1:]:
                    want = fold(want, other)
                assert np.array_equal(out, want), f"call {k}"
                continue
            assert (out == -99).all(), f"call {k}: the output was written"
