"""Bad input on every rank or on one rank only: every rank raises, and the communicator still works."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import BF16, all_ok, attempt, expect_raised, reduce_and_check

import mpiring
from mpiring import InvalidArgumentError, MpiringError, PeerArgumentError, RankMismatchError, UnavailableError
from mpiring.core.errors import PeerFailedError
from mpiring.core.ops import Op

COUNT = 1000
Call = Callable[[mpiring.Communicator], Any]


def good(comm: mpiring.Communicator) -> Any:
    """The call every well-behaved rank makes: COUNT float64 summed out of place."""
    return comm.Allreduce(np.ones(COUNT), np.zeros(COUNT), MPI.SUM)


def readonly(arr: np.ndarray) -> np.ndarray:
    """``arr``, made read-only."""
    arr.flags.writeable = False
    return arr


def overlapping(comm: mpiring.Communicator) -> Any:
    """Send and receive windows of one array that overlap by half."""
    whole = np.zeros(COUNT + COUNT // 2)
    return comm.Allreduce(whole[:COUNT], whole[COUNT // 2:], MPI.SUM)


class FakeCudaArray:
    """A device array as seen through __cuda_array_interface__ only."""

    def __init__(self, cai: dict) -> None:
        self.__cuda_array_interface__ = cai


CUDA_CAI = {"shape": (COUNT,), "typestr": "<f8", "data": (0x7F0000000000, False), "version": 3}

# name -> (the bad call, the class the offending rank raises, fragments of its message)
BAD: dict[str, tuple[Call, type[BaseException], tuple[str, ...]]] = {
    "non-contiguous send": (lambda c: c.Allreduce(np.ones(2 * COUNT)[::2], np.zeros(COUNT)),
                            InvalidArgumentError, ("sendbuf is not contiguous", "strides (16,)")),
    "non-contiguous recv": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros((COUNT, 2))[:, 0]),
                            InvalidArgumentError, ("recvbuf is not contiguous",)),
    "count mismatch": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT + 1)),
                       InvalidArgumentError, (f"sendbuf has {COUNT} elements but recvbuf has {COUNT + 1}",)),
    "dtype mismatch": (lambda c: c.Allreduce(np.ones(COUNT, np.float32), np.zeros(COUNT)),
                       InvalidArgumentError, ("sendbuf is float32 but recvbuf is float64",)),
    "unsupported dtype": (lambda c: c.Allreduce(np.ones(COUNT, np.complex64), np.zeros(COUNT, np.complex64)),
                          InvalidArgumentError, ("recvbuf: unsupported dtype complex64",)),
    "unsupported dtype in place": (lambda c: c.Allreduce(MPI.IN_PLACE, np.zeros(COUNT, np.uint8)),
                                   InvalidArgumentError, ("unsupported dtype uint8",)),
    "bool": (lambda c: c.allreduce(np.zeros(COUNT, bool)), InvalidArgumentError, ("unsupported dtype bool",)),
    "unsupported op name": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), "mean"),
                            InvalidArgumentError, ("unsupported op 'mean'",)),
    "avg of integers": (lambda c: c.Allreduce(np.ones(COUNT, np.int32), np.zeros(COUNT, np.int32), "avg"),
                        InvalidArgumentError, ("op 'avg' averages floating-point arrays, not int32",)),
    "unsupported MPI op": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), MPI.BAND),
                           InvalidArgumentError, ("unsupported op",)),
    "partial overlap": (overlapping, InvalidArgumentError, ("sendbuf and recvbuf partially overlap",)),
    "read-only recv": (lambda c: c.Allreduce(np.ones(COUNT), readonly(np.zeros(COUNT))),
                       InvalidArgumentError, ("recvbuf is read-only",)),
    "read-only in place": (lambda c: c.Allreduce(MPI.IN_PLACE, readonly(np.zeros(COUNT))),
                           InvalidArgumentError, ("recvbuf is read-only",)),
    "unknown algorithm": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), algorithm="tree"),
                          InvalidArgumentError, ("unknown algorithm 'tree'",)),
    "GPU algorithm on host": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), algorithm="nccl"),
                              InvalidArgumentError, ("algorithm 'nccl' reduces GPU arrays, but these are",)),
    "mpi with bfloat16": (lambda c: c.Allreduce(np.ones(COUNT, BF16), np.zeros(COUNT, BF16), algorithm="mpi"),
                          InvalidArgumentError, ("algorithm 'mpi' cannot reduce bfloat16",)),
    "zero batches": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), batches=0),
                     InvalidArgumentError, ("batches must be a positive integer or None, got 0",)),
    "bool batches": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), batches=True),
                     InvalidArgumentError, ("got True",)),
    "list sendbuf": (lambda c: c.Allreduce([1.0] * COUNT, np.zeros(COUNT)),
                     InvalidArgumentError, ("sendbuf of type list is not an array",)),
    "list to allreduce": (lambda c: c.allreduce([1.0] * COUNT),
                          InvalidArgumentError, ("cannot allreduce an object of type list",)),
    "foreign byte order": (lambda c: c.Allreduce(np.ones(COUNT, ">f8"), np.zeros(COUNT)),
                           InvalidArgumentError, ("sendbuf has non-native byte order (>f8)",)),
    "GPU array on a host communicator": (
        lambda c: c.Allreduce(MPI.IN_PLACE, FakeCudaArray(dict(CUDA_CAI))),
        UnavailableError, ("GPU arrays passed to a communicator created without GPUs",)),
    "malformed array interface": (lambda c: c.Allreduce(MPI.IN_PLACE, FakeCudaArray({"typestr": "<f8"})),
                                  InvalidArgumentError, ("recvbuf's __cuda_array_interface__ is malformed",
                                                         "KeyError: 'shape'")),
}

# name -> how the odd rank's otherwise valid call differs
MISMATCH: dict[str, tuple[Call, str]] = {
    "count": (lambda c: c.Allreduce(np.ones(COUNT + 1), np.zeros(COUNT + 1)), "count"),
    "count zero": (lambda c: c.Allreduce(np.ones(0), np.zeros(0)), "count"),
    "dtype": (lambda c: c.Allreduce(np.ones(COUNT, np.float32), np.zeros(COUNT, np.float32)), "dtype"),
    "op": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), MPI.MAX), "op"),
    "op avg": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), "avg"), "op"),
    "algorithm": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), algorithm="mpi"), "algorithm"),
    "batches": (lambda c: c.Allreduce(np.ones(COUNT), np.zeros(COUNT), batches=2), "batches"),
}


def still_works(comm: mpiring.Communicator, seq_before: int, label: str) -> list[str]:
    """Problems if the failed call moved sequence numbers, or a verified call now goes wrong."""
    problems = []
    if comm.ring_pipeline(gpu=False).next_seq != seq_before:
        problems.append(f"{label}: a rejected call moved the sequence from {seq_before} "
                        f"to {comm.ring_pipeline(gpu=False).next_seq}")
    problems += reduce_and_check(comm, np.dtype(np.float32), Op.SUM, 7919, "out", seed=31, label=label)
    return problems


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_on_every_rank(small_comm: mpiring.Communicator, case: str) -> None:
    """Every rank passes the same bad input: every rank raises the precise error."""
    call, cls, fragments = BAD[case]
    before = small_comm.ring_pipeline(gpu=False).next_seq
    err = attempt(lambda: call(small_comm))
    problems = expect_raised(err, cls, *fragments)
    if isinstance(err, (PeerArgumentError, RankMismatchError)):
        problems.append(f"{case}: a rank's own error was replaced by {type(err).__name__}")
    all_ok(problems + still_works(small_comm, before, case))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_on_one_rank(small_comm: mpiring.Communicator, case: str, which: str) -> None:
    """One rank passes bad input: it raises its own error, every other rank PeerArgumentError."""
    call, cls, fragments = BAD[case]
    me, size = small_comm.rank, small_comm.size
    bad = 0 if which == "first" else size - 1
    before = small_comm.ring_pipeline(gpu=False).next_seq
    err = attempt(lambda: call(small_comm) if me == bad else good(small_comm))
    if me == bad:
        problems = expect_raised(err, cls, *fragments)
    else:
        problems = expect_raised(err, PeerArgumentError, f"allreduce aborted on rank {me}: rank {bad} "
                                 "rejected its arguments")
    all_ok(problems + still_works(small_comm, before, case))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", list(MISMATCH))
def test_ranks_disagree(small_comm: mpiring.Communicator, case: str) -> None:
    """One rank's valid call differs from the others': every rank raises RankMismatchError naming it."""
    call, field = MISMATCH[case]
    odd = small_comm.size // 2
    before = small_comm.ring_pipeline(gpu=False).next_seq
    err = attempt(lambda: call(small_comm) if small_comm.rank == odd else good(small_comm))
    problems = expect_raised(err, RankMismatchError, f"{field} (this rank",
                             "ranks called allreduce with different arguments")
    all_ok(problems + still_works(small_comm, before, case))


@pytest.mark.mpi(min_size=1)
def test_local_errors_without_agreement_check(world: MPI.Intracomm) -> None:
    """With check=False bad input still raises on each rank, before any transfer."""
    with mpiring.Communicator(world, gpu=False, check=False, slot_bytes=4096, timeout=60) as comm:
        problems = []
        for case in ("count mismatch", "partial overlap", "read-only recv", "unsupported op name"):
            call, cls, fragments = BAD[case]
            before = comm.ring_pipeline(gpu=False).next_seq
            problems += expect_raised(attempt(lambda call=call: call(comm)), cls, *fragments)
            problems += still_works(comm, before, case)
        all_ok(problems)


@pytest.mark.mpi(min_size=1)
def test_errors_are_mpiring_errors() -> None:
    """The exception classes form the documented hierarchy."""
    assert issubclass(InvalidArgumentError, MpiringError) and issubclass(InvalidArgumentError, ValueError)
    assert issubclass(PeerArgumentError, MpiringError) and issubclass(RankMismatchError, MpiringError)
    assert issubclass(mpiring.MpiringTimeoutError, TimeoutError)
    assert issubclass(mpiring.MpiringTimeoutError, MpiringError) and issubclass(PeerFailedError, MpiringError)
