"""The toy GPU algorithm (tests/gpu/toy/, run by tests/gpu/test_gpu_toy_algorithm.py) without a
GPU: its kernel compiles with NVRTC as CuPy would compile it, and it is a contributor's row —
its files are its own, and it takes only public names of mpiring."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from nvrtc_support import compile_source

TOY = Path(__file__).resolve().parent / "gpu" / "toy"


def test_the_toy_kernel_compiles(nvrtc: Any) -> None:
    compiled, log, _ = compile_source(nvrtc, (TOY / "toy_sum.cu").read_text(), "toy_sum.cu", [])
    assert compiled, log


def test_the_toy_is_one_cu_file_one_module_and_takes_no_private_name() -> None:
    assert sorted(p.name for p in TOY.iterdir() if p.suffix in (".cu", ".py")) == ["toy_gpu_algorithm.py",
                                                                                  "toy_sum.cu"]
    tree = ast.parse((TOY / "toy_gpu_algorithm.py").read_text())
    taken = [(node.module, a.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
             for a in node.names if (node.module or "").startswith("mpiring")]
    assert taken and not [t for t in taken if t[1].startswith("_") or "._" in (t[0] or "")]
    assert "ROW = Algorithm(" in (TOY / "toy_gpu_algorithm.py").read_text()
