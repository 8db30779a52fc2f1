"""A check of how the process was launched: a launcher that started several processes, each
of which finds itself alone in ``MPI.COMM_WORLD``, means that mpi4py loaded an MPI library
other than the launcher's (say the ``mpich`` wheel under Open MPI's ``mpirun``, or a system
MPI under ``srun`` with the wrong ``--mpi=`` plugin): every rank then runs the job alone.

:func:`warn_if_singleton` warns once per process; ``import mpiring`` and the benchmark's
commands call it.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping

# Launchers' process counts, in the order they are named: Open MPI, MPICH/Hydra and PMI-2,
# Slurm's step, Slurm's job.
LAUNCHER_SIZES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")

_warned = False


def launcher_size(environ: Mapping[str, str]) -> tuple[str, int] | None:
    """The launcher's process count when it is more than one, with the variable that says so:
    the first of :data:`LAUNCHER_SIZES` present decides (inside ``srun -n 1`` in a 4-task
    job, the step's 1 counts, not the job's 4); None otherwise."""
    for name in LAUNCHER_SIZES:
        text = environ.get(name, "").strip()
        if text.isdigit():
            return (name, int(text)) if int(text) > 1 else None
    return None


def singleton_message(world_size: int, environ: Mapping[str, str], library: str) -> str:
    """Pure: the warning for a process alone in ``MPI.COMM_WORLD`` while its launcher started
    several ("" when the sizes agree or no launcher says)."""
    found = launcher_size(environ)
    if found is None or world_size != 1:
        return ""
    name, count = found
    return (f"mpiring: this process is alone in MPI.COMM_WORLD (size 1), but its launcher "
            f"started {count} processes ({name}={count}): mpi4py loaded an MPI library that is "
            f"not the launcher's ({library or 'unknown'}), so every process runs alone. Check "
            "with  python -c \"from mpi4py import MPI; print(MPI.Get_library_version())\"  "
            "under the same launcher; install mpiring without the 'mpi' extra on clusters "
            "(pip uninstall mpich), and under Slurm pass srun --mpi=<pmix|pmi2> matching the "
            "MPI in use (srun --mpi=list shows the choices).")


def warn_if_singleton() -> None:
    """Warn (once per process) when this process is a singleton but its launcher started
    several. Does nothing before MPI is initialised or after it is finalised."""
    global _warned
    mpi = sys.modules.get("mpi4py.MPI")
    if _warned or mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    _warned = True
    size = mpi.COMM_WORLD.Get_size()
    if size != 1 or launcher_size(os.environ) is None:
        return
    library = " ".join(mpi.Get_library_version().replace("\0", "").split("\n")[0].split())
    message = singleton_message(size, os.environ, library)
    if message:
        warnings.warn(message, RuntimeWarning, stacklevel=2)

