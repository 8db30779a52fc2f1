"""The agreement check of a one-node communicator runs in the control board (no MPI call):
thousands of calls on changing data with stragglers and injected mismatches, on real ranks.
Virtual nodes (MPIRING_VIRTUAL_NODES, tests/faults) take the MPI path of the same check.
The host side of the GPU-side check is tested on a board of the node's ranks built here."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest
from mpi4py import MPI

import mpiring
from mpiring.core.errors import PeerArgumentError, RankMismatchError
from mpiring.node.signals import AGREE_DEPTH

CALLS = 2000


@pytest.mark.parametrize("algorithm", ["ring", "mpi"])
def test_thousands_of_checked_calls(world: MPI.Intracomm, algorithm: str) -> None:
    """Every rank runs the same random sequence of calls (count, dtype, op); one in 101 is made
    to disagree on one rank and one in 89 is rejected by one rank: every rank raises at exactly
    those calls and writes nothing, and every other call is exact."""
    size, me = world.size, world.rank
    with mpiring.Communicator(world, gpu=False, timeout=60.0) as comm:
        assert comm.stats().check_in_board == (comm.topology.nodes == 1)
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
                with pytest.raises(mpiring.core.errors.InvalidArgumentError):
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


def _gpu_check(world: MPI.Intracomm):
    """The host side of the GPU-side check, on host ranks: an AgreementCheck in a board of the
    node's ranks (as a one-node communicator makes them), whose "oneshot" calls (a GPU-checked
    code) are only posted, and a notify that records what it is sent. Returns, first, what
    frees the board and its communicators once left (collective)."""
    from mpiring.algorithms import Collective
    from mpiring.call.agreement import FIELDS, AgreementCheck
    from mpiring.node.signals import SharedBoard

    closing = contextlib.ExitStack()
    comm = world.Dup()  # the check's own communicator, as a communicator's duplicate is
    closing.callback(comm.Free)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    closing.callback(node.Free)
    board = SharedBoard(node, timeout=60.0)
    closing.callback(board.close)
    check = AgreementCheck(comm, 60.0, board, mpiring.algorithms.name_of_code,
                           lambda c: Collective(c).label)
    if not check.posts:
        closing.close()
        pytest.skip("several nodes: no row checks on the GPU there")
    sent: list[tuple[int, int]] = []
    check.gpu_codes = frozenset({mpiring.algorithms.get("oneshot").code})
    check.notify = sent.append

    def values(algorithm: str, count: int) -> dict[str, int]:
        v = dict.fromkeys(FIELDS, 0)
        v.update(count=count, dtype=1, op=1, algorithm=mpiring.algorithms.get(algorithm).code,
                 memory=int(mpiring.core.buffers.Memory.CUDA), collective=1)
        return v

    return closing, check, sent, values


def test_posted_and_host_checked_calls_share_the_board(world: MPI.Intracomm) -> None:
    """Calls the GPU checks (posted, no wait) and calls checked on the host alternate at random,
    the same on every rank, with stragglers: a posting rank runs ahead at most D - 1 calls, no host
    check ever sees a line of another call (no false mismatch), and no notice is sent. Every
    100 calls begin a run of 30 posted calls whose first the last rank makes 5 ms late, so the
    others do run D - 1 calls ahead there and wait (the host checks, which wait for every rank,
    would otherwise keep the ranks closer than that)."""
    closing, check, sent, values = _gpu_check(world)
    plan, mine = np.random.default_rng(7), np.random.default_rng(50 + world.rank)
    farthest = 0
    with closing:
        for k in range(CALLS):
            count = int(plan.integers(1, 1000))
            if mine.random() < 0.01:
                time.sleep(mine.random() * 2e-3)
            if k % 100 == 0 and world.rank == world.size - 1:
                time.sleep(5e-3)
            if k % 100 < 30 or plan.random() < 0.7:  # (the same on every rank: so is the draw)
                check.post(check.line(values("oneshot", count)))
                lead = check.calls - min(check.board.read(r, 8) for r in range(check.board.size))
                assert lead <= AGREE_DEPTH - 1, f"call {k}: {lead} calls ahead of the slowest rank"
                farthest = max(farthest, lead)
            else:
                check.run(False, values("ring", count))
        assert not sent
    if world.size > 1:
        farthest = world.allreduce(farthest, op=MPI.MAX)
        assert farthest == AGREE_DEPTH - 1, (f"the ranks ran at most {farthest} calls apart, never "
                                             f"{AGREE_DEPTH - 1}: the test lost its point")


@pytest.mark.mpi(min_size=2)
def test_a_host_checked_rank_notices_a_peer_whose_kernel_waits(world: MPI.Intracomm) -> None:
    """The last rank's call is checked on the host (the ring, or arguments it rejected) while the
    others' are posted for their kernels (oneshot): the last rank raises at once and sends a
    notice (DISAGREED with its own fields, or REJECTED), the others do not wait; calls after
    it agree again."""
    from mpiring.core import descriptor

    closing, check, sent, values = _gpu_check(world)
    last = world.rank == world.size - 1
    with closing:
        for case in ("other row", "rejected", "other row"):
            if not last:
                check.post(check.line(values("oneshot", 100)))
            elif case == "rejected":  # returns: the caller raises its own, more precise error
                check.run(True, dict.fromkeys(values("ring", 0), 0))
            else:
                with pytest.raises(RankMismatchError, match="algorithm"):
                    check.run(False, values("ring", 100))
            for _ in range(5):  # the next calls agree, posted and on the host alike
                check.post(check.line(values("oneshot", 7)))
                check.run(False, values("ring", 9))
        if last:
            kinds = [descriptor.unpack(d)["kind"] for d in sent]
            assert kinds == [descriptor.DISAGREED, descriptor.REJECTED, descriptor.DISAGREED]
            assert descriptor.unpack(sent[0])["algorithm"] == mpiring.algorithms.get("ring").code
        else:
            assert not sent
