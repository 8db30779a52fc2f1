"""NVRTC for the compile tests of mpiring's kernels (tests/test_cuda_sources.py) and the tools'
(tests/tools/test_tools_kernels.py): compile a source as CuPy's RawModule would, no GPU needed."""

from __future__ import annotations

from typing import Any

from mpiring.cuda import sources

ARCH = "sm_90"


def _ok(nvrtc: Any, result: tuple) -> Any:
    """The values of an NVRTC call's result tuple, raising on a failed status."""
    status, *values = result
    if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise RuntimeError(f"NVRTC call failed: {status}")
    return values[0] if len(values) == 1 else values


def compile_source(nvrtc: Any, code: str, name: str,
                   expressions: list[str]) -> tuple[bool, str, dict[str, str]]:
    """Compile ``code`` as CuPy would (warnings as errors) with ``expressions`` added.

    Returns (compiled, the compiler's log, each expression's lowered name when compiled).
    """
    prog = _ok(nvrtc, nvrtc.nvrtcCreateProgram(code.encode(), name.encode(), 0, [], []))
    try:
        for expr in expressions:
            _ok(nvrtc, nvrtc.nvrtcAddNameExpression(prog, expr.encode()))
        # The options of CuPy's RawModule, every warning an error, and --split-compile=0 to
        # optimize on every core (direct.cu has 48 instantiations).
        options = [*sources.rawmodule_options(ARCH), "-Werror=all-warnings", "--split-compile=0"]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        size = _ok(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * size
        _ok(nvrtc, nvrtc.nvrtcGetProgramLog(prog, log))
        log_text = log.rstrip(b"\0 ").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return False, log_text, {}
        lowered = {expr: _ok(nvrtc, nvrtc.nvrtcGetLoweredName(prog, expr.encode())).decode()
                   for expr in expressions}
        return True, log_text, lowered
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
