"""GPU tests: skipped cleanly without CuPy or a GPU; run them with
``mpirun -n 2|4 python -m pytest --with-mpi tests/gpu`` on a multi-GPU node."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

cupy = pytest.importorskip("cupy")

from mpiring import cuda  # noqa: E402

if not cuda.available():
    pytest.skip("no CUDA GPU visible", allow_module_level=True)
