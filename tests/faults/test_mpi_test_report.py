"""The MPI tests' report under a real ``mpiexec`` (tests/mpi/conftest.py): one pytest summary
for the job (rank 0's), not one per rank interleaved; a test that fails on rank 1 only still
shows rank 1's traceback and fails the job."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from fault_launch import MARKER, MPI_ENV_PREFIXES, end_job, find_mpiexec
from mpi4py import MPI

if MPI.COMM_WORLD.size > 1:  # each test starts its own mpiexec: run them from the serial suite
    pytest.skip("these tests launch their own mpiexec jobs", allow_module_level=True)

CONFTEST = Path(__file__).resolve().parents[1] / "mpi" / "conftest.py"
TESTS = '''
import pytest
from mpi4py import MPI

pytestmark = pytest.mark.mpi(min_size=2)


def test_passes():
    pass


def test_fails_on_rank_1_only():
    rank = MPI.COMM_WORLD.rank
    assert rank != {bad}, "rank one refuses"
'''


def run_tests(tmp_path: Path, bad: int) -> subprocess.CompletedProcess[str]:
    """``mpiexec -n 2 pytest --with-mpi`` on a copy of tests/mpi/conftest.py and two tests, one
    failing on rank ``bad`` (none: -1)."""
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_report.py").write_text(TESTS.format(bad=bad))
    token = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(MPI_ENV_PREFIXES)}
    env.update(PYTHONUNBUFFERED="1", **{MARKER: token})
    command = [find_mpiexec(), "-n", "2", sys.executable, "-m", "pytest", "-q", "-p",
               "no:cacheprovider", "--with-mpi", "--rootdir", str(tmp_path), "test_report.py"]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        end_job(proc.pid, token)
        pytest.fail(f"the test job hung:\n{proc.communicate()[0]}", pytrace=False)
    return subprocess.CompletedProcess(command, proc.returncode, out)


def test_a_failure_on_rank_1_alone_shows_its_traceback_and_fails_the_job(tmp_path):
    done = run_tests(tmp_path, bad=1)
    out = done.stdout
    assert done.returncode != 0, out
    assert "===== rank 1: test_report.py::test_fails_on_rank_1_only FAILED (call) =====" in out
    assert "AssertionError: rank one refuses" in out and "assert 1 != 1" in out, out
    assert "this test failed on rank(s) [1]" in out, out  # rank 0's report counts it
    assert out.count("short test summary info") == 1, out  # rank 0's summary only
    assert out.count("MPI Information") == 1, out


def test_a_passing_job_prints_one_summary(tmp_path):
    done = run_tests(tmp_path, bad=-1)
    out = done.stdout
    assert done.returncode == 0, out
    assert out.count("2 passed") == 1 and "rank 1" not in out, out
