"""The tests of the repository's ``tools/`` (experiments kept out of the package): the checkout's
root on ``sys.path`` so that ``import tools`` works however pytest was started, and a way to run
a tool as users do, ``python -m tools.<name>`` from the root, alone or under ``mpiexec``.

These tests run in the serial suite (``python -m pytest tests``); a tool's run on several ranks
is a child ``mpiexec`` job, so the MPI suite (``tests/mpi``) holds no tool test.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The MPI environment of this process (a singleton MPI, or a launcher's): a child job of its own
# must not inherit it. The user's Open MPI settings are kept.
MPI_ENV_PREFIXES = ("PMI_", "PMIX_", "MPIR_", "HYDRA_", "MPICH_INTERFACE", "OMPI_")
KEEP = ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_MCA_")


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment without its MPI variables, the checkout on ``PYTHONPATH``
    (a tool run from elsewhere still finds ``tools``), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(MPI_ENV_PREFIXES) or k.startswith(KEEP)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update(extra)
    return env


def mpiexec() -> str:
    """The ``mpiexec`` beside this Python (the mpi extra's MPICH), else the one on ``PATH``."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("no mpiexec next to this Python nor on PATH: install the mpi extra", pytrace=False)
    return found


def run_tool(name: str, args: Sequence[str] = (), ranks: int | None = None, cwd: Path = ROOT,
             limit: float = 240.0) -> subprocess.CompletedProcess[str]:
    """``[mpiexec -n ranks] python -m tools.<name> args`` in a session of its own, killed whole
    after ``limit`` seconds (a hung rank fails the test instead of stalling the run)."""
    command = [sys.executable, "-m", f"tools.{name}", *args]
    if ranks is not None:
        command = [mpiexec(), "-n", str(ranks), *command]
    return _run(command, cwd, child_env(), limit)


def run_job(script: str, args: Sequence[str] = (), limit: float = 240.0,
            **env: str) -> subprocess.CompletedProcess[str]:
    """``bash jobs/<script> args`` with ``env`` added (its ``run`` starts ``mpiexec`` beside this
    Python, its ``python3`` is this one), in a session of its own, killed whole after ``limit`` s."""
    command = ["bash", str(ROOT / "jobs" / script), *args]
    return _run(command, ROOT, child_env(MPIRUN=mpiexec(), PYTHON=sys.executable, **env), limit)


def _run(command: list[str], cwd: Path, env: dict[str, str],
         limit: float) -> subprocess.CompletedProcess[str]:
    child = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = child.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, err = child.communicate()
        pytest.fail(f"{' '.join(command)} ran past {limit} s:\n{out}\n{err}", pytrace=False)
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def _serial_only() -> None:
    from mpi4py import MPI

    if MPI.COMM_WORLD.size > 1:
        pytest.skip("starts jobs of its own: run it in the serial suite")


@pytest.fixture
def tool():
    """:func:`run_tool`: ``tool("enqueue", ["--host"], ranks=2)``. Skipped inside an MPI job of
    several ranks: each rank would start the same jobs."""
    _serial_only()
    return run_tool


@pytest.fixture
def job():
    """:func:`run_job`: ``job("ab-node.sh", ["HEAD", "--", "--host"], NGPUS="2")``; serial only,
    as ``tool``."""
    _serial_only()
    return run_job
