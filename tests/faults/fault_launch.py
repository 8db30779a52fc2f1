"""Launch a fault scenario under mpiexec in a subprocess that can never hang the test run.

The job runs in its own session under a hard time limit; on expiry every process it started is
killed (MPICH's proxy and ranks each start a session of their own, so the job's process tree
and a marker in the environment find them, not the process group).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).parent / "scripts" / "fault.py"
MARKER = "MPIRING_FAULT_JOB"
# Variables a parent that initialised MPI (as a singleton) may leave behind for its children.
MPI_ENV_PREFIXES = ("PMI_", "PMIX_", "MPIR_", "HYDRA_", "MPICH_INTERFACE", "OMPI_")


def find_mpiexec() -> str:
    """The mpiexec of this Python's environment (the MPI mpi4py was built for), else PATH's."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail(f"no mpiexec next to {sys.executable} nor on PATH: install the test extra "
                    "(pip install -e '.[mpi,test]' brings MPICH) to run the fault tests", pytrace=False)
    return found


@dataclass
class Job:
    """What a finished job left: its exit status, output, wall time and every rank's record."""

    returncode: int
    output: str
    elapsed: float
    records: dict[int, dict[str, Any]] = field(default_factory=dict)

    def events(self, rank: int) -> list[dict[str, Any]]:
        return self.records.get(rank, {}).get("events", [])

    def event(self, rank: int, label: str) -> dict[str, Any]:
        """Rank ``rank``'s record of call ``label``; fails the test, with the job's output, if absent."""
        for facts in self.events(rank):
            if facts["call"] == label:
                return facts
        pytest.fail(f"rank {rank} recorded no call {label!r}; records {self.records}\n"
                    f"--- job output ---\n{self.output[-4000:]}", pytrace=False)

    def explain(self) -> str:
        return f"records: {json.dumps(self.records)[:3000]}\n--- job output ---\n{self.output[-3000:]}"


def run_scenario(tmp_path: Path, scenario: str, victim: int, *, ranks: int = 3, timeout: float = 1.0,
                 limit: float = 30.0, check: bool = True, abort_on_error: bool = False,
                 auto_cleanup: bool = True, env: dict[str, str] | None = None) -> Job:
    """Run ``scenario`` on ``ranks`` ranks with MPIRING_TIMEOUT=``timeout``; kill it after ``limit`` s.

    ``abort_on_error`` runs the script under ``python -m mpi4py`` (an unhandled exception then
    calls MPI_Abort); ``auto_cleanup=False`` keeps MPICH's mpiexec from killing every rank when
    one dies, so the survivors' own behaviour shows.
    """
    out_dir = tmp_path / "records"
    out_dir.mkdir(parents=True)
    token = uuid.uuid4().hex
    child_env = {k: v for k, v in os.environ.items() if not k.startswith(MPI_ENV_PREFIXES)}
    child_env.update(MPIRING_TIMEOUT=str(timeout), MPIRING_CHECK="1" if check else "0",
                     MPIRING_FAULT_OUT=str(out_dir), PYTHONUNBUFFERED="1", **{MARKER: token})
    child_env.update(env or {})
    command = [find_mpiexec()] + ([] if auto_cleanup else ["-disable-auto-cleanup"])
    command += ["-n", str(ranks), sys.executable] + (["-m", "mpi4py"] if abort_on_error else [])
    command += [str(SCRIPT), scenario, str(victim)]
    shm_before = shm_files()
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=child_env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        end_job(proc.pid, token)
        output, _ = proc.communicate()
        pytest.fail(f"{scenario}: the job hung and was killed after {limit} s\n"
                    f"{Job(-9, output, limit, _records(out_dir)).explain()}", pytrace=False)
    elapsed = time.monotonic() - start
    left = _marked(token)
    for _ in range(100):  # ranks mpiexec killed take a moment to go
        if not left:
            break
        time.sleep(0.02)
        left = _marked(token)
    _kill(left)  # e.g. a stopped rank whose mpiexec gave up on it
    for path in orphaned(shm_files() - shm_before):
        with contextlib.suppress(OSError):
            os.unlink(path)
    job = Job(proc.returncode, output, elapsed, _records(out_dir))
    if left:
        pytest.fail(f"{scenario}: processes {sorted(left)} outlived their mpiexec\n{job.explain()}",
                    pytrace=False)
    return job


def shm_files() -> set[str]:
    """MPICH's shared-memory segments in /dev/shm now."""
    return {str(p) for p in Path("/dev/shm").glob("mpich_shm_*")} if Path("/dev/shm").is_dir() else set()


def orphaned(paths: set[str]) -> set[str]:
    """Those of ``paths`` that no live process holds open or mapped: segments a killed job
    left behind (never another running job's)."""
    if not paths:
        return set()
    held: set[str] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/maps") as f:
                held.update(line.split(None, 5)[-1].strip() for line in f if "/dev/shm/" in line)
            for fd in os.listdir(f"/proc/{entry}/fd"):
                held.add(os.readlink(f"/proc/{entry}/fd/{fd}"))
        except OSError:
            continue
    return {p for p in paths if os.path.exists(p)} - held


def end_job(pid: int, token: str) -> None:
    """SIGKILL a job: the launcher ``pid``, its process tree and every process carrying the
    job's ``token`` in its environment (:data:`MARKER`)."""
    _kill(_descendants(pid) | _marked(token) | {pid})


def job_processes(token: str) -> set[int]:
    """Live processes of the job whose environment carries ``token`` (:data:`MARKER`)."""
    return _marked(token)


def _records(out_dir: Path) -> dict[int, dict[str, Any]]:
    records = {}
    for path in sorted(out_dir.glob("rank*.json")):
        records[int(path.stem[4:])] = json.loads(path.read_text())
    return records


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _descendants(pid: int) -> set[int]:
    tree, found, todo = _children(), set(), [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _marked(token: str) -> set[int]:
    """Live processes whose environment carries this job's marker: only ours can be read."""
    needle = f"{MARKER}={token}".encode()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.add(int(entry))
        except OSError:
            continue
    return found


def _kill(pids: set[int]) -> None:
    """SIGKILL each of ``pids`` (processes this job started), continuing stopped ones too."""
    for pid in pids:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break
