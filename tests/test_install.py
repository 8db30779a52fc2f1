"""Installing mpiring (issue 30 items 2 and 4): the hints name commands that work (mpiring is not
on the package index), from one function; the extras they name exist; the README's main-job
line installs what running needs and no developer tools; the CUDA extras bring the CUDA
libraries CuPy loads, of one CUDA major, so that each goes with the ``nvrtc`` extra."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from mpiring.core import install
from mpiring.core.install import pip_install

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
    "optional-dependencies"]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def names(extra: str) -> set[str]:
    return {Requirement(r).name.lower() for r in EXTRAS[extra]}


def extras_of(command: str) -> list[str]:
    """The extras of the first ``pip install ... '.[a,b]'`` in ``command``."""
    found = re.search(r"pip install -e '\.\[([a-z0-9,]+)\]'", command)
    assert found, f"no pip install -e '.[...]' in {command!r}"
    return found.group(1).split(",")


def test_the_hints_know_exactly_the_extras_of_pyproject() -> None:
    assert set(EXTRAS) == install.EXTRAS
    assert set(install.CUDA_EXTRAS.values()) <= install.EXTRAS
    with pytest.raises(ValueError, match="no such extra of mpiring: cuda11"):
        pip_install("cuda11")


def test_the_main_job_installs_no_developer_tools() -> None:
    """The README's main-job line (install, then benchmark) and its test line (with ``test``)."""
    main = next(line for line in README.splitlines() if "mpiexec -n 4 python -m mpiring.bench" in line)
    test = next(line for line in README.splitlines() if line.startswith("python -m pip install")
                and "pytest" in line)
    tools = names("test")
    assert {"pytest", "hypothesis", "ruff", "mypy"} <= tools
    for extra in extras_of(main):
        assert extra in EXTRAS and not names(extra) & tools, f"the main job's extra {extra} brings test tools"
    assert "bench" in extras_of(main) and "test" not in extras_of(main)
    assert "test" in extras_of(test)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "test" in extras_of(ci.replace("-q -e", "-e")), ".ci/run must install the test extra"


def test_the_docs_name_only_existing_extras_and_never_the_index() -> None:
    """Every install command of the README and the docs: from the checkout, existing extras."""
    pages = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
             for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]}
    for page, text in pages.items():
        assert "mpiring[" not in text, f"{page} names mpiring[...], which is not on the package index"
        for group in re.findall(r"'\.\[([a-z0-9,]+)\]'", text):
            unknown = set(group.split(",")) - set(EXTRAS)
            assert not unknown, f"{page}: no such extra {sorted(unknown)}"


def test_no_hint_is_written_by_hand() -> None:
    """mpiring's own modules build every pip command with mpiring.core.install.pip_install."""
    hand = [f"{p.relative_to(ROOT)}: {line.strip()}"
            for p in sorted((ROOT / "mpiring").rglob("*.py")) if p.name != "install.py"
            for line in p.read_text(encoding="utf-8").splitlines()
            if re.search(r"mpiring\[|pip install[^\"']*['\"]?\.\[", line)]
    assert not hand, "\n".join(hand)


def test_cuda_hints_name_both_extras_with_their_major() -> None:
    from mpiring import cuda

    text = cuda.install_hint()
    assert f"{pip_install('cuda12')} (CUDA 12)" in text and f"{pip_install('cuda13')} (CUDA 13)" in text


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    """A copy of mpiring installed into site-packages (not imported from a checkout) for which
    pip recorded ``direct_url`` (None: installed from an index)."""
    monkeypatch.setattr(install, "CHECKOUT", tmp_path / "site-packages")

    def use(direct_url: dict | None) -> None:
        text = None if direct_url is None else json.dumps(direct_url)
        dist = SimpleNamespace(read_text=lambda name: text if name == "direct_url.json" else None)
        monkeypatch.setattr(install.importlib.metadata, "distribution", lambda name: dist)
        install.source.cache_clear()
    yield use
    install.source.cache_clear()


