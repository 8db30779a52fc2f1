"""Set-up errors that need an mpirun of their own (GPU visibility is fixed at process start):
GPUs hidden per rank, and two ranks on one GPU. These tests launch ranks themselves, so they
run serially (``python -m pytest tests/gpu/test_gpu_setup.py``) and skip under ``--with-mpi``."""

from __future__ import annotations

import os
import subprocess
import sys

import cupy
import pytest
from gpu_launch import launcher

pytestmark = pytest.mark.mpi_skip

# Each rank sets its own CUDA_VISIBLE_DEVICES (if asked) before anything initialises CUDA.
PROBE = r"""
import os, sys
if os.environ.get("HIDE_PER_RANK"):
    local = next(os.environ[k] for k in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                         "PMI_RANK", "SLURM_LOCALID") if k in os.environ)
    os.environ["CUDA_VISIBLE_DEVICES"] = local
from mpi4py import MPI
import mpiring
device = None if os.environ.get("DEVICE", "") == "" else int(os.environ["DEVICE"])
try:
    mpiring.Communicator(MPI.COMM_WORLD, gpu=True, device=device).close()
    print(f"rank {MPI.COMM_WORLD.rank}: NO ERROR", flush=True)
except mpiring.SetupError as err:
    print(f"rank {MPI.COMM_WORLD.rank}: SetupError: {err}", flush=True)
"""


def run_two_ranks(**env: str) -> list[str]:
    """Start 2 ranks of the probe; return each rank's line (a hang fails after 120 s)."""
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs 2 GPUs")
    full_env = {**os.environ, "NCCL_NVLS_ENABLE": "0", **env}
    cmd = launcher() + ["-n", "2"]
    if "--allow-run-as-root" in cmd:  # Open MPI: forward our variables to the ranks
        for name in env:
            cmd += ["-x", name]
    proc = subprocess.run(cmd + [sys.executable, "-c", PROBE], env=full_env, capture_output=True,
                          text=True, timeout=120)
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("rank "))
    assert len(lines) == 2, f"expected a line from each rank:\n{proc.stdout}\n{proc.stderr}"
    return lines


def test_gpus_hidden_per_rank_are_named_with_the_remedy():
    for line in run_two_ranks(HIDE_PER_RANK="1"):
        assert "SetupError" in line and "cannot see GPU" in line, line
        assert "--gpu-bind=none" in line, line


def test_two_ranks_on_one_gpu_by_device_argument():
    for line in run_two_ranks(DEVICE="0"):
        assert "SetupError" in line and "both use GPU" in line, line


def test_two_ranks_sharing_the_only_visible_gpu():
    for line in run_two_ranks(CUDA_VISIBLE_DEVICES="0"):
        assert "SetupError" in line and "both use GPU" in line, line
