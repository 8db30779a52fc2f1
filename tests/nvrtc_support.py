"""NVRTC for the compile tests of mpiring's kernels (tests/test_cuda_sources.py) and the tools'
(tests/tools/test_tools_kernels.py): compile a source as CuPy's RawModule would, no GPU needed."""

from __future__ import annotations

from typing import Any

from mpiring.cuda import sources
from tools.kernel_resources import ARCH, compile_program


def compile_source(nvrtc: Any, code: str, name: str,
                   expressions: list[str]) -> tuple[bool, str, dict[str, str]]:
    """Compile ``code`` as CuPy would (warnings as errors) with ``expressions`` added.

    Returns (compiled, the compiler's log, each expression's lowered name when compiled).
    """
    # The options of CuPy's RawModule, every warning an error, and --split-compile=0 to
    # optimize on every core (direct.cu has 48 instantiations).
    options = [*sources.rawmodule_options(ARCH), "-Werror=all-warnings", "--split-compile=0"]
    return compile_program(nvrtc, code, name, expressions, options)
