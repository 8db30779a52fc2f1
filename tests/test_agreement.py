"""The cross-rank agreement check, played by threads standing in for ranks."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from mpi4py import MPI

from mpiring.agreement import FIELDS, AgreementCheck
from mpiring.errors import PeerArgumentError, RankMismatchError

GOOD = {"count": 1000, "dtype": 2, "op": 1, "algorithm": 1, "batches": 0, "memory": 0}


class ThreadComm:
    """One rank's view of an in-process communicator whose Allreduce meets at a barrier."""

    def __init__(self, rank: int, size: int, shared: dict) -> None:
        self.rank, self.size, self.shared = rank, size, shared

    def Allreduce(self, send: np.ndarray, recv: np.ndarray, op: MPI.Op) -> None:  # noqa: N802
        assert op == MPI.MAX
        box, barrier = self.shared["box"], self.shared["barrier"]
        box[self.rank] = send.copy()
        barrier.wait()
        recv[:] = np.max(np.stack(box), axis=0)
        barrier.wait()


def run_ranks(rejected: list[bool], values: list[dict[str, int]]) -> list[BaseException | None]:
    """Run one agreement check on every simulated rank; return what each raised."""
    size = len(values)
    shared = {"box": [None] * size, "barrier": threading.Barrier(size, timeout=10)}
    checks = [AgreementCheck(ThreadComm(r, size, shared)) for r in range(size)]
    results: list[BaseException | None] = [None] * size

    def body(r: int) -> None:
        try:
            checks[r].run(rejected[r], values[r])
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            results[r] = err

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    return results


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_agreement_passes(size: int) -> None:
    """Identical arguments pass on every rank, also twice in a row on the same buffers."""
    assert run_ranks([False] * size, [dict(GOOD)] * size) == [None] * size


@pytest.mark.parametrize("bad", [0, 2, 4])
def test_one_rank_rejected(bad: int) -> None:
    """The rejecting rank returns (to raise its own error); every other rank names it."""
    rejected = [r == bad for r in range(5)]
    values = [dict.fromkeys(FIELDS, 0) if r == bad else dict(GOOD) for r in range(5)]
    results = run_ranks(rejected, values)
    assert results[bad] is None
    for r, err in enumerate(results):
        if r != bad:
            assert isinstance(err, PeerArgumentError)
            assert f"allreduce aborted on rank {r}: rank {bad} rejected its arguments" in str(err)


def test_several_ranks_rejected() -> None:
    """With several rejecting ranks the others still abort, naming one of them."""
    rejected = [False, True, False, True]
    results = run_ranks(rejected, [dict(GOOD)] * 4)
    assert results[1] is None and results[3] is None
    for r in (0, 2):
        assert isinstance(results[r], PeerArgumentError)
        assert "rank 3 rejected its arguments" in str(results[r])


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("odd", [0, 2])
def test_one_rank_disagrees(field: str, odd: int) -> None:
    """One rank with a different value makes every rank raise, naming the field and the range."""
    values = [dict(GOOD) for _ in range(3)]
    values[odd][field] = GOOD[field] + 7
    results = run_ranks([False] * 3, values)
    lo, hi = GOOD[field], GOOD[field] + 7
    for r, err in enumerate(results):
        assert isinstance(err, RankMismatchError), f"rank {r}: {err!r}"
        mine = values[r][field]
        assert f"{field} (this rank {mine}, lowest {lo}, highest {hi})" in str(err)
        assert "Every rank must pass the same count, dtype, op, algorithm, batches and memory" in str(err)
        for other in set(FIELDS) - {field}:
            assert f"{other} (this rank" not in str(err)


def test_several_fields_disagree() -> None:
    """Every disagreeing field is listed."""
    values = [dict(GOOD), dict(GOOD, count=5, op=3)]
    results = run_ranks([False, False], values)
    for err in results:
        assert isinstance(err, RankMismatchError)
        assert "count (this rank" in str(err) and "op (this rank" in str(err)
        assert "dtype (this rank" not in str(err)


def test_rejection_wins_over_mismatch() -> None:
    """When a rank rejected its arguments, peers report that rather than a mismatch."""
    values = [dict(GOOD), dict(GOOD, count=1), dict.fromkeys(FIELDS, 0)]
    results = run_ranks([False, False, True], values)
    assert results[2] is None
    assert all(isinstance(err, PeerArgumentError) for err in results[:2])


def test_real_mpi_single_rank() -> None:
    """On a real one-rank communicator the check passes, and rejection returns quietly."""
    check = AgreementCheck(MPI.COMM_SELF)
    check.run(False, dict(GOOD))
    check.run(True, dict.fromkeys(FIELDS, 0))
