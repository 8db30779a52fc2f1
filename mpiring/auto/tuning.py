"""Which tuning table ``algorithm="auto"`` uses on this machine, where the per-user tables live,
and the set-up check that every rank uses the same one.

The table is looked up by the node's :class:`~mpiring.auto.machine.MachineKey` (GPU model, ranks on
the node, link between the GPUs); the first of these that holds a table for the key wins:

1. ``MPIRING_TUNING_FILE=<file>``: an explicit table (format 1 or 2; read and checked when the
   communicator is created, a bad one is refused at once);
2. the user's table for this key, ``<dir>/<gpu>-<ranks>x-<link>.json`` (e.g.
   ``nvidia-h200-2x-nvlink.json``; ``...-sm16.json`` for a communicator with ``sm_budget=16``),
   which ``mpiring-tune [--sm-budget N]`` writes; ``<dir>`` is
   ``$MPIRING_TUNING_DIR``, else ``${XDG_CACHE_HOME:-~/.cache}/mpiring/tuning``;
3. the tables shipped in ``mpiring/data/tuning-*.json``;
4. the built-in rule (:func:`mpiring.auto.table.builtin_choice`).

A table does not hold a key when its GPU model or link is another, or it has no entries for
that rank count: then the next source is asked. A communicator of one rank uses the
dispatcher's one-rank rule, and one across nodes runs ``hier``: no table there.

An SM budget (``Communicator(sm_budget=N)``) changes the winners (a two-shot held to 16 SMs is
~5x slower alone), so among the user's and the shipped tables the first measured under the
communicator's budget wins (a table's ``runs`` record it; none recorded: no budget). Where none
was, the first that holds the key serves and :meth:`Choice.describe` says that it was measured
under another budget. An explicit ``MPIRING_TUNING_FILE`` serves whatever budget it records.

Every rank must use the same table, or ranks would run different algorithms for one call and
wait for each other forever: :func:`settle` (collective, at set-up) compares the key, the
table's file and a hash of its bytes across ranks, and raises the same
:class:`~mpiring.core.errors.SetupError` on every rank, naming what differs on which ranks.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from ..core import settings
from ..core.errors import InvalidArgumentError, SetupError
from . import machine
from .machine import MachineKey
from .table import TuningTable, loads

if TYPE_CHECKING:
    from mpi4py import MPI

    from ..core.topology import Topology

TUNING_FILE = "MPIRING_TUNING_FILE"
TUNING_DIR = "MPIRING_TUNING_DIR"
EXPLICIT, USER, SHIPPED, BUILTIN = TUNING_FILE, "user", "shipped", "built-in rule"
ONE_RANK, ACROSS_NODES = "one rank", "across nodes"
_EMPTY = TuningTable({})
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableFile:
    """A table file as read: its table, its path, and a hash of its bytes."""

    table: TuningTable
    path: str  # as found (shipped tables: mpiring/data/<name>)
    digest: str  # sha256 of the file's bytes, first 16 hex digits


@dataclass(frozen=True)
class Choice:
    """The table auto uses on a communicator, and why (``origin``: one of ``MPIRING_TUNING_FILE``,
    ``user``, ``shipped``, ``built-in rule``, ``one rank``, ``across nodes``)."""

    key: MachineKey | None  # None across nodes
    origin: str
    source: TableFile | None = None
    sm_budget: int | None = None  # the communicator's (None: none), which the table should share

    @property
    def budget_differs(self) -> bool:
        """Whether the table in force was measured under another SM budget than this
        communicator's (its picks may not be the fastest here)."""
        return (self.source is not None and self.key is not None
                and self.source.table.sm_budget(self.key.ranks) != self.sm_budget)

    @property
    def table(self) -> TuningTable:
        """What the dispatcher reads (an empty table: the built-in rule)."""
        return self.source.table if self.source is not None else _EMPTY

    @property
    def path(self) -> str | None:
        return self.source.path if self.source is not None else None

    def describe(self) -> str:
        """One line: the machine, and the table in force with where it came from."""
        if self.origin == ACROSS_NODES:
            return "across nodes: auto runs hier (no tuning table)"
        assert self.key is not None
        what = self.key.describe()
        host = " (no GPU: host arrays, where auto runs the ring)" if self.key.gpu == machine.NONE else ""
        if host and self.source is None:
            return f"{what}: no GPU: auto runs the ring on host arrays (no tuning table)"
        if self.origin == ONE_RANK:
            return f"{what}: one rank: two-shot up to 4 MiB, NCCL above (no tuning table){host}"
        if self.source is None:
            return f"{what}: no table for this machine: the built-in rule{host}"
        table = self.source.table
        kinds = "eager and graph" if self.key.ranks in table.graph else "eager"
        return (f"{what}: {self.origin} table {self.source.path} (sha256 {self.source.digest}, "
                f"{kinds} entries{', measured ' + table.measured if table.measured else ''}){host}"
                f"{self._budget_note()}")

    def _budget_note(self) -> str:
        if not self.budget_differs:
            return f", measured under this communicator's SM budget of {self.sm_budget}" \
                if self.sm_budget else ""
        assert self.source is not None and self.key is not None
        theirs = self.source.table.sm_budget(self.key.ranks)
        return (f"; measured {f'under an SM budget of {theirs}' if theirs else 'without an SM budget'}"
                f", but this communicator's is {self.sm_budget or 'none'}: its picks may not be "
                f"the fastest here (measure: mpiring-tune"
                f"{f' --sm-budget {self.sm_budget}' if self.sm_budget else ''})")

    def setup_values(self) -> dict[str, object]:
        """What every rank must share (compared by :func:`settle`)."""
        where = (f"{self.origin} {self.source.path} (sha256 {self.source.digest})"
                 if self.source is not None else self.origin)
        return {"auto's machine": self.key.describe() if self.key else None, "auto's table": where}


