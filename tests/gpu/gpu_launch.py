"""Start GPU ranks from a test, under a hard time limit, with whichever mpirun is installed."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import uuid

import pytest


def launcher(*, survive_deaths: bool = False) -> list[str]:
    """The mpirun command line. ``survive_deaths``: a rank killed by a signal does not end the
    job (Open MPI's ``orte_abort_on_non_zero_status 0``), so the survivors' behaviour shows."""
    path = shutil.which("mpirun") or shutil.which("mpiexec")
    if path is None:
        pytest.skip("no mpirun/mpiexec on PATH")
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    cmd = [path]
    if "Open MPI" in version:
        cmd += ["--bind-to", "none"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        if survive_deaths:
            cmd += ["--mca", "orte_abort_on_non_zero_status", "0"]
    elif survive_deaths:
        cmd.append("-disable-auto-cleanup")  # MPICH
    return cmd


MARKER = "MPIRING_GPU_JOB"  # in every process of a job: what finds them all when it hangs


def run(ranks: int, argv: list[str], env: dict[str, str], limit: float, *,
        survive_deaths: bool = False) -> tuple[int | None, str]:
    """Run ``argv`` on ``ranks`` ranks with ``env`` added; return (exit status, output).
    Past ``limit`` seconds every process of the job is killed and the status is None (a hang)."""
    token = uuid.uuid4().hex
    env = {**env, MARKER: token}
    cmd = launcher(survive_deaths=survive_deaths) + ["-n", str(ranks)]
    if "--allow-run-as-root" in cmd or "--bind-to" in cmd:  # Open MPI: forward our variables
        for name in env:
            cmd += ["-x", name]
    proc = subprocess.Popen(cmd + argv, env={**os.environ, "NCCL_NVLS_ENABLE": "0", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=limit)
        return proc.returncode, output
    except subprocess.TimeoutExpired:
        for pid in _marked(token) | {proc.pid}:  # ranks may sit in process groups of their own
            for sig in (signal.SIGKILL, signal.SIGCONT):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        output, _ = proc.communicate()
        return None, output


def _marked(token: str) -> set[int]:
    """Live processes whose environment carries this job's marker."""
    needle = f"{MARKER}={token}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.add(int(entry))
    return found
