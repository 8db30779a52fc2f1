"""The package's shape: folders that are layers, each module importing only its own layer and
the layers below (every import counts: those inside functions and those only for type
checkers), no import cycle between modules, no module taking another's private names, modules
sized by their job, CUDA C++ in ``.cu`` files, and a docs algorithm table rendered from the rows.

The layers, lowest first (``ls mpiring/`` shows them; each folder's ``__init__`` says its job)::

    core/        errors, dtypes and ops, settings, buffers, a call's fields and descriptor
    node/        bounded set-up steps, node shared memory and waits, control board, groups
    cuda/        the device toolkit: staging, kernels (csrc/), launches, status, watchdog
    ring/        the ring schedule, its pipeline, stall diagnosis, the transports
    context/     per-memory resources of a communicator (host, GPU, NCCL communicators)
    algorithms/  the algorithm table: one module per algorithm, one row each
    auto/        how algorithm="auto" picks: tuning tables, machine keys, the cost model
    call/        from a call to its run: options, dispatch, replay, the agreement check
    (top)        communicator.py (the API), lifetime.py, trace.py, tune.py, __main__.py
    bench/       the benchmark, above everything it measures

Imports are read from the source (``ast``), not by importing.
"""

from __future__ import annotations

import ast
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from mpiring import algorithms

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mpiring"
LAYERS = ("core", "node", "cuda", "ring", "context", "algorithms", "auto", "call", "", "bench")
LOOK_AGAIN_LINES = 600  # a module this long is looked at again: does it still do one job?
MAX_LINES = 1000  # past this a module is surely several jobs


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(module: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """(mpiring module imported, name taken from it or "") for every import in ``path``,
    wherever it stands (in a function, under ``if TYPE_CHECKING:``)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:  # from . import ops
                    yield f"{target}.{alias.name}", ""
                elif target in modules:
                    yield target, alias.name
        elif isinstance(node, ast.Import):
            yield from ((a.name, "") for a in node.names if a.name in modules)


def _layer(module: str, modules: dict[str, Path]) -> str:
    """The layer of a module: its top folder under ``mpiring/``, or "" for a top module."""
    parts = module.split(".")
    if len(parts) > 1 and modules.get(f"mpiring.{parts[1]}", Path()).name == "__init__.py":
        return parts[1]
    return ""


def _graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = _modules(package)
    return {m: {t for t, _ in _imports(m, p, modules) if t != m} for m, p in modules.items()}


def upward_imports(package: Path = PACKAGE) -> list[str]:
    """Every import of a module from a layer above its own, as "importer -> imported"."""
    modules = _modules(package)
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    bad = []
    for module, targets in _graph(package).items():
        if module == "mpiring":
            continue  # the package's __init__ re-exports the API; nothing imports it back
        for target in sorted(targets):
            if rank[_layer(target, modules)] > rank[_layer(module, modules)]:
                bad.append(f"{module} ({_layer(module, modules) or 'top'}) -> {target} "
                           f"({_layer(target, modules) or 'top'})")
    return bad


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph``, one per strongly connected set of two or more modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_folders_are_the_layers() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == {layer for layer in LAYERS if layer}, (
        f"folders {sorted(folders)} differ from the layers {LAYERS}: add the new folder to LAYERS "
        "(and to the docstring above) at its place")
    assert (PACKAGE / "cuda" / "csrc").is_dir() and (PACKAGE / "communicator.py").is_file()


def test_every_import_goes_to_the_same_layer_or_below() -> None:
    bad = upward_imports()
    assert not bad, "imports from a higher layer (move the shared name down, or pass a callback):\n" + \
        "\n".join(bad)


def test_no_import_cycle_between_modules() -> None:
    """Counting type-only and lazy imports: a type two modules share lives below both."""
    graph = {m: t for m, t in _graph().items() if m != "mpiring"}
    cycles = import_cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_no_module_takes_another_modules_private_names() -> None:
    modules = _modules()
    bad = sorted(f"{m} takes {t}.{name}" for m, p in modules.items()
                 for t, name in _imports(m, p, modules)
                 if name.startswith("_") and t != m)
    assert not bad, "private names used across modules (make a public hook): " + "; ".join(bad)


def test_a_planted_upward_import_and_cycle_are_found(tmp_path: Path) -> None:
    """The checks can fail: a type-only import of the communicator planted in ``core/`` is an
    upward import and, with the communicator importing core, a cycle."""
    copy = tmp_path / "mpiring"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "csrc", "data"))
    before_up, before_cycles = upward_imports(copy), import_cycles(_graph(copy))
    (copy / "core" / "planted.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..communicator import Communicator\n")
    (copy / "communicator.py").write_text((copy / "communicator.py").read_text()
                                          + "\nfrom .core import planted\n")
    new_up = [line for line in upward_imports(copy) if line not in before_up]
    assert new_up == ["mpiring.core.planted (core) -> mpiring.communicator (top)"]
    new_cycles = [c for c in import_cycles(_graph(copy)) if c not in before_cycles]
    assert new_cycles and all({"mpiring.communicator", "mpiring.core.planted"} <= set(c) for c in new_cycles)


@pytest.mark.parametrize("path", sorted(_modules().values()), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_are_sized_by_their_job(path: Path) -> None:
    """Modules are cut by job, not by a count: near 600 lines a warning asks to look again;
    only a module past 1000 lines fails."""
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it by job"
    if lines > LOOK_AGAIN_LINES:
        warnings.warn(f"{path.relative_to(ROOT)} has {lines} lines: does it still do one job?",
                      stacklevel=1)


def test_cuda_cpp_lives_in_cu_files() -> None:
    """Kernels are .cu/.cuh files (mpiring/cuda/csrc; the tools' in tools/csrc), which CI compiles
    with NVRTC (tests/test_cuda_sources.py, tests/tools/test_tools_kernels.py); a kernel in a
    Python string would escape that check."""
    inline = [str(p.relative_to(ROOT)) for p in _modules().values()
              if "__global__" in p.read_text(encoding="utf-8")]
    assert not inline, f"CUDA kernels written inside Python modules: {inline}: move them to a .cu file"


def test_the_docs_algorithm_table_is_rendered_from_the_rows() -> None:
    """docs/design.md holds the algorithm table (the README links to it)."""
    page = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    table = algorithms.markdown_table()
    assert table in page, (
        "docs/design.md's algorithm table differs from mpiring.algorithms.markdown_table(); paste:\n" + table)