def user_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where ``mpiring-tune`` keeps this user's tables: ``$MPIRING_TUNING_DIR``, else
    ``${XDG_CACHE_HOME:-~/.cache}/mpiring/tuning``."""
    env = os.environ if env is None else env
    folder = settings.text(TUNING_DIR, env)
    if folder:
        return Path(folder).expanduser()
    cache = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or "~", ".cache")
    return Path(cache).expanduser() / "mpiring" / "tuning"


def user_path(key: MachineKey, env: Mapping[str, str] | None = None,
              sm_budget: int | None = None) -> Path:
    """The user's table for ``key``: ``<user_dir>/<gpu>-<ranks>x-<link>.json``; measured under
    an SM budget of N, ``...-sm<N>.json`` (so that tables for other budgets are kept; host
    arrays run no kernels: no budget)."""
    return user_dir(env) / key.file_name(None if key.gpu == machine.NONE else sm_budget)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def read(path: str | os.PathLike) -> TableFile:
    """The table file at ``path``; raises InvalidArgumentError naming it and the problem."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise InvalidArgumentError(f"cannot read the tuning table {path}: {err}") from None
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"{path} is not a text file (a tuning table is JSON)") from None
    return TableFile(loads(text, str(path)), str(path), _digest(data))


def explicit(env: Mapping[str, str] | None = None) -> TableFile | None:
    """The table ``MPIRING_TUNING_FILE`` names (read and checked), or None."""
    path = settings.text(TUNING_FILE, env)
    return read(path) if path else None


@functools.lru_cache(maxsize=1)
def shipped() -> tuple[TableFile, ...]:
    """The tables that ship with mpiring (``mpiring/data/tuning-*.json``), by name; read once."""
    folder = resources.files("mpiring").joinpath("data")
    out = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.startswith("tuning-") and item.name.endswith(".json"):
            data = item.read_bytes()
            label = f"mpiring/data/{item.name}"
            out.append(TableFile(loads(data.decode(), label), label, _digest(data)))
    return tuple(out)


def find(key: MachineKey, env: Mapping[str, str] | None = None,
         given: TableFile | None = None, sm_budget: int | None = None) -> Choice:
    """The table for ``key`` and a communicator of ``sm_budget`` in lookup order (module
    docstring); ``given``: the ``MPIRING_TUNING_FILE`` table, already read. Raises
    InvalidArgumentError for a user table that cannot be read or that is for another machine."""
    if key.gpu == machine.NONE:
        sm_budget = None  # host arrays: no kernels to hold to a budget
    if given is not None and given.table.covers(key):
        return Choice(key, EXPLICIT, given, sm_budget)
    first = None  # the first source that holds the key, whatever its budget
    for choice in _holding(key, env, sm_budget):
        if not choice.budget_differs:
            return choice
        first = first or choice
    return first or Choice(key, BUILTIN, None, sm_budget)


def _holding(key: MachineKey, env: Mapping[str, str] | None, sm_budget: int | None) -> Iterator[Choice]:
    """The user's and the shipped tables that hold ``key``, in lookup order, read as asked for."""
    for budget in dict.fromkeys((sm_budget, None)):  # the budget's own user table, then the plain one
        path = user_path(key, env, budget)
        if path.is_file():
            mine = read(path)
            if not mine.table.covers(key):
                raise InvalidArgumentError(
                    f"{path} is where mpiring-tune keeps the table for {key.describe()}"
                    f", but it holds tables for {mine.table.describe_machine()}: run mpiring-tune "
                    "again on this machine, or delete the file")
            yield Choice(key, USER, mine, sm_budget)
    for source in shipped():
        if source.table.covers(key):
            yield Choice(key, SHIPPED, source, sm_budget)


def settle(comm: MPI.Intracomm, topology: Topology, buses: Sequence[str] | None,
           given: TableFile | None, timeout: float, sm_budget: int | None = None) -> Choice:
    """Collective over ``comm`` (one bounded allgather, on one node of several ranks): this
    node's key (:func:`mpiring.auto.machine.detect`, from every GPU of the node) and table
    (:func:`find`, for a communicator of ``sm_budget``); raises the same SetupError on every
    rank if ranks differ in either, or if the table cannot be read."""
    from ..core.consensus import disagreements
    from ..node.setup_steps import allgather

    if topology.nodes > 1:
        return Choice(None, ACROSS_NODES)
    problem = ""
    try:
        key = machine.detect(topology.size, buses)
    except Exception as err:  # noqa: BLE001 - detection must not leave peers waiting
        key, problem = MachineKey(machine.UNKNOWN, topology.size, machine.UNKNOWN), str(err)
    if topology.size == 1:
        return Choice(key, ONE_RANK)
    choice = Choice(key, BUILTIN)
    try:
        choice = find(key, None, given, sm_budget) if not problem else choice
    except InvalidArgumentError as err:
        problem = str(err)
    values = choice.setup_values()
    if problem:
        values["auto's table"] = f"unusable: {problem}"
    lines = disagreements(allgather(comm, values, timeout, "say which tuning table auto uses"))
    if lines:
        raise SetupError(
            "mpiring.Communicator set-up: " + "; ".join(lines) + ". Every rank must use the same "
            "tuning table: set MPIRING_TUNING_FILE, MPIRING_TUNING_DIR and XDG_CACHE_HOME/HOME "
            "alike on every rank, and install the same packages (pynvml) everywhere")
    if problem:
        raise SetupError(f"auto's tuning table: {problem}")
    if choice.budget_differs:
        log.debug("auto: %s", choice.describe())
    return choice
