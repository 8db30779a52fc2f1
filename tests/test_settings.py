"""mpiring.core.settings: one table of the MPIRING_* variables, one parser, one error shape; every
reader of the library goes through it, unknown names are reported, and docs/settings.md lists
exactly the table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from mpi4py import MPI

from mpiring.call.options import Options
from mpiring.context.rails import cuda_aware_mpi
from mpiring.core import settings
from mpiring.core.errors import InvalidArgumentError
from mpiring.cuda.device import share_gpu_allowed
from mpiring.node.timeouts import DEFAULT_SECONDS, TimeoutPolicy

ROOT = Path(__file__).resolve().parents[1]


def test_every_row_is_well_formed() -> None:
    assert len(settings.BY_NAME) == len(settings.TABLE), "a name twice in the table"
    for row in settings.TABLE:
        assert row.name.startswith(settings.PREFIX) and row.kind in settings.KINDS, row
        assert row.reader in settings.READERS and row.meaning and "|" not in row.meaning, row
        assert (row.kind == "choice") == bool(row.choices), row
        if row.default is not None and row.kind != "choice":  # the default parses as itself
            text = {True: "1", False: "0"}.get(row.default, str(row.default))
            assert settings.parse(row, text) == row.default, row


def test_defaults_are_the_readers_own() -> None:
    assert settings.setting("MPIRING_TIMEOUT").default == DEFAULT_SECONDS
    from mpiring.cuda import layout

    assert settings.setting("MPIRING_DIRECT_BLOCKS").default == 128 == layout.DIRECT_BLOCKS


@pytest.mark.parametrize("word, value", [("1", True), ("true", True), ("YES", True), (" On ", True),
                                         ("0", False), ("False", False), ("no", False), ("OFF", False)])
def test_a_bool_takes_only_the_yes_no_words(word: str, value: bool) -> None:
    assert settings.flag("MPIRING_SHARE_GPU", {"MPIRING_SHARE_GPU": word}) is value


@pytest.mark.parametrize("name, text, problem, accepted", [
    ("MPIRING_DIRECT_BLOCKS", "abc", "not an integer", "an integer from 1 to 4096 (unset: 128)"),
    ("MPIRING_DIRECT_BLOCKS", "0", "out of range", "an integer from 1 to 4096"),
    ("MPIRING_DIRECT_BLOCKS", "4097", "out of range", "an integer from 1 to 4096"),
    ("MPIRING_CUDA_AWARE_MPI", "2", "not an accepted word", "one of 1, true, yes, on, 0, false, no, off"),
    ("MPIRING_SHARE_GPU", "maybe", "not an accepted word", "(unset: 0)"),
    ("MPIRING_TIMEOUT", "soon", "not a number", "a finite, positive number (unset: 300)"),
    ("MPIRING_TIMEOUT", "nan", "not finite", "a finite, positive number"),
    ("MPIRING_TIMEOUT", "-1", "out of range", "a finite, positive number"),
    ("MPIRING_CHECK", "gpus", "not an accepted word", "one of gpu, host, 1"),
    ("MPIRING_SM_BUDGET", "1.5", "not an integer", "(unset: no budget)"),
])
def test_one_error_shape_names_the_variable_its_value_and_what_it_accepts(name, text, problem,
                                                                          accepted) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        settings.get(name, {name: text})
    message = str(info.value)
    assert message.startswith(f"{name}={text!r}: {problem}; use ") and accepted in message, message


NUMBERS = [row for row in settings.TABLE if row.kind in ("int", "float")]


@pytest.mark.parametrize("row", NUMBERS, ids=lambda row: row.name)
def test_every_number_is_taken_up_to_its_bounds_and_refused_past_them(row: settings.Setting) -> None:
    """An int's bounds are accepted (MPIRING_SM_BUDGET=1, MPIRING_DIRECT_BLOCKS=4096), a float's
    low bound is not (above it is); one past either is refused as out of range."""
    def value(x: float) -> str:
        return str(int(x)) if row.kind == "int" else repr(float(x))

    inside, outside = [], []
    if row.low is not None:
        if row.kind == "int":
            inside.append(row.low)
            outside.append(row.low - 1)
        else:
            inside.append(row.low + 1e-9)
            outside.append(row.low)
    if row.high is not None:
        inside.append(row.high)
        outside.append(row.high + 1)
    assert inside or row.low is None and row.high is None
    for x in inside:
        assert settings.get(row.name, {row.name: value(x)}) == pytest.approx(x)
    for x in outside:
        with pytest.raises(InvalidArgumentError, match=f"{row.name}=.*out of range"):
            settings.get(row.name, {row.name: value(x)})


def test_unset_and_empty_are_the_default() -> None:
    assert settings.get("MPIRING_DIRECT_BLOCKS", {}) == 128
    assert settings.get("MPIRING_DIRECT_BLOCKS", {"MPIRING_DIRECT_BLOCKS": "  "}) == 128
    assert settings.get("MPIRING_CUDA_AWARE_MPI", {}) is None
    assert settings.text("MPIRING_CHECK", {"MPIRING_CHECK": "0"}) == "off"
    assert settings.text("MPIRING_CHECK", {"MPIRING_CHECK": "Host"}) == "host"


def test_the_readers_use_the_table(monkeypatch) -> None:
    """The bugs of issue 30 item 8: '2' read as yes, 'maybe' as off, 'abc' as a raw ValueError."""
    monkeypatch.setenv("MPIRING_CUDA_AWARE_MPI", "2")
    with pytest.raises(InvalidArgumentError, match="MPIRING_CUDA_AWARE_MPI='2'"):
        cuda_aware_mpi()
    monkeypatch.setenv("MPIRING_CUDA_AWARE_MPI", "off")
    assert cuda_aware_mpi() is False
    # the variable overrules the library's own answer, both ways (no MPI here says True itself)
    monkeypatch.setattr(MPI, "Query_cuda_support", lambda: True, raising=False)
    assert cuda_aware_mpi() is False
    monkeypatch.delenv("MPIRING_CUDA_AWARE_MPI")
    assert cuda_aware_mpi() is True
    monkeypatch.setattr(MPI, "Query_cuda_support", lambda: False, raising=False)
    monkeypatch.setenv("MPIRING_CUDA_AWARE_MPI", "1")
    assert cuda_aware_mpi() is True
    monkeypatch.setenv("MPIRING_SHARE_GPU", "maybe")
    with pytest.raises(InvalidArgumentError, match="MPIRING_SHARE_GPU='maybe'"):
        share_gpu_allowed()
    monkeypatch.setenv("MPIRING_SHARE_GPU", "yes")
    assert share_gpu_allowed() is True
    monkeypatch.setenv("MPIRING_TIMEOUT", "2.5")
    assert TimeoutPolicy.resolve(None).seconds == 2.5


def test_set_up_checks_every_variable_at_once(monkeypatch) -> None:
    """A bad value of a variable read late (here a GPU one) is refused when the options are
    resolved, where a communicator turns one rank's error into every rank's."""
    for name in ("MPIRING_SHARE_GPU", "MPIRING_CUDA_AWARE_MPI", "MPIRING_VIRTUAL_NODES"):
        monkeypatch.delenv(name, raising=False)
    Options.resolve("auto", None, None, None)
    monkeypatch.setenv("MPIRING_SHARE_GPU", "maybe")
    with pytest.raises(InvalidArgumentError, match="MPIRING_SHARE_GPU='maybe'"):
        Options.resolve("auto", None, None, None)
    monkeypatch.setenv("MPIRING_SHARE_GPU", "0")
    monkeypatch.setenv("MPIRING_ALGO", "rign")
    with pytest.raises(InvalidArgumentError, match="MPIRING_ALGO='rign': not one of ring, ring-events"):
        Options.resolve("auto", None, None, None)


def test_a_bad_direct_blocks_fails_the_import_by_name() -> None:
    """Read at import (mpiring.cuda.layout.DIRECT_BLOCKS): a raw ValueError before."""
    env = {**os.environ, "MPIRING_DIRECT_BLOCKS": "abc"}
    done = subprocess.run([sys.executable, "-c", "import mpiring.cuda.layout"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0
    assert "InvalidArgumentError: MPIRING_DIRECT_BLOCKS='abc': not an integer" in done.stderr, done.stderr


def test_unknown_names_get_a_did_you_mean() -> None:
    env = {"MPIRING_TIMEOUTS": "5", "MPIRING_SHARE_GPUS": "1", "MPIRING_ZZZ": "1", "MPIRING_DEBUG": "1",
           "MPIRING_FAULT_OUT": "/tmp", "OTHER": "x"}
    assert settings.unknown(env) == [("MPIRING_SHARE_GPUS", "MPIRING_SHARE_GPU"),
                                     ("MPIRING_TIMEOUTS", "MPIRING_TIMEOUT"), ("MPIRING_ZZZ", None)]


def test_unknown_names_are_warned_about_once(monkeypatch) -> None:
    monkeypatch.setattr(settings, "_WARNED", False)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert settings.warn_unknown({"MPIRING_TIMEOUTS": "5"}) is True
        assert settings.warn_unknown({"MPIRING_TIMEOUTS": "5"}) is False
    assert len(seen) == 1 and seen[0].category is RuntimeWarning
    assert "MPIRING_TIMEOUTS (did you mean MPIRING_TIMEOUT?)" in str(seen[0].message)
    monkeypatch.setattr(settings, "_WARNED", False)
    assert settings.warn_unknown({"MPIRING_TIMEOUT": "5"}) is False  # known names: silence
    with warnings.catch_warnings(record=True) as seen:  # ... which uses up nothing
        warnings.simplefilter("always")
        assert settings.warn_unknown({"MPIRING_TIMEOUTS": "5"}) is True
    assert len(seen) == 1


def test_the_docs_page_lists_exactly_the_table() -> None:
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    for reader in settings.READERS:
        assert settings.markdown(reader) in page, (
            f"docs/settings.md differs from mpiring.core.settings.markdown({reader!r}); paste:\n"
            + settings.markdown(reader))
    listed = re.findall(r"^\| `(MPIRING_[A-Z0-9_]+)` \|", page, flags=re.M)
    assert sorted(listed) == sorted(settings.BY_NAME)


# C preprocessor guards of the CUDA sources: macros, not environment variables.
_MACROS = re.compile(r"MPIRING_[A-Z_]+_CUH$|MPIRING_CHECK_OFFSETS$")


def test_every_mpiring_variable_the_project_names_is_in_the_table() -> None:
    """Python files, shell scripts and CI: a name missing from the table would be warned about
    as unknown when it is set (and would escape the docs)."""
    skip = (".cu", ".cuh", ".pyc", ".json", ".csv", ".png", ".log")
    files = [p for folder in ("mpiring", "tests", "jobs", "examples", ".ci")
             for p in (ROOT / folder).rglob("*")
             if p.is_file() and p.suffix not in skip and p.name != "test_settings.py"]
    named = {m for p in files
             for m in re.findall(r"MPIRING_[A-Z0-9_]*[A-Z0-9]", p.read_text(errors="replace"))}
    missing = sorted(n for n in named if n not in settings.BY_NAME and not _MACROS.match(n))
    assert not missing, f"add these to mpiring.core.settings.TABLE: {missing}"


def test_the_library_reads_mpiring_variables_only_through_the_table() -> None:
    """No os.environ/getenv read of an MPIRING_* name outside mpiring/core/settings.py (the bench,
    another owner's, aside)."""
    offenders = []
    for path in sorted((ROOT / "mpiring").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "mpiring/core/settings.py" or rel.startswith("mpiring/bench/"):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"(environ|getenv)\b.*MPIRING_", line):
                offenders.append(f"{rel}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("seconds", [0.5, 10.0, 300.0])
def test_draining_a_ranks_gpu_work_outlasts_two_timeouts(seconds: float) -> None:
    """close() waits for the GPU's own waits (each ends within the timeout) and as much again
    for work queued ahead, plus 5 s: giving up sooner would abandon work still inside its bound."""
    assert TimeoutPolicy(seconds).drain_seconds == pytest.approx(2 * seconds + 5.0)
