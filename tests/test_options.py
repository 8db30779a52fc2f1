"""mpiring.call.options: the communicator's arguments and MPIRING_* variables, checked once at
set-up: the SM budget, the overlap setting, the check mode, MPIRING_ALGO, the set-up values every
rank must share; and a bad argument refused by a one-rank communicator (under MPI, at several
ranks: tests/mpi/test_mpi_setup_agreement.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpi4py import MPI

import mpiring
from mpiring.call.options import Options, check_sm_budget
from mpiring.core.errors import InvalidArgumentError


@pytest.mark.parametrize("given, want", [(None, None), (1, 1), (16, 16), (np.int64(24), 24),
                                         ("32", 32), (" 8 ", 8), ("", None)])
def test_an_sm_budget_is_none_or_a_positive_count(given, want) -> None:
    assert check_sm_budget(given) == want


@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "x", "0", [16]])
def test_a_bad_sm_budget_names_itself(bad) -> None:
    with pytest.raises(InvalidArgumentError, match="sm_budget= .*positive number of SMs"):
        check_sm_budget(bad)


def test_the_budget_comes_from_the_argument_else_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("MPIRING_SM_BUDGET", raising=False)
    assert Options.resolve("auto", None, None, None).sm_budget is None
    monkeypatch.setenv("MPIRING_SM_BUDGET", "20")
    assert Options.resolve("auto", None, None, None).sm_budget == 20
    assert Options.resolve("auto", None, None, None, sm_budget=8).sm_budget == 8
    monkeypatch.setenv("MPIRING_SM_BUDGET", "lots")
    with pytest.raises(InvalidArgumentError, match="MPIRING_SM_BUDGET='lots': not an integer"):
        Options.resolve("auto", None, None, None)


def test_every_rank_must_share_the_budget_and_the_overlap_setting(monkeypatch) -> None:
    """Both are set-up values: ranks that differ get a SetupError (mpiring.core.consensus)."""
    monkeypatch.delenv("MPIRING_SM_BUDGET", raising=False)
    values = Options.resolve("auto", None, None, None, sm_budget=12, overlap=True).setup_values("auto")
    assert values["sm_budget"] == 12 and values["overlap"] is True
    assert Options.resolve("auto", None, None, None).setup_values("auto")["overlap"] is False


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_overlap_takes_a_bool(bad) -> None:
    with pytest.raises(InvalidArgumentError, match="overlap=.*True"):
        Options.resolve("auto", None, None, None, overlap=bad)


@pytest.mark.parametrize("bad", ["no", 0, None])
def test_replay_takes_a_bool(bad) -> None:
    assert Options.resolve("auto", None, None, None).replay is True
    assert Options.resolve("auto", None, None, None, replay=False).replay is False
    with pytest.raises(InvalidArgumentError, match="replay=.*False"):
        Options.resolve("auto", None, None, None, replay=bad)


@pytest.mark.parametrize(("check", "want"), [(None, "gpu"), ("host", "host"), (" HOST ", "host"),
                                             ("gpu", "gpu"), (True, "gpu"), (False, "off"), ("off", "off")])
def test_the_check_mode_is_what_was_asked(monkeypatch, check, want: str) -> None:
    """check='host' (every call checked on the host: a debugging aid) stays 'host'; False is off."""
    monkeypatch.delenv("MPIRING_CHECK", raising=False)
    opts = Options.resolve("auto", None, check, None)
    assert (opts.check, opts.check_mode) == (want != "off", "gpu" if want == "off" else want)
    assert opts.setup_values("auto")["check"] == f"{want != 'off'} ({opts.check_mode})"


def test_mpiring_algo_auto_forces_nothing(monkeypatch) -> None:
    """MPIRING_ALGO=auto (a value the docs list) leaves auto's choice alone; a row name forces it."""
    monkeypatch.setenv("MPIRING_ALGO", "auto")
    assert Options.resolve("auto", None, None, None).forced is None
    with mpiring.Communicator(MPI.COMM_SELF, gpu=False) as comm:
        out = np.empty(5)
        comm.Allreduce(np.arange(5.0), out)
        assert np.array_equal(out, np.arange(5.0))
    monkeypatch.setenv("MPIRING_ALGO", "ring")
    assert Options.resolve("auto", None, None, None).forced == "ring"


def test_the_inter_node_engine_is_a_set_up_value() -> None:
    """Ranks that pass different inter= would pick different engines between nodes: it is shared."""
    opts = Options.resolve("auto", None, None, None)
    assert opts.setup_values("nccl")["inter"] == "nccl"
    assert opts.setup_values("mpi")["inter"] == "mpi"


@pytest.mark.parametrize(("kwargs", "said"), [
    (dict(timeout=math.nan), "timeout"),
    (dict(timeout=-1.0), "timeout"),
    (dict(slot_bytes=-1), "slot_bytes"),
    (dict(batches=0), "batches"),
    (dict(inter="bogus"), "inter='bogus': choose one of"),
    (dict(check="maybe"), "check="),
    (dict(algorithm="shiny"), "shiny"),
])
def test_a_one_rank_communicator_refuses_a_bad_argument(kwargs: dict, said: str) -> None:
    """Rank 0 of one is a rank like any other: its own bad argument raises at set-up, naming it
    (were its rejection left unread, the communicator would run on fallback settings in silence)."""
    with pytest.raises(InvalidArgumentError, match=said):
        mpiring.Communicator(MPI.COMM_SELF, gpu=False, **kwargs)
