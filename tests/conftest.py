"""Suite-wide hooks: tests under tests/gpu/ (and gpu-marked tests) need CuPy and a CUDA GPU.

tests/gpu/conftest.py skips its whole directory without CuPy; this catches the rest.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# CI explores the same examples on every run (no flaky reds); locally hypothesis keeps exploring.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

GPU_DIR = Path(__file__).parent / "gpu"
HAVE_CUPY = importlib.util.find_spec("cupy") is not None


def _gpu_count() -> int:
    """CUDA devices CuPy sees; 0 when CuPy or a driver is missing."""
    if not HAVE_CUPY:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device, broken install
        return 0


def pytest_addoption(parser: pytest.Parser) -> None:
    """The GPU fuzz test's budget and seed (tests/gpu/test_gpu_fuzz.py)."""
    parser.addoption("--fuzz-seconds", type=float, default=60.0,
                     help="seconds the GPU fuzz test draws random cases for (default 60)")
    parser.addoption("--fuzz-seed", type=int, default=None,
                     help="the GPU fuzz test's seed (default: a new one each run, printed on failure)")
    parser.addoption("--fuzz-rows", default=None,
                     help="the GPU fuzz test's rows, comma-separated (default: every GPU row and auto)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip GPU tests where no GPU can run them."""
    gpu_items = [item for item in items
                 if item.get_closest_marker("gpu") is not None or GPU_DIR in item.path.parents]
    if not gpu_items or _gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs CuPy and a CUDA GPU")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _empty_tuning_dir(tmp_path_factory: pytest.TempPathFactory):
    """auto's per-user tables (mpiring.auto.tuning) come from an empty directory of the test run's
    own: tables tuned into ~/.cache on this machine must not change what the tests see, nor may
    a test write there. Tests that need a user table set MPIRING_TUNING_DIR themselves."""
    patch = pytest.MonkeyPatch()
    patch.setenv("MPIRING_TUNING_DIR", str(tmp_path_factory.mktemp("user-tuning")))
    yield
    patch.undo()


@pytest.fixture(scope="session")
def nvrtc() -> Any:
    """NVRTC's Python bindings (the kernels' compile tests); skip without them, or fail where CI
    requires them (``MPIRING_REQUIRE_NVRTC=1``)."""
    try:
        from cuda.bindings import nvrtc as module
    except ImportError as exc:
        if os.environ.get("MPIRING_REQUIRE_NVRTC") == "1":
            pytest.fail(f"MPIRING_REQUIRE_NVRTC=1 but cuda.bindings.nvrtc cannot be imported: {exc}")
        pytest.skip(f"cuda.bindings.nvrtc is not installed ({exc}); pip install -e '.[nvrtc]'")
    return module
