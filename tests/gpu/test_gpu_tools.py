"""The repository's GPU tools (``tools/``) run as their users start them: a job of their own on
every GPU of the machine, one rank per GPU. These tests launch ranks themselves, so they run
serially (``python -m pytest tests/gpu/test_gpu_tools.py``) and skip under ``--with-mpi``."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import cupy
import pytest
from gpu_launch import run

pytestmark = pytest.mark.mpi_skip

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tools/ is not installed


def test_enqueue_times_every_row_on_every_gpu() -> None:
    """``mpirun -n <GPUs> python -m tools.enqueue``: each rank's arrays on its own GPU (made
    after its communicators chose it), so no row is refused, and the report and the profile of
    the calls as checked by default come out of one job that ends."""
    ranks = cupy.cuda.runtime.getDeviceCount()
    if ranks < 2:
        pytest.skip("needs 2 GPUs")
    if os.environ.get("MPIRING_SHARE_GPU"):
        pytest.skip("one rank per GPU: the tool's job is what this tests")
    algos = ["oneshot", "oneshot-ll", "twoshot", "nccl"]
    argv = [sys.executable, "-m", "tools.enqueue", "-b", "8K", "--algo", ",".join(algos),
            "--calls", "40", "--rounds", "2", "--profile", "oneshot", "--profile-check", "gpu"]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    status, out = run(ranks, argv, {"PYTHONPATH": path}, limit=240)
    assert status == 0, f"exit status {status}:\n{out}"
    refused = [x for x in out.splitlines() if "n/a" in x]
    no_nccl = [x for x in refused if x.startswith("# nccl: n/a") and "unavailable" in x]
    assert refused == no_nccl, out  # only NCCL may be missing, and then the tool says so
    assert f"8 KiB float32 sum, {ranks} rank(s), GPU arrays, gated" in out, out
    for algo in algos:
        if algo == "nccl" and no_nccl:
            continue
        for case in (f"{algo} (check gpu)", f"{algo} (check gpu, persistent Start)"):
            line = next((x for x in out.splitlines() if x.strip().startswith(case)), None)
            assert line is not None and re.search(r"\d+\.\d+ us", line), f"{case}:\n{out}"
    assert "# cProfile of 40 calls of oneshot (check gpu)" in out, out


@pytest.mark.parametrize("algo", ["oneshot", "oneshot-ll"])
def test_host_anatomy_times_every_piece_on_every_gpu(algo: str) -> None:
    """``mpirun -n <GPUs> python -m tools.host_anatomy --algo ALGO``: every piece and every
    difference, one column per rank, from one job that ends."""
    from tools import host_anatomy

    ranks = cupy.cuda.runtime.getDeviceCount()
    if ranks < 2:
        pytest.skip("needs 2 GPUs")
    if os.environ.get("MPIRING_SHARE_GPU"):
        pytest.skip("one rank per GPU: the tool's job is what this tests")
    argv = [sys.executable, "-m", "tools.host_anatomy", "--algo", algo, "--calls", "40", "--rounds", "2"]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    status, out = run(ranks, argv, {"PYTHONPATH": path}, limit=240)
    assert status == 0, f"exit status {status}:\n{out}"
    assert f"{algo}, 8 KiB float32 sum, {ranks} rank(s)" in out, out
    labels = [*host_anatomy.CASES, *(label for label, _ in host_anatomy.DIFFERENCES)]
    for label in labels:
        line = next((x for x in out.splitlines() if x.strip().startswith(label)), None)
        assert line is not None, out
        values = line.strip()[len(label):].split()  # one per rank
        assert len(values) == ranks and all(re.fullmatch(r"[+-]?\d+", v) for v in values), line
