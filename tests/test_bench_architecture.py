"""The benchmark's shape, module by module (tests/test_architecture.py looks at the package's
folders): no module of ``mpiring.bench`` imports another one's private names, and no two import
each other, however indirectly, counting every import (those inside functions, and those only
for type checkers: a type two modules share lives below both); the experiments live in the
repository's tools/, not here; and what the figures and the SM column say about algorithms
comes from the algorithm table.

Imports are read from the source (``ast``), not by importing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_architecture import import_cycles  # one cycle finder for the package and the bench

from mpiring import algorithms
from mpiring.bench import overlap, plot_style, rivals
from mpiring.bench.collectives import ALLGATHER, ALLREDUCE, REDUCE_SCATTER

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "mpiring" / "bench"


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in sorted(BENCH.rglob("*.py"))}


def _imports(module: str) -> list[tuple[str, str]]:
    """(bench module imported, name taken from it or "") for every import of ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:  # from . import runner
                    found.append((f"{target}.{alias.name}", ""))
                elif target in MODULES:
                    found.append((target, alias.name))
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name in MODULES]
    return [(t, n) for t, n in found if t != module]


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _ in _imports(m)} for m in MODULES}


def test_no_bench_module_imports_another_ones_private_names() -> None:
    private = [f"{m} imports {n} from {t}" for m in MODULES for t, n in _imports(m)
               if n.startswith("_") and not n.startswith("__")]
    assert not private


def test_no_import_cycle_between_bench_modules() -> None:
    cycles = import_cycles(_graph())
    assert not cycles, "import cycles (type-only imports count): " + "; ".join(map(" <-> ".join, cycles))


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    graph = {"runner": {"rowmaker"}, "rowmaker": {"summary"}, "summary": {"runner"}, "plot": {"runner"}}
    assert import_cycles(graph) == [["rowmaker", "runner", "summary"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_the_experiments_are_not_in_the_package() -> None:
    """python -m tools.<name> in a checkout (tests/tools)."""
    for name in ("starve", "starve_calls", "timeline", "enqueue", "scaleout", "shipped", "kernels"):
        assert f"mpiring.bench.{name}" not in MODULES, name
    assert not (BENCH / "csrc").exists() and not (BENCH / "peers").exists()


# -- algorithm names come from the table ---------------------------------------------------------


def test_every_row_and_rival_has_a_legend_name() -> None:
    for row in algorithms.rows():
        name = plot_style.style_of(row.name)[0]
        assert name.startswith("mpiring ") or row.baseline, (row.name, name)
    for name in rivals.names():
        assert name in plot_style.STYLES
    assert plot_style.style_of("a-new-row")[0] == "a-new-row"  # neither a row nor a rival


def test_the_baselines_lines_of_other_collectives_are_named_from_the_table() -> None:
    label = plot_style.series_label
    assert label("nccl", "-", "out", "single", REDUCE_SCATTER) == "NCCL Reduce_scatter_block"
    assert label("mpi", "-", "in", "single", ALLGATHER) == "MPI.Allgather in-place"
    assert label("nccl", "-", "out", "single", ALLREDUCE) == "NCCL allreduce"
    assert label("ring", "-", "out", "single", ALLGATHER) == "mpiring ring"
    nccl_rows = [r.name for r in algorithms.rows() if r.nccl and r.runner(algorithms.Collective.ALLGATHER)]
    assert all(plot_style.baseline_prefix(n, ALLGATHER) == "NCCL " for n in nccl_rows) and nccl_rows


def test_the_nccl_channel_caps_follow_the_tables_nccl_rows() -> None:
    for row in algorithms.rows():
        caps = overlap.nccl_caps(row.name)
        assert bool(caps) == row.nccl, row.name
        if row.name in overlap.NCCL_SEND_RECV:
            assert caps[0] == "NCCL_MAX_P2P_NCHANNELS"
    assert overlap.NCCL_SEND_RECV <= {r.name for r in algorithms.rows() if r.nccl}
    assert overlap.nccl_caps("torch") == () and overlap.nccl_caps(algorithms.AUTO) == ()


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_bench_module_has_a_docstring(name: str) -> None:
    assert ast.get_docstring(ast.parse(MODULES[name].read_text(encoding="utf-8"))), name
