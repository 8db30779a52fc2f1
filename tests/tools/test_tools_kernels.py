"""The tools' own measuring kernels (``tools/csrc``: the gate and the empty kernel of
``tools.enqueue``, the folds of ``tools.starve``) compile on a machine without a GPU: NVRTC for
sm_90, every warning an error, every extern "C" kernel their launchers look up by name present
under that plain name. And every ``.cu`` file there is listed in ``tools.kernels.KERNELS``.

Without ``cuda.bindings.nvrtc`` the compile test skips, unless ``MPIRING_REQUIRE_NVRTC=1`` (CI).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from mpiring.cuda import sources
from tools import kernels

ARCH = "sm_90"


@pytest.fixture(scope="module")
def nvrtc() -> Any:
    try:
        from cuda.bindings import nvrtc as module
    except ImportError as exc:
        if os.environ.get("MPIRING_REQUIRE_NVRTC") == "1":
            pytest.fail(f"MPIRING_REQUIRE_NVRTC=1 but cuda.bindings.nvrtc cannot be imported: {exc}")
        pytest.skip(f"cuda.bindings.nvrtc is not installed ({exc}); pip install -e '.[nvrtc]'")
    return module


def compile_kernels(nvrtc: Any, name: str, names: list[str]) -> tuple[bool, str, dict[str, str]]:
    """Compile ``tools/csrc/<name>`` as CuPy would (warnings as errors) with ``names`` as name
    expressions: (compiled, the compiler's log, each name's lowered symbol)."""

    def ok(result: tuple) -> Any:
        status, *values = result
        assert status == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"NVRTC call failed: {status}"
        return values[0] if len(values) == 1 else values

    prog = ok(nvrtc.nvrtcCreateProgram(kernels.source(name).encode(), name.encode(), 0, [], []))
    try:
        for kernel in names:
            ok(nvrtc.nvrtcAddNameExpression(prog, kernel.encode()))
        options = [f"--gpu-architecture={ARCH}", *sources.OPTIONS, "-ftz=true",
                   "--device-as-default-execution-space", "-Werror=all-warnings"]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        log = b" " * ok(nvrtc.nvrtcGetProgramLogSize(prog))
        ok(nvrtc.nvrtcGetProgramLog(prog, log))
        text = log.rstrip(b"\0 ").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, text, {}
        return True, text, {k: ok(nvrtc.nvrtcGetLoweredName(prog, k.encode())).decode() for k in names}
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@pytest.mark.parametrize("name", sorted(kernels.KERNELS))
def test_every_tools_kernel_source_compiles(nvrtc: Any, name: str) -> None:
    names = list(kernels.KERNELS[name])
    compiled, log, lowered = compile_kernels(nvrtc, name, names)
    assert compiled, f"{name} failed to compile:\n{log}"
    assert not log.strip(), f"{name} compiled with messages:\n{log}"
    assert lowered == {k: k for k in names}  # extern "C": looked up by their plain names


def test_the_kernel_sources_are_known() -> None:
    """Every .cu file of tools/csrc says which kernels it provides; an unknown name is refused."""
    assert sorted(p.name for p in kernels.CSRC.glob("*.cu")) == sorted(kernels.KERNELS)
    with pytest.raises(KeyError, match="no tools kernel source 'fold.cu'"):
        kernels.source("fold.cu")
