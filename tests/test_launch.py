"""mpiring.node.launch: a process alone in MPI.COMM_WORLD while its launcher started several is
told why (mpi4py loaded an MPI that is not the launcher's)."""

from __future__ import annotations

import warnings

import pytest
from mpi4py import MPI

from mpiring.node import launch


@pytest.mark.parametrize(("env", "found"), [
    ({}, None),
    ({"OMPI_COMM_WORLD_SIZE": "4"}, ("OMPI_COMM_WORLD_SIZE", 4)),
    ({"PMI_SIZE": "2"}, ("PMI_SIZE", 2)),
    ({"SLURM_NTASKS": "8"}, ("SLURM_NTASKS", 8)),
    ({"PMI_SIZE": "1"}, None),
    ({"SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "4"}, None),  # srun -n 1 inside a 4-task job
    ({"OMPI_COMM_WORLD_SIZE": "x", "PMI_SIZE": "3"}, ("PMI_SIZE", 3)),
])
def test_launcher_size(env, found):
    assert launch.launcher_size(env) == found


def test_the_message_names_the_cause_and_the_check():
    text = launch.singleton_message(1, {"PMI_SIZE": "4"}, "Open MPI v5.0.3")
    assert "started 4 processes (PMI_SIZE=4)" in text and "Open MPI v5.0.3" in text
    assert "MPI.Get_library_version()" in text and "srun --mpi=" in text
    assert launch.singleton_message(4, {"PMI_SIZE": "4"}, "x") == ""  # sizes agree
    assert launch.singleton_message(1, {}, "x") == ""  # no launcher


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="a singleton only")
def test_warns_once_when_the_launcher_disagrees(monkeypatch):
    monkeypatch.setenv("PMI_SIZE", "4")
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.setattr(launch, "_warned", False)
    with pytest.warns(RuntimeWarning, match="alone in MPI.COMM_WORLD"):
        launch.warn_if_singleton()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        launch.warn_if_singleton()  # once per process


@pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="a singleton only")
def test_the_job_scripts_check(monkeypatch, capsys):
    """python -m mpiring: 0 when the sizes agree, 1 (with the reason) when not."""
    from mpiring.__main__ import main

    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.setenv("PMI_SIZE", "1")
    assert main() == 0
    out = capsys.readouterr().out
    assert out.startswith("rank 0 of 1 on ") and "GPU path" in out
    monkeypatch.setenv("PMI_SIZE", "4")
    assert main() == 1
    assert "the launcher started 4 processes (PMI_SIZE)" in capsys.readouterr().err
