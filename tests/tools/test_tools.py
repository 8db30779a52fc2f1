"""The repository's tools stay runnable outside the package: each says in its docstring how it
is run (``python -m tools.<name>`` from the root), each starts that way (``--help``), their
kernels live in .cu files; and the parts that need no GPU work: the scale-out model against
the committed results (figure included), and starve's variants and quantile."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "tools").glob("*.py") if p.stem != "__init__")
# the ones with a main()
COMMANDS = ("ab_summary", "barrier_cost", "board_wait", "build_hotpath", "ce_patterns", "enqueue",
            "host_anatomy", "kernel_resources", "replay_bench", "scaleout", "shipped", "soak_faults",
            "starve", "streamprog_bench", "targets", "thin_fatbin", "timeline")


def test_the_tools_are_the_experiments_that_left_the_package() -> None:
    assert MODULES == [
        "ab_summary", "barrier_cost", "board_wait", "build_hotpath", "ce_patterns", "enqueue", "host_anatomy",
        "kernel_resources", "kernels", "launch_floor", "replay_bench", "scaleout", "shipped", "soak_faults",
        "starve", "starve_calls", "streamprog_bench", "targets", "thin_fatbin", "timeline"]
    for name in MODULES:
        assert not (ROOT / "mpiring" / "bench" / f"{name}.py").exists(), name
    assert not (ROOT / "mpiring" / "bench" / "csrc").exists()


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_says_how_it_is_run_and_starts_that_way(name: str, tool) -> None:
    module = importlib.import_module(f"tools.{name}")
    assert f"python -m tools.{name}" in (module.__doc__ or ""), f"tools/{name}.py: say how it runs"
    assert callable(module.main)
    done = tool(name, ["--help"], limit=120)
    assert done.returncode == 0, done.stderr
    assert f"usage: python -m tools.{name}" in done.stdout, done.stdout


def test_the_package_docstring_lists_every_command() -> None:
    import tools

    for name in COMMANDS:
        assert f"python -m tools.{name}" in (tools.__doc__ or ""), name


def test_no_kernel_is_written_inside_python() -> None:
    """Kernels are .cu files (tools/csrc), which tests/tools/test_tools_kernels.py compiles."""
    inline = [p.name for p in (ROOT / "tools").glob("*.py") if "__global__" in p.read_text(encoding="utf-8")]
    assert not inline


# Private attributes of mpiring's objects that a tool sets: none (the library has public ways,
# e.g. Communicator(replay=False) for enqueue's full path).
PRIVATE_SETS: set[tuple[str, str]] = set()


def test_the_tools_use_no_private_name_of_mpiring_but_the_listed_ones() -> None:
    """They stand on mpiring's public modules: no private name imported, and no private
    attribute set on another object but those of :data:`PRIVATE_SETS`."""
    imported, set_ = [], set()
    for path in sorted((ROOT / "tools").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mpiring"):
                imported += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                             if a.name.startswith("_")]
            if isinstance(node, ast.Assign):
                set_ |= {(path.name, t.attr) for t in node.targets if isinstance(t, ast.Attribute)
                         and t.attr.startswith("_") and not (isinstance(t.value, ast.Name)
                                                             and t.value.id == "self")}
    assert not imported
    assert set_ == PRIVATE_SETS


# -- scaleout: the cost model against the committed results ---------------------------------------


def test_scaleout_fits_the_committed_results(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from tools import scaleout

    pytest.importorskip("matplotlib")
    figure = tmp_path / "scale-out.png"
    assert scaleout.main(["--node", str(ROOT / "results/h200x2.csv"),
                          "--virtual", str(ROOT / "results/h200x2-hier.csv"), "--plot", str(figure)]) == 0
    out = capsys.readouterr().out
    assert "NVLink ring fitted on 2 ranks" in out and "| 1 GiB |" in out
    assert "hier, 2 virtual nodes of 1 GPU" in out and f"wrote {figure}" in out
    assert figure.read_bytes().startswith(b"\x89PNG")


def test_scaleout_compares_only_measured_sizes() -> None:
    from tools import scaleout

    measured = {1 << 20: 2e-4, 1 << 30: 3e-3}
    rows = scaleout.compare(measured, lambda s: measured[s] * 1.1)
    assert [r[0] for r in rows] == [1 << 20, 1 << 30]
    assert all(abs(r[3] - 0.1) < 1e-9 for r in rows)
    assert "| 1 MiB | 220 us | 200 us | +10% |" in scaleout.table("t", rows)


# -- starve: what needs no GPU ---------------------------------------------------------------------


def test_starve_variants_and_quantile() -> None:
    from tools import starve, starve_calls

    assert starve.quantile([5.0, 1.0, 3.0, 2.0, 4.0], 0.9) == 5.0
    assert starve.quantile([1.0, 2.0], 0.0) == 1.0
    variants = starve.default_variants(132)
    assert variants[0].grid == 4 * 132 and len({v.label for v in variants}) == len(variants)
    assert "green 16 SMs" in starve.FoldVariant(16, True, 16).label
    calls = starve_calls.default_call_variants(132)
    assert len(calls) == 8 and {c.persistent for c in calls} == {True, False}


# -- build_hotpath: the compiled replay for a checkout used from PYTHONPATH -----------------------


def test_build_hotpath_builds_an_importable_extension(tmp_path: Path) -> None:
    import importlib.util
    import shutil
    import sysconfig

    from tools import build_hotpath

    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    out = tmp_path / ("_hotpath" + sysconfig.get_config_var("EXT_SUFFIX"))
    assert build_hotpath.main(["--output", str(out)]) == 0
    spec = importlib.util.spec_from_file_location("_hotpath", out)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (module.FALLBACK, module.REPLAYED, module.REPLAYED_REPORT, module.LAUNCH_FAILED) == (0, 1, 2, 3)
    assert module.noop_launch_address() > 0


def test_build_hotpath_names_a_missing_compiler(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import build_hotpath

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert build_hotpath.main(["--output", str(tmp_path / "x.so")]) == 1
    assert "no C compiler" in capsys.readouterr().err
