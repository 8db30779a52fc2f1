"""``mpiring.node.groups``: where MPI has run out of communicators, every rank says so by name
(MPICH's 2048 context ids: ``tests/mpi/test_mpi_limits.py`` runs out for real)."""

from __future__ import annotations

import pytest
from mpi4py import MPI

from mpiring.core.errors import SetupError
from mpiring.node import groups

# What MPICH raised on one rank of two when a committed MPI_Comm_idup found no context id free on
# every rank: that rank could still make a communicator of its own.
IDUP_STACK = ("internal_Test(109)..............: MPI_Test(request=0x7f8d40a15ad0, flag=0x7fffac8dcc20, "
              "status=0x1) failed\nMPIDU_Sched_progress_state(1152): Other MPI error")


class MpichError(MPI.Exception):
    """An MPI error with MPICH's error stack as its text."""

    def __init__(self, text: str) -> None:
        super().__init__(MPI.ERR_OTHER)
        self.text = text

    def Get_error_string(self) -> str:  # noqa: N802 - mpi4py's name
        return self.text


def test_a_committed_duplicates_failed_agreement_is_running_out() -> None:
    said = (r"rank 1: MPI cannot make another communicator "
            r"\(MPIDU_Sched_progress_state\(1152\): Other MPI error\)")
    with pytest.raises(SetupError, match=said + ".*2048 context ids"), \
            groups.out_of_communicators(1, committed_dup=True):
        raise MpichError(IDUP_STACK)


def test_elsewhere_that_error_is_mpis_own_where_this_process_can_make_a_communicator() -> None:
    with pytest.raises(MpichError), groups.out_of_communicators(1):
        raise MpichError(IDUP_STACK)
    # not a schedule's error: the probe decides, and this process can make one
    with pytest.raises(MpichError), groups.out_of_communicators(1, committed_dup=True):
        raise MpichError("MPIR_Isend_impl(123): Other MPI error")


def test_mpis_words_for_running_out_are_running_out() -> None:
    with pytest.raises(SetupError, match="MPI cannot make another communicator"), \
            groups.out_of_communicators(0):
        raise MpichError("MPIR_Get_contextid_sparse_group(614): Too many communicators (0/2048 free)")


def test_where_this_process_cannot_make_a_communicator_any_error_is_running_out(monkeypatch) -> None:
    """Outside a committed duplicate's schedule, the local probe decides: when this process
    cannot duplicate COMM_SELF either, MPI's unnamed error is named as running out."""

    class NoneLeft:
        def Dup(self) -> MPI.Intracomm:  # noqa: N802 - mpi4py's name
            raise MpichError("MPIR_Get_contextid_sparse_group(614): no free context id")

    fake_mpi = type("FakeMPI", (), {"COMM_SELF": NoneLeft(), "Exception": MPI.Exception})
    monkeypatch.setattr(groups, "MPI", fake_mpi)
    for committed in (False, True):
        with pytest.raises(SetupError, match=r"rank 1: MPI cannot make another communicator \(MPIR_Isend"), \
                groups.out_of_communicators(1, committed_dup=committed):
            raise MpichError("MPIR_Isend_impl(123): Other MPI error")
