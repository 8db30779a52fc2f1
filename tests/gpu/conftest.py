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

from gpu_helpers import NCCL_ROWS, SHARED_GPU  # noqa: E402


@pytest.fixture(autouse=True)
def _nccl_rows_need_own_gpus(request):
    """Several ranks on one GPU (MPIRING_SHARE_GPU=1, under MPS): NCCL refuses that, so a test
    of an NCCL row is skipped there, with the reason (the API's refusal has its own test)."""
    callspec = getattr(request.node, "callspec", None)
    algo = callspec.params.get("algo") if callspec is not None else None
    if SHARED_GPU and isinstance(algo, str) and algo in NCCL_ROWS:
        pytest.skip("NCCL refuses several ranks on one GPU (MPIRING_SHARE_GPU=1)")
