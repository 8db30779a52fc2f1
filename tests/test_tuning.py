"""mpiring.auto.tuning: where auto's table comes from for a machine key (MPIRING_TUNING_FILE, then the
user's table, then the shipped ones, then the built-in rule), the per-user location, the values
every rank compares, and the errors that name the file. The collective part (settle) runs on
real ranks in tests/mpi/test_mpi_setup_agreement.py and tests/mpi/test_tune_mpi.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpiring.auto import tuning
from mpiring.auto.machine import MachineKey
from mpiring.core.errors import InvalidArgumentError

H200_2 = MachineKey("NVIDIA H200", 2, "nvlink")
H200_4 = MachineKey("NVIDIA H200", 4, "nvlink")
PCIE_2 = MachineKey("NVIDIA H200", 2, "pcie")
L40S_2 = MachineKey("NVIDIA L40S", 2, "pcie")


def write(path: Path, gpu: str | None, link: str | None, ranks: int, algo: str = "nccl") -> Path:
    doc = {"format": 2, "gpu": gpu, "link": link,
           "tables": {str(ranks): {"eager": [[None, algo]]}}}
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment whose user tables live in an empty directory of their own."""
    (tmp_path / "user").mkdir()
    return {tuning.TUNING_DIR: str(tmp_path / "user")}


def test_the_user_directory(tmp_path: Path) -> None:
    assert tuning.user_dir({tuning.TUNING_DIR: "/x/t"}) == Path("/x/t")
    assert tuning.user_dir({"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == Path("/c/mpiring/tuning")
    assert tuning.user_dir({"HOME": "/h"}) == Path("/h/.cache/mpiring/tuning")
    assert tuning.user_path(H200_2, {"HOME": "/h"}) == \
        Path("/h/.cache/mpiring/tuning/nvidia-h200-2x-nvlink.json")


def test_shipped_tables_serve_the_reference_machine_only(env: dict[str, str]) -> None:
    for key in (H200_2, H200_4):
        choice = tuning.find(key, env)
        assert choice.origin == tuning.SHIPPED and choice.path == "mpiring/data/tuning-h200.json"
        assert choice.table.covers(key) and choice.table.graph.get(key.ranks)
    for key in (PCIE_2, L40S_2, H200_2._replace(ranks=3), MachineKey("none", 2, "none")):
        choice = tuning.find(key, env)
        assert choice.origin == tuning.BUILTIN and choice.source is None
        assert choice.table.tables == {}  # the dispatcher falls back to builtin_choice


def test_lookup_order(env: dict[str, str], tmp_path: Path) -> None:
    user = write(tuning.user_path(H200_2, env), "NVIDIA H200", "nvlink", 2, "twoshot")
    choice = tuning.find(H200_2, env)
    assert (choice.origin, choice.path, choice.table.choose(2, 1)) == (tuning.USER, str(user), "twoshot")
    given = tuning.read(write(tmp_path / "explicit.json", None, None, 2, "oneshot"))
    choice = tuning.find(H200_2, env, given)
    assert choice.origin == tuning.EXPLICIT and choice.table.choose(2, 1) == "oneshot"
    # An explicit table that does not hold this machine: the next sources are asked.
    assert tuning.find(H200_4, env, given).origin == tuning.SHIPPED
    only_pcie = tuning.read(write(tmp_path / "pcie.json", "NVIDIA H200", "pcie", 2))
    assert tuning.find(H200_2, env, only_pcie).origin == tuning.USER
    user.unlink()
    assert tuning.find(H200_2, env, only_pcie).origin == tuning.SHIPPED


def test_format_1_files_still_serve_as_explicit_tables(env: dict[str, str], tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"format": 1, "tables": {"2": [[4096, "oneshot"], [None, "ring"]]}}))
    choice = tuning.find(L40S_2, env, tuning.explicit({tuning.TUNING_FILE: str(path)}))
    assert choice.origin == tuning.EXPLICIT and choice.table.choose(2, 1 << 20) == "ring"
    assert tuning.explicit({}) is None and tuning.explicit({tuning.TUNING_FILE: " "}) is None


def test_a_bad_user_table_is_an_error_naming_it(env: dict[str, str]) -> None:
    path = tuning.user_path(H200_2, env)
    path.write_text("{half a table")
    with pytest.raises(InvalidArgumentError, match=f"{path} is not valid JSON"):
        tuning.find(H200_2, env)
    write(path, "NVIDIA H100", "nvlink", 2)
    with pytest.raises(InvalidArgumentError, match="holds tables for NVIDIA H100, nvlink, 2 ranks: "
                                                   "run mpiring-tune again"):
        tuning.find(H200_2, env)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(InvalidArgumentError, match="not a text file"):
        tuning.find(H200_2, env)
    with pytest.raises(InvalidArgumentError, match="cannot read the tuning table"):
        tuning.read(path.parent / "absent.json")


def test_what_ranks_compare_and_what_users_read(env: dict[str, str]) -> None:
    """The file's path and a hash of its bytes: a rank that found another table (or the same
    name with other contents) differs from its peers."""
    path = write(tuning.user_path(H200_2, env), "NVIDIA H200", "nvlink", 2)
    first = tuning.find(H200_2, env)
    values = first.setup_values()
    assert values["auto's machine"] == "2 x NVIDIA H200, nvlink"
    assert values["auto's table"] == f"user {path} (sha256 {first.source.digest})"
    write(path, "NVIDIA H200", "nvlink", 2, "twoshot")
    assert tuning.find(H200_2, env).setup_values() != values
    assert tuning.find(PCIE_2, env).setup_values() == {"auto's machine": "2 x NVIDIA H200, pcie",
                                                       "auto's table": "built-in rule"}
    assert f"user table {path} (sha256 " in first.describe() and "eager entries" in first.describe()
    shipped = tuning.find(H200_4, env).describe()
    assert shipped.startswith("4 x NVIDIA H200, nvlink: shipped table mpiring/data/tuning-h200.json")
    assert "eager and graph entries, measured 2026-" in shipped
    assert "the built-in rule" in tuning.find(PCIE_2, env).describe()
    none = tuning.find(MachineKey("none", 2, "none"), env).describe()
    assert none == "2 x none, none: no GPU: auto runs the ring on host arrays (no tuning table)"
    assert "hier" in tuning.Choice(None, tuning.ACROSS_NODES).describe()
    assert "one rank" in tuning.Choice(H200_2._replace(ranks=1, link="none"), tuning.ONE_RANK).describe()


