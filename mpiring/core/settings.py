"""Every ``MPIRING_*`` environment variable, in one table, read by one parser.

Each variable mpiring reads is a :class:`Setting` of :data:`TABLE`: its name, its type, its
default, its bounds and what it means. :func:`get` is the only way the library reads one: it
parses the text by the row's type and raises :class:`~mpiring.core.errors.InvalidArgumentError` in
one shape, naming the variable, its value and what is accepted::

    MPIRING_DIRECT_BLOCKS='abc': not an integer; use an integer from 1 to 4096 (unset: 128)

Types: ``bool`` takes only 0/1/true/false/yes/no/on/off (any case), so that
``MPIRING_CUDA_AWARE_MPI=2`` or ``MPIRING_SHARE_GPU=maybe`` is refused instead of guessed;
``int`` and ``float`` are bounded (a float must be finite); ``choice`` takes its listed words;
``str`` is taken as it is. An empty or unset variable has the default.

The table also lists the variables of the benchmark, of mpiring's tests and of its scripts
(``reader`` ``"bench"``, ``"tests"``, ``"scripts"``), which the library never reads, so that
:func:`warn_unknown` knows every name the project uses: any other ``MPIRING_*`` name in the
environment is most likely misspelt, and is reported once per process, with the closest known
name. The tables of ``docs/settings.md`` are rendered by :func:`markdown` (a test compares them).

Pure apart from reading the environment; imports nothing of mpiring but its errors.
"""

from __future__ import annotations

import difflib
import math
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from .errors import InvalidArgumentError

PREFIX = "MPIRING_"
KINDS = ("bool", "int", "float", "choice", "str")
READERS = ("mpiring", "bench", "tests", "scripts")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
BOOL_WORDS: dict[str, object] = {**dict.fromkeys(TRUE_WORDS, True), **dict.fromkeys(FALSE_WORDS, False)}


@dataclass(frozen=True)
class Setting:
    """One environment variable.

    Args:
        name: the variable, ``MPIRING_...``.
        kind: ``"bool"``, ``"int"``, ``"float"``, ``"choice"`` or ``"str"``.
        default: the value when it is unset or empty (None: none, as ``unset`` says).
        meaning: what it does, in one line (the docs' table).
        low: the smallest accepted ``int``; for a ``float``, values must lie above it.
        high: the largest accepted ``int`` or ``float``.
        choices: for ``choice``: each accepted word (lower case) and the value it stands for.
        unset: how the docs and errors say what an unset variable means, where the default
            alone does not say it (e.g. "ask the MPI library").
        reader: who reads it: ``"mpiring"`` (the library), ``"bench"`` (``mpiring.bench``),
            ``"tests"`` or ``"scripts"``.
        accepts: what a ``str`` variable accepts, in words, where its reader checks more than
            the type (e.g. an algorithm's name).
    """

    name: str
    kind: str
    default: object
    meaning: str
    low: float | None = None
    high: float | None = None
    choices: Mapping[str, object] = field(default_factory=dict)
    unset: str = ""
    reader: str = "mpiring"
    accepts: str = ""

    @property
    def accepted(self) -> str:
        """What the variable accepts, in words ("a positive integer", "one of gpu, host, 0, 1")."""
        if self.kind == "bool":
            return "one of " + ", ".join(BOOL_WORDS) + ", in any case"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices) + ", in any case"
        if self.kind == "str":
            return self.accepts or "any text"
        if self.kind == "float":
            low = "positive" if self.low == 0 else f"above {self.low:g}"
            return f"a finite, {low} number" + (f" up to {self.high:g}" if self.high is not None else "")
        if self.low == 1 and self.high is None:
            return "a positive integer"
        if self.high is None:
            return f"an integer of at least {self.low:g}"
        return f"an integer from {self.low:g} to {self.high:g}"

    @property
    def when_unset(self) -> str:
        """What an unset variable means, in words."""
        if self.unset:
            return self.unset
        if self.default is None:
            return "none"
        if isinstance(self.default, bool):
            return "0" if not self.default else "1"
        return f"{self.default:g}" if isinstance(self.default, float) else str(self.default)


