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

from mpi4py import MPI  # noqa: E402

# Each rank on the GPU its communicators will bind (node rank i -> GPU i, mpiring.cuda.device)
# before any test allocates: a test that makes its arrays before its communicator must not put
# them on GPU 0 (which only works where every rank shares one GPU).
_node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
cupy.cuda.Device(_node.rank % cupy.cuda.runtime.getDeviceCount()).use()
_node.Free()

from gpu_helpers import NCCL_ROWS, SHARED_GPU  # noqa: E402


@pytest.fixture(autouse=True)
def _nccl_rows_need_own_gpus(request):
    """Several ranks on one GPU (MPIRING_SHARE_GPU=1, under MPS): NCCL refuses that, so a test
    of an NCCL row is skipped there, with the reason (the API's refusal has its own test)."""
    callspec = getattr(request.node, "callspec", None)
    algo = callspec.params.get("algo") if callspec is not None else None
    if SHARED_GPU and isinstance(algo, str) and algo in NCCL_ROWS:
        pytest.skip("NCCL refuses several ranks on one GPU (MPIRING_SHARE_GPU=1)")