def budgeted(path: Path, budget: int | None, algo: str, ranks: int = 2) -> Path:
    """A user table for the H200 measured under ``budget`` (the tuner's ``runs`` entry)."""
    doc = {"format": 2, "gpu": "NVIDIA H200", "link": "nvlink",
           "runs": {str(ranks): {"sm_budget": budget}},
           "tables": {str(ranks): {"eager": [[None, algo]]}}}
    path.write_text(json.dumps(doc))
    return path


def test_a_budget_has_a_user_table_of_its_own() -> None:
    assert tuning.user_path(H200_2, {"HOME": "/h"}, 16) == \
        Path("/h/.cache/mpiring/tuning/nvidia-h200-2x-nvlink-sm16.json")
    assert tuning.user_path(H200_2, {"HOME": "/h"}, None) == tuning.user_path(H200_2, {"HOME": "/h"})


def test_a_communicator_with_a_budget_prefers_a_table_measured_under_it(env: dict[str, str]) -> None:
    plain = budgeted(tuning.user_path(H200_2, env), None, "twoshot")
    # Only tables without a budget: the user's serves (first in order), and says it differs.
    choice = tuning.find(H200_2, env, sm_budget=16)
    assert (choice.origin, choice.path, choice.budget_differs) == (tuning.USER, str(plain), True)
    assert ("measured without an SM budget, but this communicator's is 16: its picks may not be "
            "the fastest here (measure: mpiring-tune --sm-budget 16)") in choice.describe()
    # Its own table wins once measured; the plain one still serves communicators without a budget.
    own = budgeted(tuning.user_path(H200_2, env, 16), 16, "ring")
    choice = tuning.find(H200_2, env, sm_budget=16)
    assert (choice.path, choice.table.choose(2, 1), choice.budget_differs) == (str(own), "ring", False)
    assert choice.describe().endswith("measured under this communicator's SM budget of 16")
    choice = tuning.find(H200_2, env)
    assert (choice.path, choice.table.choose(2, 1), choice.budget_differs) == (str(plain), "twoshot", False)
    # Another budget's table is not this one's: 8 falls back to the plain table, flagged.
    choice = tuning.find(H200_2, env, sm_budget=8)
    assert (choice.path, choice.budget_differs) == (str(plain), True)


def test_a_table_measured_under_a_budget_gives_way_to_one_without_for_a_communicator_without(
        env: dict[str, str]) -> None:
    """A plain-named user table that records a budget (copied, or written by hand): the shipped
    table, measured without one, serves a communicator without a budget."""
    budgeted(tuning.user_path(H200_2, env), 16, "ring")
    choice = tuning.find(H200_2, env)
    assert (choice.origin, choice.budget_differs) == (tuning.SHIPPED, False)
    # With a budget of 16, the same file is the one measured under it.
    assert tuning.find(H200_2, env, sm_budget=16).origin == tuning.USER
    # No table at all for the key: the built-in rule, whatever the budget.
    assert tuning.find(H200_4._replace(ranks=3), env, sm_budget=16).origin == tuning.BUILTIN


def test_the_shipped_table_serves_a_budget_it_was_not_measured_under_and_says_so(
        env: dict[str, str]) -> None:
    choice = tuning.find(H200_4, env, sm_budget=16)
    assert (choice.origin, choice.budget_differs) == (tuning.SHIPPED, True)
    assert "measured without an SM budget" in choice.describe()


def test_an_explicit_table_serves_any_budget(env: dict[str, str], tmp_path: Path) -> None:
    budgeted(tuning.user_path(H200_2, env, 16), 16, "ring")
    given = tuning.read(budgeted(tmp_path / "explicit.json", 8, "oneshot"))
    choice = tuning.find(H200_2, env, given, sm_budget=16)
    assert (choice.origin, choice.table.choose(2, 1), choice.budget_differs) == \
        (tuning.EXPLICIT, "oneshot", True)
    assert "measured under an SM budget of 8, but this communicator's is 16" in choice.describe()


def test_host_arrays_have_no_budget(env: dict[str, str]) -> None:
    """No kernels run on host arrays: a budget neither picks a table nor is reported."""
    key = MachineKey("none", 2, "none")
    choice = tuning.find(key, env, sm_budget=16)
    assert (choice.sm_budget, choice.budget_differs) == (None, False)


def test_the_budgets_own_table_serves_without_reading_the_plain_one(env: dict[str, str]) -> None:
    """Tables are read as the lookup reaches them: a broken plain table does not stop a
    communicator whose budget has a good table of its own (and does stop one without)."""
    tuning.user_path(H200_2, env).write_text("{half a table")
    own = budgeted(tuning.user_path(H200_2, env, 16), 16, "ring")
    assert tuning.find(H200_2, env, sm_budget=16).path == str(own)
    with pytest.raises(InvalidArgumentError, match="is not valid JSON"):
        tuning.find(H200_2, env)