def test_a_checkout_is_named_by_its_folder(tmp_path, monkeypatch) -> None:
    """Imported from a checkout (an editable install, or the checkout on sys.path), whatever
    metadata lies around (a stale mpiring.egg-info in the checkout has no direct_url.json)."""
    folder = tmp_path / "my mpiring"
    (folder / "mpiring").mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[project]\nname = 'mpiring'\n")
    (folder / "mpiring" / "__init__.py").write_text("")
    monkeypatch.setattr(install, "CHECKOUT", folder)
    install.source.cache_clear()
    try:
        assert pip_install("cuda13") == f"pip install -e {shlex.quote(str(folder) + '[cuda13]')}"
        assert shlex.split(pip_install("cuda13"))[-1] == f"{folder}[cuda13]"  # the space survives
        monkeypatch.chdir(folder)
        assert pip_install("cuda12", "bench") == "pip install -e '.[cuda12,bench]'"
    finally:
        install.source.cache_clear()


def test_an_installed_copy_is_named_by_where_pip_took_it_from(recorded, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    recorded({"url": "file:///srv/mpiring", "dir_info": {}})
    assert pip_install("mpi") == "pip install '/srv/mpiring[mpi]'"
    recorded({"url": "file:///srv/mpiring", "dir_info": {"editable": True}})
    assert pip_install("mpi") == "pip install -e '/srv/mpiring[mpi]'"
    recorded({"url": "https://example.org/mpiring.git", "vcs_info": {"vcs": "git", "commit_id": "abc"}})
    assert pip_install("mpi") == "pip install 'mpiring[mpi] @ git+https://example.org/mpiring.git@abc'"
    recorded({"url": "file:///w/mpiring-0.2.0-py3-none-any.whl", "archive_info": {}})
    assert pip_install("mpi") == "pip install 'mpiring[mpi] @ file:///w/mpiring-0.2.0-py3-none-any.whl'"
    recorded(None)  # pip installed it from an index: it is there
    assert pip_install("mpi") == "pip install 'mpiring[mpi]'"


def test_this_installation_is_named_as_it_is() -> None:
    """Here (CI, a developer): an editable install of this checkout."""
    install.source.cache_clear()
    where, editable = install.source()
    assert editable and Path(where).resolve() == ROOT


def test_each_cuda_extra_brings_the_libraries_cupy_loads_of_its_major() -> None:
    """CuPy >= 14 links the CUDA runtime statically and loads NVRTC, NCCL, cuRAND and cuBLAS from
    these wheels (cuda-pathfinder): mpiring's kernels, the nccl rows, the bench's inputs and GEMMs."""
    want = {"cuda12": {"cupy-cuda12x", "cuda-bindings", "nvidia-cuda-nvrtc-cu12", "nvidia-nccl-cu12",
                       "nvidia-curand-cu12", "nvidia-cublas-cu12"},
            "cuda13": {"cupy-cuda13x", "cuda-bindings", "nvidia-cuda-nvrtc", "nvidia-nccl-cu13",
                       "nvidia-curand", "nvidia-cublas"}}
    for extra, packages in want.items():
        assert names(extra) == packages, extra
        cupy = next(Requirement(r) for r in EXTRAS[extra] if r.startswith("cupy"))
        # pathfinder: CuPy 14; a disk cache of one-kernel modules (mpiring.cuda.direct_kernels): 14.1
        assert "14.1" in cupy.specifier and "14.0" not in cupy.specifier
    for extra, major in (("cuda12", 12), ("cuda13", 13)):
        bindings = next(Requirement(r) for r in EXTRAS[extra] if r.startswith("cuda-bindings"))
        assert f"{major}.9" in bindings.specifier and f"{major + 1}.0" not in bindings.specifier
        assert f"{major - 1}.9" not in bindings.specifier


def test_nvrtc_goes_with_either_cuda_extra() -> None:
    """``.[cuda12,nvrtc]`` could not be resolved (cuda-bindings <13 against >=13). The nvrtc extra
    now asks cuda-bindings for the NVRTC of its own major (its ``all`` extra), pinning none."""
    (only,) = [Requirement(r) for r in EXTRAS["nvrtc"]]
    assert only.name == "cuda-bindings" and only.extras == {"all"}
    assert not names("nvrtc") & {"nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"}
    for extra in ("cuda12", "cuda13"):
        bindings = next(Requirement(r) for r in EXTRAS[extra] if r.startswith("cuda-bindings"))
        both = SpecifierSet(str(bindings.specifier) + "," + str(only.specifier))
        assert any(v in both for v in ("12.9.0", "13.5.0")), f"{extra} and nvrtc pin disjoint cuda-bindings"
