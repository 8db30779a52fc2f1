"""Fixtures for tests run under mpiexec with --with-mpi: shared communicators, and ranks kept in
step; and one report for the job instead of one per rank.

Only rank 0 prints pytest's report. The other ranks print nothing but their failures, each in
full (test, phase, traceback), headed ``rank N: <test> FAILED``, the moment it happens (a
failure that hangs the job still reaches the output); their exit status still says they failed,
so mpiexec's does too, and a test that failed on any rank fails on every rank
(:func:`ranks_in_step`), so rank 0's report counts it.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from mpi4py import MPI

import mpiring

SMALL_SLOT = 4096  # one page per receive slot: many mini-batches and constant slot reuse
RING_TIMEOUT = 60.0  # no ring wait in these tests may hang the run for long


class RankFailures:
    """The report of a rank other than 0: its failures, in full, on stderr; nothing else."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def _write(self, what: str, text: str) -> None:
        sys.stderr.write(f"\n===== rank {self.rank}: {what} =====\n{text}\n")
        sys.stderr.flush()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self._write(f"{report.nodeid} FAILED ({report.when})", report.longreprtext)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self._write(f"collecting {report.nodeid or 'the tests'} FAILED", report.longreprtext)

    def pytest_internalerror(self, excrepr: object) -> None:
        self._write("pytest INTERNALERROR", str(excrepr))


@pytest.hookimpl(trylast=True)  # after pytest's terminal plugin registered its reporter
def pytest_configure(config: pytest.Config) -> None:
    """On ranks other than 0, pytest's terminal report gives way to :class:`RankFailures`."""
    rank = MPI.COMM_WORLD.rank
    if rank == 0:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        config.pluginmanager.unregister(reporter)
    config.pluginmanager.register(RankFailures(rank), "mpiring-rank-failures")


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
        pytest.fail(f"this test failed on rank(s) {others} (each printed its failure, headed "
                    f"'rank N: <test> FAILED')", pytrace=False)
