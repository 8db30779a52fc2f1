"""The cross-rank agreement check, played by threads standing in for ranks."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from mpi4py import MPI

from mpiring.call.agreement import FIELDS, AgreementCheck
from mpiring.core.errors import MpiringTimeoutError, PeerArgumentError, RankMismatchError
from mpiring.node.setup_steps import all_ranks, join
from mpiring.node.signals import COUNTER_STRIDE, NUM_COUNTERS

GOOD = {"count": 1000, "dtype": 2, "op": 1, "algorithm": 1, "batches": 0, "memory": 0, "collective": 1,
        "block": 0, "in_place": 0}


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


def in_threads(ranks: list[int], size: int, call) -> list[BaseException | None]:
    """Run ``call(rank)`` for every rank in ``ranks``, one thread each; what each raised."""
    results: list[BaseException | None] = [None] * size

    def body(r: int) -> None:
        try:
            call(r)
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            results[r] = err

    threads = [threading.Thread(target=body, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    return results


def run_ranks(rejected: list[bool], values: list[dict[str, int]],
              times: int = 1) -> list[BaseException | None]:
    """Run ``times`` agreement checks, one after the other on the same checks, on every
    simulated rank; return what each raised."""
    size = len(values)
    shared = {"box": [None] * size, "barrier": threading.Barrier(size, timeout=10)}
    checks = [AgreementCheck(ThreadComm(r, size, shared)) for r in range(size)]

    def rank(r: int) -> None:
        for _ in range(times):
            checks[r].run(rejected[r], values[r])
    return in_threads(list(range(size)), size, rank)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_agreement_passes(size: int) -> None:
    """Identical arguments pass on every rank, also three times in a row on the same buffers."""
    assert run_ranks([False] * size, [dict(GOOD)] * size, times=3) == [None] * size


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
        say = AgreementCheck(MPI.COMM_SELF).names.get(field, str)
        mine = values[r][field]
        assert f"{field} (this rank {say(mine)}, others from {say(lo)} to {say(hi)})" in str(err)
        assert "Every rank must pass the same count, dtype, op, algorithm, batches and memory" in str(err)
        for other in set(FIELDS) - {field}:
            assert f"{other} (this rank" not in str(err)


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("size", [2, 3, 4])
def test_one_rank_disagrees_in_the_board(field: str, size: int) -> None:
    """The one-node check (descriptors in the board's lines) sees a difference in every field,
    the last ones too (a descriptor spans two of the board's 64-byte lines)."""
    shared = {"box": [None] * size, "lock": threading.Lock()}
    lines = board_lines(size)
    odd = size - 1

    def call(r: int) -> None:
        check = AgreementCheck(PolledComm(r, size, shared), 5.0, FakeBoard(r, size, lines), use_board=True)
        assert check.posts  # the board path, not the allreduce
        check.run(False, dict(GOOD, **{field: GOOD[field] + (1 if r == odd else 0)}))

    for r, err in enumerate(in_threads(list(range(size)), size, call)):
        assert isinstance(err, RankMismatchError), f"rank {r}: {err!r}"
        assert f"{field} (this rank" in str(err)
        assert [f for f in FIELDS if f"{f} (this rank" in str(err)] == [field]


def test_block_collective_errors_say_the_placement_rule() -> None:
    """A placement mismatch reads as MPI.IN_PLACE against out of place, with MPI's rule."""
    values = [dict(GOOD, collective=2, block=400, in_place=1), dict(GOOD, collective=2, block=400)]
    for err in run_ranks([False, False], values):
        assert isinstance(err, RankMismatchError)
        assert "in_place (this rank" in str(err) and "others from out of place to MPI.IN_PLACE)" in str(err)
        assert "MPI.IN_PLACE on every rank or on none, as MPI requires" in str(err)
        assert "block (this rank" not in str(err)


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


class PolledComm(ThreadComm):
    """A ThreadComm whose Iallreduce completes once every simulated rank has contributed."""

    def Iallreduce(self, send: np.ndarray, recv: np.ndarray, op: MPI.Op) -> PolledRequest:  # noqa: N802
        assert op == MPI.MAX
        with self.shared["lock"]:
            self.shared["box"][self.rank] = send.copy()
        return PolledRequest(self.shared["box"], recv)


class PolledRequest:
    def __init__(self, box: list, recv: np.ndarray) -> None:
        self.box, self.recv = box, recv

    def Test(self) -> bool:  # noqa: N802
        if any(b is None for b in self.box):
            return False
        self.recv[:] = np.max(np.stack(self.box), axis=0)
        return True


class FakeBoard:
    """A node's control board as SharedBoard lays it out (per rank: NUM_COUNTERS lines of 8 int64 words,
    counters in word 0), in process memory shared by the threads that stand in for ranks."""

    def __init__(self, rank: int, size: int, lines: list[np.ndarray]) -> None:
        self.rank, self.size, self.lines = rank, size, lines
        self.counters = [line[:, 0] for line in lines]

    def post(self, rank: int, index: int, value: int) -> None:
        self.counters[rank][index] = value

    def read(self, rank: int, index: int) -> int:
        return int(self.counters[rank][index])

    def fence(self) -> None:
        pass


def board_lines(size: int) -> list[np.ndarray]:
    return [np.zeros((NUM_COUNTERS, COUNTER_STRIDE), dtype=np.int64) for _ in range(size)]


def run_polled(present: list[int], size: int, timeout: float, board: bool = True,
               use_board: bool = False) -> list[BaseException | None]:
    """One bounded check on the ranks in ``present`` (the others never call); what each raised.
    ``use_board``: compare in the board (one node) rather than by the (polled) allreduce."""
    shared = {"box": [None] * size, "lock": threading.Lock()}
    lines = board_lines(size)

    def call(r: int) -> None:
        counters = FakeBoard(r, size, lines) if board else None
        AgreementCheck(PolledComm(r, size, shared), timeout, counters,
                       use_board=use_board).run(False, dict(GOOD), "ring")

    return in_threads(present, size, call)


@pytest.mark.parametrize("use_board", [False, True], ids=["by-allreduce", "in-board"])
def test_bounded_check_passes_when_everyone_comes(use_board: bool) -> None:
    """The polled check gives the same verdict as the blocking one when every rank calls."""
    assert run_polled([0, 1, 2], 3, 5.0, use_board=use_board) == [None, None, None]


@pytest.mark.parametrize("use_board", [False, True], ids=["by-allreduce", "in-board"])
def test_bounded_check_names_the_missing_rank(use_board: bool) -> None:
    """A rank that never calls: the others time out, naming it, the call number and the algorithm."""
    start = time.monotonic()
    results = run_polled([0, 2, 3], 4, 0.2, use_board=use_board)
    assert 0.2 <= time.monotonic() - start < 5
    for r in (0, 2, 3):
        err = results[r]
        assert isinstance(err, MpiringTimeoutError), err
        assert str(err).startswith(
            f"rank {r} timed out after 0.2 s in the agreement check of call 1 (algorithm ring), waiting for "
            "every rank to enter the agreement check of call 1: 1 of 4 ranks did not call allreduce "
            "(rank 1 is at call 0); every rank must call each collective the same number of times"), str(err)
        assert (err.rank, err.peer, err.algorithm, err.step, err.seq) == (r, 1, "ring", "agreement check", 1)


@pytest.mark.parametrize("use_board", [False, True], ids=["by-allreduce", "in-board"])
def test_bounded_check_without_board_or_with_several_missing(use_board: bool) -> None:
    """Without call counters the message says a rank is missing; with two missing, both are named."""
    results = run_polled([0, 1], 3, 0.1, board=False)
    assert "some rank did not call allreduce" in str(results[0]) and results[0].peer is None
    results = run_polled([0], 3, 0.1, use_board=use_board)
    assert "2 of 3 ranks did not call allreduce (rank 1 is at call 0, rank 2 is at call 0)" in str(results[0])
    assert results[0].peer is None


def test_bounded_check_on_one_real_rank() -> None:
    """With a timeout, the check on a real one-rank communicator passes and counts its calls."""
    check = AgreementCheck(MPI.COMM_SELF, 1.0)
    check.run(False, dict(GOOD))
    check.run(True, dict.fromkeys(FIELDS, 0))
    assert check.calls == 2


def test_join_and_all_ranks_on_one_rank() -> None:
    """The set-up rendezvous duplicates the communicator; all_ranks is a logical and."""
    dup = join(MPI.COMM_SELF, 1.0)
    try:
        assert dup.size == 1 and dup != MPI.COMM_SELF
        assert all_ranks(dup, True, 1.0, "agree") is True
        assert all_ranks(dup, False, 1.0, "agree") is False
    finally:
        dup.Free()


def test_mismatch_errors_name_dtypes_ops_and_memory_not_codes() -> None:
    """Users read "float32", "sum", "GPU", not wire codes."""
    names = AgreementCheck(MPI.COMM_SELF, algorithm_name=lambda c: {1: "ring"}.get(c, "?")).names
    assert names["dtype"](2) == "float32" and names["dtype"](6) == "bfloat16"
    assert names["dtype"](77) == "dtype code 77"
    assert names["op"](3) == "max" and names["op"](9) == "op code 9"
    assert names["memory"](1) == "GPU" and names["algorithm"](1) == "ring"
    assert names["batches"](0) == "default" and names["batches"](4) == "4"


@pytest.mark.parametrize("size", [2, 3, 4])
def test_board_check_over_many_calls_with_stragglers(size: int) -> None:
    """The one-node check on the board's lines (call k in line k % D): over 1500 calls on
    changing arguments, with random stragglers, every rank gets exactly the verdict of each
    call: a mismatch injected by one rank at call k makes every rank raise RankMismatchError at
    k (no rank reads another call's line in place of call k's), a rejection makes the others
    raise PeerArgumentError, and every other call passes. Every call here waits for every
    rank's descriptor, so the ranks stay within a call of each other; a rank that posts without
    waiting, D - 1 calls ahead, is tests/mpi/test_mpi_agreement_board.py's."""
    calls = 1500
    lines = board_lines(size)
    shared = {"box": [None] * size, "lock": threading.Lock()}
    verdicts: list[list[str]] = [[] for _ in range(size)]

    def expected(k: int) -> str:
        return "mismatch" if k % 97 == 0 else "peer-rejected" if k % 89 == 0 else "ok"

    def rank(r: int) -> None:
        rng = np.random.default_rng(r)
        check = AgreementCheck(PolledComm(r, size, shared), 10.0, FakeBoard(r, size, lines), use_board=True)
        assert check.posts  # the board path, not the allreduce
        for k in range(1, calls + 1):
            values = dict(GOOD, count=k * 7 % 1013)
            if k % 97 == 0 and r == k % size:
                values["count"] += 1
            rejected = k % 89 == 0 and r == (k // 89) % size
            if rng.random() < 0.02:
                time.sleep(rng.random() * 2e-3)  # a straggler
            try:
                check.run(rejected, values)
                verdicts[r].append("own-rejection" if rejected else "ok")
            except RankMismatchError:
                verdicts[r].append("mismatch")
            except PeerArgumentError:
                verdicts[r].append("peer-rejected")

    assert in_threads(list(range(size)), size, rank) == [None] * size
    for r in range(size):
        want = ["own-rejection" if expected(k) == "peer-rejected" and r == (k // 89) % size else expected(k)
                for k in range(1, calls + 1)]
        wrong = [k for k, (got, exp) in enumerate(zip(verdicts[r], want, strict=True), 1) if got != exp]
        assert not wrong, f"rank {r}: wrong verdicts at calls {wrong[:10]}"
