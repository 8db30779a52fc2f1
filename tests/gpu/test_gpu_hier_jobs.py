"""The hierarchical allreduce on 4 ranks over 2 GPUs as 2 virtual nodes of 2 (a job of its own:
more ranks than GPUs, rails mapped so no NCCL communicator holds one GPU twice). Serial:
``python -m pytest tests/gpu/test_gpu_hier_jobs.py`` on a node with 2+ GPUs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gpu_launch import run

import mpiring

pytestmark = pytest.mark.mpi_skip

SCRIPT = Path(__file__).parent / "scripts" / "hier_2x2.py"
# The script's calls: 5 dtypes (3 floating) x every op (avg on floating types only) x 5 counts x
# in and out of place. Counted here so that a script that silently ran fewer calls fails.
OPS = len(mpiring.Op)
CALLS = (3 * OPS + 2 * (OPS - 1)) * 5 * 2


def test_two_by_two_on_two_gpus() -> None:
    """Every dtype and op, 1 element to 64 MiB, in and out of place, through hier (auto's pick
    across nodes): every element exact on every rank."""
    code, output = run(4, [sys.executable, str(SCRIPT)],
                       {"MPIRING_VIRTUAL_NODES": "2", "PYTHONUNBUFFERED": "1"}, limit=400.0)
    assert code == 0 and f"HIER 2x2 OK {CALLS}\n" in output, output[-4000:]