TABLE: tuple[Setting, ...] = (
    Setting("MPIRING_CHECK", "choice", "gpu",
            "where the per-call agreement check runs: gpu (the one-/two-shot kernels check on the "
            "GPU, other calls on the host), host (every call, on the host: a debugging aid), 0 off",
            choices={"gpu": "gpu", "host": "host", **dict.fromkeys(TRUE_WORDS, "gpu"),
                     **dict.fromkeys(FALSE_WORDS, "off")}),
    Setting("MPIRING_TIMEOUT", "float", 300.0,
            "seconds any wait for a peer may go without progress from it, on the host and on the GPU; "
            "a call that keeps moving never times out (timeout=)", low=0),
    Setting("MPIRING_DEBUG", "bool", False, "log details to stderr (quiet otherwise)"),
    Setting("MPIRING_ALGO", "str", None,
            "what algorithm='auto' runs instead of the tuning table's choice, where that algorithm "
            "serves the call", unset="the tuning table's choice",
            accepts="a name of mpiring.algorithms.names() (ring, twoshot, nccl, mpi, ...) or auto"),
    Setting("MPIRING_TUNING_FILE", "str", None,
            "a tuning table (from mpiring-tune -o) that auto reads before any other", accepts="a file"),
    Setting("MPIRING_TUNING_DIR", "str", None,
            "where mpiring-tune writes, and auto looks for, this user's tuning tables",
            unset="${XDG_CACHE_HOME:-~/.cache}/mpiring/tuning", accepts="a folder"),
    Setting("MPIRING_REPRODUCIBLE", "bool", False,
            "every result reduced in rank order, the same bits at every size and from every row that "
            "runs (reproducible=); rows that cannot refuse; equal on every rank"),
    Setting("MPIRING_SM_BUDGET", "int", None,
            "the most SMs mpiring's own kernels hold at once per GPU (sm_budget=); equal on every rank",
            low=1, unset="no budget"),
    Setting("MPIRING_HOTPATH", "bool", True,
            "replay eager GPU calls of a shape seen before with the compiled replay "
            "(mpiring/call/_hotpath.c, where it is built); 0: in Python, as without it (read when a "
            "communicator is made)"),
    Setting("MPIRING_DIRECT_BLOCKS", "int", 128,
            "thread blocks of the one-shot/two-shot kernels (read at import); equal on every rank", low=1,
            high=4096),
    Setting("MPIRING_LL_BLOCK_LINES", "int", 128,
            "about how many lines (8 payload bytes each) one block of the oneshot-ll kernel moves: "
            "fewer spread a message over more SMs (read when a communicator is made)", low=1, high=1024),
    Setting("MPIRING_CE_PUSH_STREAMS", "choice", "one",
            "ce-twoshot's pushes: one copy stream for all peers (one, each round's pushes in turn) "
            "or one per peer (peer, all at once); equal on every rank",
            choices={"one": "one", "peer": "peer"}),
    Setting("MPIRING_CE_AREA_MIB", "choice", 32,
            "ce-twoshot's staging area in MiB: one round's piece per peer (larger: fewer rounds, fewer "
            "device operations per byte); memory per rank, from the row's first call: 4 (ranks - 1) "
            "areas and the flags, rounded up to 2 MiB (32: 130 MiB on 2 GPUs, 386 on 4, 898 on 8; "
            "8: 34, 98, 226); equal on every rank",
            choices={str(1 << k): 1 << k for k in range(7)}),
    Setting("MPIRING_CUDA_AWARE_MPI", "bool", None,
            "whether the MPI moves device memory, where the library cannot say (inter='mpi')",
            unset="ask the MPI library; no answer: no"),
    Setting("MPIRING_SHARE_GPU", "bool", False,
            "testing aid: ranks of a node may share one GPU (correctness only; run under MPS; the "
            "NCCL rows are refused); equal on every rank"),
    Setting("MPIRING_VIRTUAL_NODES", "str", None,
            "testing aid: cut this machine's ranks into K nodes, or nodes of sizes a,b,c (e.g. 4,2,3); "
            "equal on every rank", unset="one node per machine",
            accepts="K, or a,b,c (positive integers that add up to the ranks)"),
    # Read by the benchmark (mpiring.bench) only.
    Setting("MPIRING_COMMIT", "str", None,
            "the commit the bench records for a copy of mpiring that is not a git checkout",
            unset="the checkout's commit, else unknown", reader="bench"),
    Setting("MPIRING_NCCL_LIB", "str", None,
            "another libnccl.so.2 for the bench's nccl-lib row (a newer NCCL beside the installed "
            "one, in the same run)", unset="no nccl-lib row", accepts="a libnccl.so.2 file",
            reader="bench"),
    # Read by mpiring's tests and scripts, never by the library.
    Setting("MPIRING_REQUIRE_NVRTC", "bool", False,
            "the kernel compile tests fail, instead of skipping, without NVRTC (CI sets 1)", reader="tests"),
    Setting("MPIRING_FAULT_OUT", "str", None, "where a fault job's ranks write what they saw",
            reader="tests"),
    Setting("MPIRING_FAULT_RESUME", "float", None,
            "seconds after which a fault job resumes the rank it stopped", low=0, reader="tests"),
    Setting("MPIRING_FAULT_UNSAFE", "bool", False,
            "a fault job's control run: the waits (host) or the timeouts (GPU) turned off", reader="tests"),
    Setting("MPIRING_FAULT_JOB", "str", None, "marks every process of a host fault job", reader="tests"),
    Setting("MPIRING_GPU_JOB", "str", None, "marks every process of a GPU test job", reader="tests"),
    Setting("MPIRING_FUZZ_REPORT", "str", None, "where the GPU fuzz test appends what it ran (JSON lines)",
            reader="tests"),
    Setting("MPIRING_STRESS_CALLS", "int", 10000, "calls of the GPU stress tests", low=1, reader="tests"),
    Setting("MPIRING_LIFECYCLE_CYCLES", "int", 1000, "create/close cycles of the GPU lifecycle test",
            low=1, reader="tests"),
    Setting("MPIRING_CI_VENV", "str", None, "where .ci/run keeps its virtualenv",
            unset="a temporary folder", reader="scripts"),
    Setting("MPIRING_DIRECT_BLOCKS_SHARED", "int", None,
            "MPIRING_DIRECT_BLOCKS under jobs/gpu-shared.sh", low=1, unset="128 / ranks (at 3 ranks and up)",
            reader="scripts"),
)
BY_NAME: dict[str, Setting] = {s.name: s for s in TABLE}


