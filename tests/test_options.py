"""mpiring.call.options: the communicator's arguments and MPIRING_* variables, checked once at
set-up; here the SM budget and the overlap setting (the others are tested through the API)."""

from __future__ import annotations

import numpy as np
import pytest

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
