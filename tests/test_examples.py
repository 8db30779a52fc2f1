"""The examples are real programs (issue 30 item 7): each one runs under mpiexec, checks its own
results and prints one line on rank 0. The numpy one runs here on every CI run; the torch one
runs on CPU tensors where torch is installed, and on GPUs in the GPU jobs; the CuPy one needs
GPUs. Every example at least compiles here."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mpiring import cuda

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
MPI_ENV_PREFIXES = ("PMI_", "PMIX_", "MPIR_", "HYDRA_", "MPICH_INTERFACE", "OMPI_")  # this process's MPI
KEEP = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_MCA_")  # the user's Open MPI settings (root on a GPU node)


def gpus() -> int:
    """The GPUs CuPy sees here (0 without CuPy or GPUs)."""
    if not cuda.available():
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDeviceCount())


def run_example(name: str, ranks: int, limit: float = 240.0) -> subprocess.CompletedProcess[str]:
    """``mpiexec -n ranks python examples/name`` in a session of its own, killed whole after
    ``limit`` seconds (a hung rank fails the test instead of stalling the run)."""
    beside = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(beside) if beside.exists() else shutil.which("mpiexec")
    if mpiexec is None:
        pytest.fail("no mpiexec next to this Python nor on PATH: install the mpi extra", pytrace=False)
    env = {k: v for k, v in os.environ.items() if not k.startswith(MPI_ENV_PREFIXES) or k.startswith(KEEP)}
    child = subprocess.Popen([mpiexec, "-n", str(ranks), sys.executable, str(ROOT / "examples" / name)],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        out, err = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        pytest.fail(f"{name} on {ranks} ranks ran past {limit} s:\n{out}\n{err}", pytrace=False)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_compiles(path: Path, tmp_path: Path) -> None:
    py_compile.compile(str(path), cfile=str(tmp_path / "x.pyc"), doraise=True)


def test_the_numpy_example_runs_on_two_ranks() -> None:
    done = run_example("numpy_allreduce.py", 2)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "numpy_allreduce: sum, max and avg of 1048576 float64 on 2 rank(s): exact"], done.stdout


def test_the_torch_example_runs() -> None:
    """On CPU tensors without GPUs (2 ranks), on CUDA tensors with them (a rank per GPU, 2 at most)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (not in CI): the torch example runs in the GPU jobs")
    ranks = min(2, gpus()) or 2
    done = run_example("torch_allreduce.py", ranks, limit=400.0)
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith(f"torch_allreduce: sum, max and avg of 1048576 elements on {ranks} rank(s)"), line
    assert line.endswith("tensors: exact"), line


def test_the_cupy_example_runs_on_gpus() -> None:
    """A rank per GPU, 2 at most."""
    ranks = min(2, gpus())
    if not ranks:
        pytest.skip(f"no GPU here: {cuda.unavailable_reason()}")
    done = run_example("cupy_allreduce.py", ranks)
    assert done.returncode == 0, done.stderr
    want = f"cupy_allreduce: sum, max and avg of 16777216 float32 on {ranks} GPU(s)"
    assert done.stdout.startswith(want), done.stdout