def setting(name: str) -> Setting:
    """The row of ``name``; a name outside the table is a bug of the caller (KeyError)."""
    return BY_NAME[name]


def invalid(name: str, text: str, problem: str) -> InvalidArgumentError:
    """The one error shape for a bad value of a variable of the table: its name, its value, the
    problem, what it accepts and what unset means."""
    row = BY_NAME[name]
    return InvalidArgumentError(f"{name}={text!r}: {problem}; use {row.accepted} "
                                f"(unset: {row.when_unset})")


def parse(row: Setting, text: str) -> object:
    """The value of ``text`` (stripped, not empty) for ``row``; raises :func:`invalid`'s error."""
    word = text.strip().lower()
    if row.kind in ("bool", "choice"):
        table = BOOL_WORDS if row.kind == "bool" else row.choices
        if word not in table:
            raise invalid(row.name, text, "not an accepted word")
        return table[word]
    if row.kind == "str":
        return text.strip()
    number: float
    try:
        number = int(word) if row.kind == "int" else float(word)
    except ValueError:
        raise invalid(row.name, text, f"not {'an integer' if row.kind == 'int' else 'a number'}") from None
    if row.kind == "float" and not math.isfinite(number):
        raise invalid(row.name, text, "not finite")
    low_ok = row.low is None or (number >= row.low if row.kind == "int" else number > row.low)
    if not low_ok or (row.high is not None and number > row.high):
        raise invalid(row.name, text, "out of range")
    return number


