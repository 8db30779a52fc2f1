"""Issue 30 item 8 through the API, on every rank: bad MPIRING_* values, slot_bytes above its
bound, the block collectives' errors naming themselves, and MPI running out of communicators."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok, attempt, expect_raised

import mpiring
from mpiring.call.options import MAX_SLOT_BYTES
from mpiring.core.errors import InvalidArgumentError, PeerArgumentError, SetupError
from mpiring.node.groups import open_communicators

world = MPI.COMM_WORLD


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name, value", [("MPIRING_SHARE_GPU", "maybe"), ("MPIRING_CUDA_AWARE_MPI", "2"),
                                         ("MPIRING_TIMEOUT", "soon"), ("MPIRING_CHECK", "gpus")])
def test_a_bad_variable_on_one_rank_is_named_on_every_rank(monkeypatch, name: str, value: str) -> None:
    """That rank raises the variable's error; the others a SetupError quoting it (no hang, even
    for a variable only a GPU set-up would read)."""
    bad = world.size - 1
    if world.rank == bad:
        monkeypatch.setenv(name, value)
    err = attempt(lambda: mpiring.Communicator(world, gpu=False, timeout=30).close())
    said = f"{name}={value!r}: not"
    cls = InvalidArgumentError if world.rank == bad else SetupError
    all_ok(expect_raised(err, cls, said) + ([] if world.rank == bad else
                                           expect_raised(err, cls, f"rank {bad} rejected its arguments")))


@pytest.mark.parametrize("slot_bytes", [MAX_SLOT_BYTES + 1, 2**46, 2**62])
def test_slot_bytes_above_the_bound_is_refused_on_every_rank(slot_bytes: int) -> None:
    """Before: a raw MPI error (2**46: the window cannot be allocated) or OverflowError (2**62);
    below 2**46 MPICH 'allocated' even 1 TiB of shared memory per rank, lazily."""
    err = attempt(lambda: mpiring.Communicator(world, gpu=False, slot_bytes=slot_bytes, timeout=30).close())
    all_ok(expect_raised(err, InvalidArgumentError, f"slot_bytes={slot_bytes} is above the bound of "
                         f"{MAX_SLOT_BYTES} (4 GiB)"))


def test_slot_bytes_at_the_bound_is_taken() -> None:
    """The bound itself is valid (host: two slots of 4 GiB of node shared memory, mapped lazily)."""
    with mpiring.Communicator(world, gpu=False, slot_bytes=MAX_SLOT_BYTES, timeout=30) as comm:
        x = np.arange(16, dtype=np.float64)
        all_ok([] if np.array_equal(comm.allreduce(x), x * world.size) else ["wrong sum"])


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("collective", ["Reduce_scatter_block", "Allgather"])
def test_the_block_collectives_errors_name_them(small_comm: mpiring.Communicator, collective: str) -> None:
    """A rank that rejects its arguments makes the others raise PeerArgumentError naming the
    collective called (it said "allreduce aborted" for every collective)."""
    n, bad = small_comm.size, 0
    good_send = np.ones(2 * n if collective == "Reduce_scatter_block" else 2, np.float32)
    good_recv = np.zeros(2 if collective == "Reduce_scatter_block" else 2 * n, np.float32)
    send = good_send[:-1] if small_comm.rank == bad else good_send  # not a multiple of the ranks
    recv = good_recv if collective == "Reduce_scatter_block" else (
        good_recv[:-1] if small_comm.rank == bad else good_recv)
    err = attempt(lambda: getattr(small_comm, collective)(send, recv))
    if small_comm.rank == bad:
        problems = expect_raised(err, InvalidArgumentError, collective)
    else:
        problems = expect_raised(err, PeerArgumentError, f"{collective} aborted on rank {small_comm.rank}: "
                                 f"rank {bad} rejected its arguments")
    all_ok(problems)


def test_running_out_of_mpi_communicators_names_the_limit() -> None:
    """MPICH has 2048 context ids per process and each mpiring communicator holds 4: the 512th
    failed with MPI's raw error (or a crash in MPI_Win_allocate_shared, depending on which step
    ran out). Now every rank raises a SetupError naming the limit, and closing communicators
    frees them: the next one is set up."""
    held: list[mpiring.Communicator] = []
    err = None
    try:
        for _ in range(4096):  # more than MPICH allows; another MPI may allow them all
            held.append(mpiring.Communicator(world, gpu=False, slot_bytes=4096, timeout=60))
    except Exception as raised:  # noqa: BLE001 - judged below, on every rank
        err = raised
    count, opened = len(held), open_communicators()
    for comm in reversed(held):
        comm.close()
    problems = []
    if err is None:
        if "MPICH" in MPI.Get_library_version():
            problems.append(f"MPICH set up {count} communicators: expected to run out")
    else:
        problems += expect_raised(err, SetupError, "MPI cannot make another communicator",
                                  f"this process holds {opened} other open mpiring communicator(s)",
                                  "close() the communicators no longer used")
        if "MPICH" in MPI.Get_library_version():
            problems += expect_raised(err, SetupError, "2048 context ids")
    with mpiring.Communicator(world, gpu=False, timeout=60) as comm:  # the supply is back
        x = np.ones(4)
        if not np.array_equal(comm.allreduce(x), x * world.size):
            problems.append("wrong sum after the communicators were closed")
    all_ok(problems)
