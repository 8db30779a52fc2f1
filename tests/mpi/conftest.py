"""Fixtures for tests run under mpiexec with --with-mpi: shared communicators, and ranks kept in step."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from mpi4py import MPI

import mpiring

SMALL_SLOT = 4096  # one page per receive slot: many mini-batches and constant slot reuse
RING_TIMEOUT = 60.0  # no ring wait in these tests may hang the run for long


@pytest.fixture(scope="session")
def world() -> MPI.Intracomm:
    """MPI.COMM_WORLD."""
    return MPI.COMM_WORLD


@pytest.fixture(scope="session")
def small_comm(world: MPI.Intracomm) -> Iterator[mpiring.Communicator]:
    """A host communicator with 4 KiB slots, shared by many tests (sequence numbers keep growing)."""
    comm = mpiring.Communicator(world, gpu=False, slot_bytes=SMALL_SLOT, timeout=RING_TIMEOUT)
    yield comm
    comm.close()


@pytest.fixture(scope="session")
def default_comm(world: MPI.Intracomm) -> Iterator[mpiring.Communicator]:
    """A host communicator with default (1 MiB) slots, so requested batch counts are used as given."""
    comm = mpiring.Communicator(world, gpu=False, timeout=RING_TIMEOUT)
    yield comm
    comm.close()


@pytest.fixture
def shared_dir(world: MPI.Intracomm) -> Iterator[Path]:
    """One temporary directory for all ranks (rank 0's, broadcast)."""
    tmp = tempfile.TemporaryDirectory(prefix="mpiring-bench-") if world.rank == 0 else None
    path = Path(world.bcast(tmp.name if tmp else None, root=0))
    yield path
    world.Barrier()
    if tmp:
        tmp.cleanup()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Remember each phase's report on the item, for the step check below."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(autouse=True)
def ranks_in_step(request: pytest.FixtureRequest, world: MPI.Intracomm) -> Iterator[None]:
    """Start every test together, and make a test that failed on some rank fail on all of them."""
    world.Barrier()
    yield
    report = getattr(request.node, "report_call", None)
    failed = world.allgather(bool(report is not None and report.failed))
    if any(failed) and not failed[world.rank]:
        others = [r for r, f in enumerate(failed) if f]
        pytest.fail(f"this test failed on rank(s) {others}", pytrace=False)