def get(name: str, environ: Mapping[str, str] | None = None) -> object:
    """The value of variable ``name`` (a row of :data:`TABLE`) in ``environ`` (default: the
    process's environment): parsed, or the row's default where it is unset or empty."""
    row = BY_NAME[name]
    text = (os.environ if environ is None else environ).get(name, "")
    return row.default if not text.strip() else parse(row, text)


def flag(name: str, environ: Mapping[str, str] | None = None) -> bool | None:
    """:func:`get` for a ``bool`` variable."""
    assert BY_NAME[name].kind == "bool", name
    value = get(name, environ)
    return None if value is None else bool(value)


def integer(name: str, environ: Mapping[str, str] | None = None) -> int | None:
    """:func:`get` for an ``int`` variable."""
    assert BY_NAME[name].kind == "int", name
    value = get(name, environ)
    return None if value is None else int(cast(int, value))


def number(name: str, environ: Mapping[str, str] | None = None) -> float | None:
    """:func:`get` for a ``float`` variable."""
    assert BY_NAME[name].kind == "float", name
    value = get(name, environ)
    return None if value is None else float(cast(float, value))


def text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """:func:`get` for a ``str`` or ``choice`` variable (a choice's value is a word)."""
    assert BY_NAME[name].kind in ("str", "choice"), name
    value = get(name, environ)
    return None if value is None else str(value)


def check_all(environ: Mapping[str, str] | None = None) -> None:
    """Parse every variable of the library that is set, raising the first bad one's error: the
    communicator calls it at set-up, where a rank's error reaches every rank, instead of
    meeting it later on one rank (e.g. ``MPIRING_SHARE_GPU`` only once a GPU is bound)."""
    for row in TABLE:
        if row.reader == "mpiring":
            get(row.name, environ)


def unknown(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """The ``MPIRING_*`` names in ``environ`` that no row holds, each with the closest known
    name (None if none is close), sorted."""
    env = os.environ if environ is None else environ
    names = sorted(n for n in env if n.startswith(PREFIX) and n not in BY_NAME)
    out = []
    known = {n.removeprefix(PREFIX): n for n in BY_NAME}  # compared without the common prefix
    for name in names:
        close = difflib.get_close_matches(name.removeprefix(PREFIX), list(known), n=1, cutoff=0.6)
        out.append((name, known[close[0]] if close else None))
    return out


_WARNED = False


def warn_unknown(environ: Mapping[str, str] | None = None, stacklevel: int = 2) -> bool:
    """Warn (``RuntimeWarning``), once per process, about ``MPIRING_*`` names mpiring does not
    know: a misspelt variable would otherwise be ignored in silence. Returns whether it warned.
    ``stacklevel``: the frame the warning names, as :func:`warnings.warn` counts (this one's caller: 2)."""
    global _WARNED
    if _WARNED:
        return False
    found = unknown(environ)
    if not found:
        return False
    _WARNED = True
    said = "; ".join(f"{n}" + (f" (did you mean {c}?)" if c else "") for n, c in found)
    warnings.warn(f"mpiring: unknown environment variable(s), ignored: {said}. The variables mpiring "
                  "reads are listed in docs/settings.md (mpiring.core.settings.TABLE)", RuntimeWarning,
                  stacklevel=stacklevel)
    return True


def markdown(reader: str = "mpiring") -> str:
    """The table of ``docs/settings.md`` of the variables ``reader`` reads (a test keeps the
    page equal to these)."""
    head = "| variable | type | accepted | unset | meaning |\n| --- | --- | --- | --- | --- |\n"
    return head + "".join(f"| `{s.name}` | {s.kind} | {s.accepted} | {s.when_unset} | {s.meaning} |\n"
                          for s in TABLE if s.reader == reader)
