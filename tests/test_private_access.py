"""Tests use mpiring's objects through their public names: no test reaches into an object's
private attributes (``comm._held.gpu``, ``comm._dispatch.prepare = ...``). What a test needs to
see or steer gets a public, documented way in (``Communicator.stats()``, ``.call_keys``,
``.last_stream``, ``.tuning_table``, ``.ring_pipeline(events=True)``, ``.disable_gpu_timeouts()``),
or the test builds the component under test through its own API (the agreement board of
``tests/mpi/test_mpi_agreement_board.py``). ``tests/test_architecture.py`` holds the package's
modules to the same rule for imported names.

Read from the source (``ast``) of every ``tests/**/*.py``. A *reach-in* is an attribute
``X._name`` (read, written or deleted), or ``getattr``/``setattr``/``hasattr``/``delattr``
(``monkeypatch.setattr`` too) of ``(X, "_name")``, where ``X`` is not ``self``, ``cls`` or
``super()`` and ``_name`` is not a dunder. It fails unless it is

* a namedtuple's public API (``_replace``, ``_asdict``, ...: underscored only to stay out of
  the fields' way);
* in :data:`OTHER_LIBRARIES`: a private API of Python or another library, used on purpose;
* in :data:`WHITE_BOX`: per test file, exactly the internals of the module that file is a
  white-box unit test of, on objects the test itself built (or the module itself).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})

OTHER_LIBRARIES = frozenset({
    "os._exit",  # a fault script's rank ends without MPI_Finalize (which would wait for the dead)
    "sys._current_frames",  # a hung rank's threads' stacks, dumped for the test's report
    "torch.cuda._sleep",  # torch's own GPU spin: a late writer on torch's stream
    "torch._neg_view",  # torch's lazy negation: the descriptions must refuse it
})

# Per test file, the private names of the module it is a white-box unit test of, each on an
# object that test built itself (or the module): exact expressions, so a new reach-in fails
# even in these files. Never a communicator: what a test reads off one gets a public way in.
WHITE_BOX: dict[str, frozenset[str]] = {
    # mpiring.call.dispatch on Dispatchers the tests make: the plan cache, lazy rows made, auto's
    # choice and its table rule.
    "tests/test_dispatch.py": frozenset({"d._plans", "d._made", "d._auto_choice", "d._table_decides",
                                         "forced._table_decides"}),
    "tests/test_auto.py": frozenset({"dispatch._auto_choice"}),  # auto's choice on a table row by row
    # mpiring.bench.summary's banner lines, one function at a time.
    "tests/test_bench_direct.py": frozenset({"summary._through_lines", "summary._rival_lines",
                                             "summary._baseline_text", "summary._agreement_text"}),
    "tests/test_bench_rivals.py": frozenset({"summary._rival_lines", "summary._baseline_text",
                                             # a PointMeasurer the test made: its timed loop, a
                                             # planted capture
                                             "m._timed", "m._capture"}),
    "tests/test_bench_measure.py": frozenset({"m._timed"}),  # a PointMeasurer the test made
    # mpiring.bench.__main__'s run with a parsed command line (the signal path, the overlap run).
    "tests/test_bench_files.py": frozenset({"bench._run"}),
    "tests/mpi/test_bench_overlap_mpi.py": frozenset({"bench._run"}),
    # mpiring.bench.runner: which rows run, their variants, their communicators, a rebuild.
    "tests/test_bench_reproducible.py": frozenset({"runner._algorithms", "runner._variants",
                                                   "runner._communicator", "runner._rebuild"}),
    "tests/test_bench_runner.py": frozenset({"runner._algorithms"}),
    # A module's own state, reset: the warn-once flags of mpiring.node.launch and
    # mpiring.core.settings, the cache of CuPy views of torch streams in mpiring.cuda.streams.
    "tests/test_launch.py": frozenset({"launch._warned"}),
    "tests/test_settings.py": frozenset({"settings._WARNED"}),
    "tests/test_streams.py": frozenset({"streams._VIEWS"}),
    # mpiring.ring.schedule: a wrong output offset planted in RingPlan, which the simulator must catch.
    "tests/test_schedule_phases.py": frozenset({"RingPlan._out"}),
    # mpiring.cuda.staging: a broken peer probe planted in IpcStaging (a set-up error on every rank).
    "tests/gpu/test_gpu_memory.py": frozenset({"staging.IpcStaging._probe_peers"}),
    "tests/gpu/test_kernels.py": frozenset({"kernel._copies"}),  # the copy unit a FoldKernel chose
}

BY_NAME_CALLS = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _own(base: ast.expr) -> bool:
    """Whether ``base`` is the object's own (``self``, ``cls``, ``super()``)."""
    if isinstance(base, ast.Name):
        return base.id in ("self", "cls")
    return isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def reach_ins(source: str) -> Iterator[tuple[int, str]]:
    """(line, ``"X._name"``) of every private access on another object in ``source``
    (namedtuple API included: the callers judge)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr) and not _own(node.value):
            yield node.lineno, f"{ast.unparse(node.value)}.{node.attr}"
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            func, name = node.func, node.args[1]
            by_name = (isinstance(func, ast.Name) and func.id in BY_NAME_CALLS) or (
                isinstance(func, ast.Attribute) and func.attr in ("setattr", "delattr"))  # monkeypatch
            if (by_name and isinstance(name, ast.Constant) and isinstance(name.value, str)
                    and _private(name.value) and not _own(node.args[0])):
                yield node.lineno, f"{ast.unparse(node.args[0])}.{name.value}"


def _accesses(root: Path) -> Iterator[tuple[str, int, str]]:
    """(test file relative to ``root``, line, ``"X._name"``) for every reach-in under ``root/tests``."""
    for path in sorted((root / "tests").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for line, what in sorted(reach_ins(path.read_text(encoding="utf-8"))):
            if what.rsplit(".", 1)[1] not in NAMEDTUPLE_API and what not in OTHER_LIBRARIES:
                yield rel, line, what


def violations(root: Path = ROOT) -> list[str]:
    """Every reach-in under ``root/tests`` that no list above allows, as ``file:line: X._name``."""
    return [f"{rel}:{line}: {what}" for rel, line, what in _accesses(root)
            if what not in WHITE_BOX.get(rel, ())]


def test_no_test_reaches_into_another_objects_private_attributes() -> None:
    bad = violations()
    assert not bad, (
        "tests reach into private attributes of objects they do not own: give them a public, "
        "documented way in (or build the component under test through its own API); only a "
        "white-box unit test of a module's own internals may be listed in WHITE_BOX, with why:\n"
        + "\n".join(bad))


def test_every_white_box_entry_is_still_used() -> None:
    """An entry no test needs any more goes: the list says what is white-box today."""
    used = {(rel, what) for rel, _, what in _accesses(ROOT)}
    stale = sorted(f"{rel}: {what}" for rel, whats in WHITE_BOX.items() for what in whats
                   if (rel, what) not in used)
    assert not stale, "WHITE_BOX entries no test uses: remove them: " + "; ".join(stale)


PLANTED = '''
import os


def reaches(comm, point, monkeypatch):
    g = comm._held.gpu                          # 6: reach-in
    comm._dispatch.prepare = None               # 7: reach-in (a write)
    ran_on = comm._held.gpu._last_stream.ptr    # 8: reach-in, twice
    getattr(comm, "_tuning")                    # 9: reach-in, by name
    monkeypatch.setattr(comm, "_held", None)    # 10: reach-in, by name
    os._exit(0)                                 # another library's: allowed
    point._replace(x=1), point._fields          # namedtuple API: allowed
    comm.__class__, getattr(comm, "__dict__")   # dunders: allowed


class Own:
    def method(self):
        return self._x, super()._y, getattr(self, "_z")   # its own: allowed

    @classmethod
    def make(cls):
        return cls._registry                    # its own: allowed
'''


def test_a_planted_reach_in_is_found(tmp_path: Path) -> None:
    """The check can fail: a planted file's reach-ins are each found (and what is allowed is
    not), and a communicator reach-in planted into a white-box file fails there too."""
    (tmp_path / "tests" / "gpu").mkdir(parents=True)
    (tmp_path / "tests" / "gpu" / "planted.py").write_text(PLANTED, encoding="utf-8")
    white = tmp_path / "tests" / "test_dispatch.py"
    white.write_text((ROOT / "tests" / "test_dispatch.py").read_text(encoding="utf-8")
                     + "\n\ndef planted(comm):\n    return comm._held.check\n", encoding="utf-8")
    lines = len(white.read_text(encoding="utf-8").splitlines())
    assert violations(tmp_path) == [
        "tests/gpu/planted.py:6: comm._held",
        "tests/gpu/planted.py:7: comm._dispatch",
        "tests/gpu/planted.py:8: comm._held",
        "tests/gpu/planted.py:8: comm._held.gpu._last_stream",
        "tests/gpu/planted.py:9: comm._tuning",
        "tests/gpu/planted.py:10: comm._held",
        f"tests/test_dispatch.py:{lines}: comm._held",
    ]
