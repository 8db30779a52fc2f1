"""Set-up agreement (issue 17, items 1 and 5): every set-up parameter that shapes shared memory
or the schedule must agree, or every rank raises SetupError naming the parameter and the ranks,
at once (no timeout); bad communicators and bad options are refused clearly. Issue 13, item 4:
so must auto's machine key and tuning table (the machine detection seam faked here: no GPU)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok, attempt, expect_raised

import mpiring
from mpiring import InvalidArgumentError, SetupError
from mpiring.auto import machine, tuning
from mpiring.auto.machine import MachineKey

pytestmark = pytest.mark.mpi(min_size=2)
world = MPI.COMM_WORLD
ODD = 1  # the rank that differs
QUICK = 10.0  # seconds: far below the communicators' 60 s timeout


def make(**kwargs: Any) -> mpiring.Communicator:
    return mpiring.Communicator(world, **{"gpu": False, "timeout": 60, **kwargs})


def creation_fails(kwargs: dict[str, Any], cls: type[BaseException], *fragments: str,
                   odd_cls: type[BaseException] | None = None, odd_fragments: tuple[str, ...] = (),
                   undo: Any = None) -> None:
    """Every rank's set-up raises ``cls`` with ``fragments`` (rank ODD: ``odd_cls``, if given)
    within QUICK seconds; then a good communicator still works."""
    start = time.monotonic()
    comm: list[mpiring.Communicator] = []
    err = attempt(lambda: comm.append(make(**kwargs)))
    elapsed = time.monotonic() - start
    for c in comm:
        c.close()
    if world.rank == ODD and odd_cls is not None:
        problems = expect_raised(err, odd_cls, *odd_fragments)
    else:
        problems = expect_raised(err, cls, *fragments)
    if elapsed > QUICK:
        problems.append(f"set-up took {elapsed:.1f} s to fail")
    if undo is not None:
        undo()
    with make(slot_bytes=4096) as good:
        if not np.array_equal(good.allreduce(np.ones(3)), np.full(3, float(world.size))):
            problems.append("a good communicator afterwards is wrong")
    all_ok(problems)


def test_slot_bytes_differing_on_one_rank_is_a_setup_error_on_every_rank() -> None:
    """Rank 1 asks for other slots: before, each rank carved its neighbour's memory with its own
    slot size and the sums came out silently wrong (or the ring stalled)."""
    slot = 65536 if world.rank == ODD else 1048576
    others = ",".join(str(r) for r in range(world.size) if r != ODD)
    ranks = f"rank {others}" if world.size == 2 else f"ranks {others}"
    creation_fails({"slot_bytes": slot}, SetupError,
                   f"slot_bytes differs across ranks: 1048576 on {ranks}; 65536 on rank {ODD}")


@pytest.mark.parametrize("name, mine, theirs", [("check", False, True), ("batches", 3, None),
                                                ("sm_budget", 16, None), ("overlap", True, False)])
def test_check_and_batches_must_agree(name: str, mine: Any, theirs: Any) -> None:
    """``check`` differing (with algorithm='mpi' the rank with the check off used to hang in
    MPI_Allreduce while the others waited in the agreement check), the batches rule, the SM
    budget (the direct kernels' grid, whose flags must line up) and ``overlap`` (auto's
    choice: ranks that differ would run different rows)."""
    value = mine if world.rank == ODD else theirs
    creation_fails({name: value, "algorithm": "mpi"}, SetupError, f"{name} differs across ranks",
                   f"on rank {ODD}")


def test_the_algorithm_table_must_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank whose table lacks a row (e.g. a plug-in registered on some ranks only)."""
    if world.rank == ODD:
        rows = mpiring.algorithms.rows()
        monkeypatch.setattr(mpiring.algorithms, "rows", lambda: rows[:-1])
    creation_fails({}, SetupError, "algorithm table differs across ranks", f"on rank {ODD}",
                   undo=monkeypatch.undo)


