"""The wheel is the product: mpiring with its benchmark (``mpiring/bench``, ``mpiring-bench``,
``mpiring-tune``) and its kernels' CUDA sources, and none of the repository's tools (the
experiments, their kernels) nor anything else of ``tools/``.

Built offline from a copy of the checkout with the installed build backend (``pip wheel
--no-build-isolation``; the test extra brings a setuptools that [build-system] accepts).
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from mpiring.cuda import sources

ROOT = Path(__file__).resolve().parents[2]
TOOLS = sorted(p.stem for p in (ROOT / "tools").glob("*.py") if p.stem != "__init__")
tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def backend_problem() -> str:
    """Why the installed setuptools cannot build the wheel ("" when it can)."""
    wanted = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())
              ["build-system"]["requires"]]
    for req in wanted:
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            return f"{req.name} is not installed"
        if not req.specifier.contains(Version(have), prereleases=True):
            return f"{req.name} {have} does not satisfy {req}"
    return ""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The files of a wheel built from a copy of the checkout (its build leaves nothing here)."""
    problem = backend_problem()
    if problem:
        pytest.skip(f"cannot build the wheel offline: {problem} (pip install -e '.[test]')")
    src = tmp_path_factory.mktemp("checkout")
    # (no extension built in this checkout: the wheel's build must compile its own)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.so")
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("mpiring", "tools"):  # tools/ too: the build must leave it out
        shutil.copytree(ROOT / folder, src / folder, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                           "--no-index", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = out.glob("mpiring-*.whl")
    with zipfile.ZipFile(path) as whl:
        return {name: whl.read(name) for name in whl.namelist()}


def test_the_wheel_holds_the_package_and_no_tool(wheel: dict[str, bytes]) -> None:
    assert TOOLS and {"enqueue", "starve", "timeline", "shipped"} <= set(TOOLS)
    assert not [n for n in wheel if n.startswith("tools/")]
    assert all(n.startswith(("mpiring/", "mpiring-")) for n in wheel), sorted(wheel)
    bench = {n.removeprefix("mpiring/bench/") for n in wheel if n.startswith("mpiring/bench/")}
    assert not {f"{t}.py" for t in TOOLS} & bench, "an experiment is inside the package"
    assert not [n for n in bench if n.startswith("csrc/")]
    assert {"__main__.py", "runner.py", "tune.py", "rivals/__init__.py"} <= bench


def test_the_wheel_holds_the_kernels_sources_and_the_commands(wheel: dict[str, bytes]) -> None:
    assert {f"mpiring/cuda/csrc/{name}" for name in sources.files()} <= set(wheel)
    assert "mpiring/py.typed" in set(wheel)
    assert [n for n in wheel if n.startswith("mpiring/data/tuning-") and n.endswith(".json")]
    (entry_points,) = [v.decode() for n, v in wheel.items() if n.endswith(".dist-info/entry_points.txt")]
    assert "mpiring-bench = mpiring.bench.__main__:main" in entry_points
    assert "mpiring-tune = mpiring.bench.tune:main" in entry_points


def test_the_wheel_holds_the_compiled_replay_where_a_compiler_is(wheel: dict[str, bytes]) -> None:
    """setup.py's optional extension (mpiring.call._hotpath): built by the wheel's build where
    a C compiler exists; elsewhere the wheel is made without it (mpiring replays in Python)."""
    built = [n for n in wheel if n.startswith("mpiring/call/_hotpath") and n.endswith(".so")]
    if shutil.which("gcc") or shutil.which("cc"):
        assert built, sorted(n for n in wheel if n.startswith("mpiring/call/"))
    assert "mpiring/call/hot_replay.py" in wheel


def test_nothing_in_the_package_imports_the_tools() -> None:
    """The package stands alone: no module of mpiring names tools (it is not installed)."""
    import ast

    found = []
    for path in sorted((ROOT / "mpiring").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            found += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "tools"]
    assert not found
