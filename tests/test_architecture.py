"""The package's shape: modules sized by their job, folders that import each other in one
direction only, the CUDA toolkit below everything that uses it, and a README whose algorithm
table is rendered from the algorithm table itself.

Imports are read from the source (``ast``), not by importing: an import that exists only for
type checkers (under ``if TYPE_CHECKING:``) is not an edge, every other one is, including the
lazy imports inside functions (they are a dependency all the same).
"""

from __future__ import annotations

import ast
import warnings
from collections import defaultdict
from pathlib import Path

import pytest

from mpiring import algorithms

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mpiring"
LOOK_AGAIN_LINES = 600  # a module this long is looked at again: does it still do one job?
MAX_LINES = 1000  # past this a module is surely several jobs


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _unit(module: str) -> str:
    """What a dependency edge joins: a sub-folder of the package (``cuda/``), or a top module."""
    parts = module.split(".")
    if len(parts) == 1:
        return "mpiring"
    return parts[1] + "/" if (PACKAGE / parts[1]).is_dir() else parts[1]


def _imports(path: Path) -> set[str]:
    """The mpiring modules ``path`` imports at run time (absolute names)."""
    module = _name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.startswith("mpiring"):
                    found.update([target] if child.module else [f"{target}.{a.name}" for a in child.names])
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.startswith("mpiring"))
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in _modules():
        src = _unit(_name(path))
        for target in _imports(path):
            dst = _unit(target)
            if dst not in (src, "mpiring"):  # the package's __init__ re-exports; nothing imports it back
                graph[src].add(dst)
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
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
    inline = [str(p.relative_to(ROOT)) for p in _modules() if "__global__" in p.read_text(encoding="utf-8")]
    assert not inline, f"CUDA kernels written inside Python modules: {inline}: move them to a .cu file"


def test_the_folders_show_the_architecture() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert {"algorithms", "backends", "cuda", "bench", "transports"} <= folders
    assert (PACKAGE / "cuda" / "csrc").is_dir() and (PACKAGE / "schedule.py").is_file()
    assert (PACKAGE / "communicator.py").is_file()


def test_no_import_cycle_between_folders_or_modules() -> None:
    graph = _graph()
    cycles = sorted(unit for unit in graph if unit in _reachable(graph, unit))
    assert not cycles, f"import cycles through {cycles}: " + "; ".join(
        f"{u} -> {sorted(graph[u])}" for u in cycles)


def test_the_cuda_toolkit_sits_below_its_users() -> None:
    """``cuda/`` is a toolkit: it never imports the transports, the pipeline, the backends, the
    algorithms or the API (they import it)."""
    users = {"transports/", "pipeline", "backends/", "algorithms/", "communicator", "bench/"}
    below = _reachable(_graph(), "cuda/")
    assert not below & users, f"cuda/ reaches {sorted(below & users)}"


def test_the_algorithm_rows_import_no_backend_at_run_time() -> None:
    """A row calls the backend it is handed; it needs none imported (only for type checkers)."""
    below = _reachable(_graph(), "algorithms/")
    assert "backends/" not in below and "communicator" not in below


def test_the_docs_algorithm_table_is_rendered_from_the_rows() -> None:
    """docs/design.md holds the algorithm table (the README links to it)."""
    page = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    table = algorithms.markdown_table()
    assert table in page, (
        "docs/design.md's algorithm table differs from mpiring.algorithms.markdown_table(); paste:\n" + table)


def test_a_planted_cycle_is_found(tmp_path: Path) -> None:
    """The cycle finder can fail: a graph with a loop is reported."""
    graph = {"a/": {"b"}, "b": {"c/"}, "c/": {"a/"}, "d": {"a/"}}
    assert "a/" in _reachable(graph, "a/") and "d" not in _reachable(graph, "d")