@pytest.mark.parametrize("name, bad, fragment", [
    ("timeout", float("nan"), "timeout must be a finite, positive number of seconds"),
    ("timeout", -1.0, "timeout must be a finite, positive number of seconds"),
    ("slot_bytes", -4096, "slot_bytes must be a positive integer"),
    ("slot_bytes", 1.5e6, "slot_bytes must be a positive integer"),
    ("sm_budget", 0, "sm_budget= 0: use a positive number of SMs"),
    ("overlap", "yes", "overlap='yes': use True"),
])
def test_a_bad_option_on_one_rank_fails_every_rank_at_once(name: str, bad: Any, fragment: str) -> None:
    """The rank that rejects its own option still joins set-up, so its peers raise SetupError
    naming it at once instead of waiting 60 s for it."""
    kwargs = {name: bad} if world.rank == ODD else {}
    creation_fails(kwargs, SetupError, f"rank {ODD} rejected its arguments", fragment,
                   odd_cls=InvalidArgumentError, odd_fragments=(fragment,))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0, -1.0])
def test_non_finite_or_non_positive_timeouts_are_refused(bad: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 4: timeout=nan (and MPIRING_TIMEOUT=nan) would make every wait endless."""
    problems = expect_raised(attempt(lambda: make(timeout=bad)), InvalidArgumentError,
                             "timeout must be a finite, positive number of seconds")
    monkeypatch.setenv("MPIRING_TIMEOUT", str(bad))
    problems += expect_raised(attempt(lambda: mpiring.Communicator(world, gpu=False)),
                              InvalidArgumentError, "MPIRING_TIMEOUT=", "finite, positive")
    all_ok(problems)


@pytest.mark.parametrize("bad", [-1, 0, 1.5e6, "1M", True])
def test_bad_slot_bytes_on_every_rank(bad: Any) -> None:
    all_ok(expect_raised(attempt(lambda: make(slot_bytes=bad)), InvalidArgumentError,
                         "slot_bytes must be a positive integer"))


def test_comm_null_and_intercommunicators_are_refused_up_front() -> None:
    """Before any set-up collective, on every rank (the ranks would otherwise meet in raw MPI
    errors, or hang)."""
    problems = expect_raised(attempt(lambda: make_on(MPI.COMM_NULL)), InvalidArgumentError,
                             "MPI.COMM_NULL")
    half = world.Split(world.rank % 2, key=world.rank)
    inter = half.Create_intercomm(0, world, 1 - world.rank % 2 if world.rank < 2 else world.rank % 2 ^ 1)
    start = time.monotonic()
    problems += expect_raised(attempt(lambda: make_on(inter)), InvalidArgumentError, "intercommunicator",
                              "Merge")
    if time.monotonic() - start > 1.0:
        problems.append("refusing the intercommunicator took a collective")
    problems += expect_raised(attempt(lambda: make_on("COMM_WORLD")), InvalidArgumentError,
                              "intracommunicator")
    inter.Free()
    half.Free()
    all_ok(problems)


def make_on(comm: Any) -> mpiring.Communicator:
    return mpiring.Communicator(comm, gpu=False, timeout=60)


# -- every rank must use the same tuning table (issue 13, item 4) ------------------------------


def fake_machine(monkeypatch: pytest.MonkeyPatch, link: str = "nvlink", gpu: str = "Fake GPU") -> None:
    """Replace the machine detection seam: this rank's node is ``gpu`` GPUs joined by ``link``."""
    monkeypatch.setattr(machine, "detect", lambda ranks, buses: MachineKey(gpu, ranks, link))


def user_table(folder: Path, key: MachineKey, algo: str = "nccl", text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / key.file_name()
    path.write_text(text if text is not None else json.dumps(
        {"format": 2, "gpu": key.gpu, "link": key.link,
         "tables": {str(key.ranks): {"eager": [[None, algo]]}}}))
    return path


@pytest.fixture
def shared(tmp_path: Path) -> Path:
    return Path(world.bcast(str(tmp_path) if world.rank == 0 else None, root=0))


def test_a_rank_that_found_another_user_table_fails_every_rank(monkeypatch, shared) -> None:
    """Rank ODD's MPIRING_TUNING_DIR holds a table for this machine, its peers' do not: they
    would run different algorithms for the same call. Every rank raises, naming rank ODD."""
    fake_machine(monkeypatch)
    key = MachineKey("Fake GPU", world.size, "nvlink")
    if world.rank == 0:
        user_table(shared / "odd", key)
    world.Barrier()
    if world.rank == ODD:
        monkeypatch.setenv("MPIRING_TUNING_DIR", str(shared / "odd"))
    path = shared / "odd" / key.file_name()
    creation_fails({}, SetupError, "auto's table differs across ranks", f"user {path} (sha256",
                   f"on rank {ODD}", "built-in rule on rank", "MPIRING_TUNING_DIR",
                   undo=monkeypatch.undo)


def test_the_same_table_name_with_other_contents_fails_too(monkeypatch, shared) -> None:
    fake_machine(monkeypatch)
    key = MachineKey("Fake GPU", world.size, "nvlink")
    if world.rank == 0:
        user_table(shared / "a", key, "nccl")
        user_table(shared / "b", key, "twoshot")
    world.Barrier()
    monkeypatch.setenv("MPIRING_TUNING_DIR", str(shared / ("b" if world.rank == ODD else "a")))
    creation_fails({}, SetupError, "auto's table differs across ranks", f"on rank {ODD}",
                   undo=monkeypatch.undo)


def test_ranks_that_detect_different_machines_fail_every_rank(monkeypatch) -> None:
    """E.g. NVML installed on some ranks only: one sees NVLink, the others cannot tell."""
    fake_machine(monkeypatch, link="unknown" if world.rank == ODD else "nvlink")
    creation_fails({}, SetupError, "auto's machine differs across ranks",
                   f"{world.size} x Fake GPU, unknown on rank {ODD}", undo=monkeypatch.undo)


@pytest.mark.parametrize("everywhere", [True, False])
def test_an_unreadable_user_table_fails_every_rank_naming_the_file(monkeypatch, shared,
                                                                   everywhere: bool) -> None:
    fake_machine(monkeypatch)
    key = MachineKey("Fake GPU", world.size, "nvlink")
    if world.rank == 0:
        user_table(shared / "bad", key, text="{half a table")
    world.Barrier()
    if everywhere or world.rank == ODD:
        monkeypatch.setenv("MPIRING_TUNING_DIR", str(shared / "bad"))
    path = shared / "bad" / key.file_name()
    fragments = (("auto's tuning table:", f"{path} is not valid JSON") if everywhere else
                 ("auto's table differs across ranks", f"unusable: {path} is not valid JSON",
                  f"on rank {ODD}"))
    creation_fails({}, SetupError, *fragments, undo=monkeypatch.undo)


def test_every_rank_uses_the_shipped_table_of_its_machine(monkeypatch) -> None:
    """On a (faked) H200 NVLink node the shipped table serves 2 and 4 ranks; other rank counts,
    and H200s over PCIe, get the built-in rule; every rank reports the same."""
    problems: list[str] = []
    for link in ("nvlink", "pcie"):
        fake_machine(monkeypatch, link=link, gpu="NVIDIA H200")
        with make() as comm:
            choice = comm.tuning
        shipped = link == "nvlink" and world.size in (2, 4)
        want = tuning.SHIPPED if shipped else tuning.BUILTIN
        if choice.origin != want or choice.key != MachineKey("NVIDIA H200", world.size, link):
            problems.append(f"{link}: {choice}")
        if shipped and choice.table.graph.get(world.size) is None:
            problems.append("the shipped table has no graph entries")
    described = world.allgather(choice.describe())
    if len(set(described)) != 1:
        problems.append(f"ranks describe different tables: {described}")
    all_ok(problems)


def test_the_budget_and_overlap_settings_read_back() -> None:
    """Host arrays run no mpiring kernel: a budget is accepted (the same code runs on GPU
    nodes) and ``comm.sm_budget`` says None; ``comm.overlap`` is the setting."""
    with make(sm_budget=8, overlap=True) as c:
        problems = [] if c.sm_budget is None and c.overlap is True else [
            f"sm_budget {c.sm_budget}, overlap {c.overlap}"]
        if not np.array_equal(c.allreduce(np.ones(3)), np.full(3, float(world.size))):
            problems.append("a call with overlap=True is wrong")
    all_ok(problems)
