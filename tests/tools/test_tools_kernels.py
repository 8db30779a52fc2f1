"""The tools' own measuring kernels (``tools/csrc``: the gate and the empty kernel of
``tools.enqueue``, the folds of ``tools.starve``) compile on a machine without a GPU: NVRTC for
sm_90, every warning an error, every extern "C" kernel their launchers look up by name present
under that plain name. And every ``.cu`` file there is listed in ``tools.kernels.KERNELS``.

Without ``cuda.bindings.nvrtc`` the compile test skips, unless ``MPIRING_REQUIRE_NVRTC=1`` (CI).
"""

from __future__ import annotations

from typing import Any

import pytest
from nvrtc_support import compile_source

from tools import kernels


@pytest.mark.parametrize("name", sorted(kernels.KERNELS))
def test_every_tools_kernel_source_compiles(nvrtc: Any, name: str) -> None:
    names = list(kernels.KERNELS[name])
    compiled, log, lowered = compile_source(nvrtc, kernels.source(name), name, names)
    assert compiled, f"{name} failed to compile:\n{log}"
    assert not log.strip(), f"{name} compiled with messages:\n{log}"
    assert lowered == {k: k for k in names}  # extern "C": looked up by their plain names


def test_the_kernel_sources_are_known() -> None:
    """Every .cu file of tools/csrc says which kernels it provides; an unknown name is refused."""
    assert sorted(p.name for p in kernels.CSRC.glob("*.cu")) == sorted(kernels.KERNELS)
    with pytest.raises(KeyError, match="no tools kernel source 'fold.cu'"):
        kernels.source("fold.cu")
