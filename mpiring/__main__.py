"""``srun python -m mpiring`` (or ``mpiexec -n 4 python -m mpiring``): how this job sees
mpiring, one line per process: rank, world size, host, MPI library, and whether its GPU path
can run (or why not, with CuPy's own error). Exit status 1 where the launcher started more
processes than ``MPI.COMM_WORLD`` holds, the sign of an mpi4py that loaded another MPI than the
launcher's: the job scripts run it before anything else.
"""

from __future__ import annotations

import os
import socket
import sys

from mpi4py import MPI

from . import cuda
from .node.launch import launcher_size


def main() -> int:
    world = MPI.COMM_WORLD
    library = " ".join(MPI.Get_library_version().replace("\0", "").split("\n")[0].split())
    gpu = "GPU path available" if cuda.available() else f"no GPU path: {cuda.unavailable_reason()}"
    print(f"rank {world.rank} of {world.size} on {socket.gethostname()}: {library}; {gpu}",
          flush=True)
    found = launcher_size(os.environ)
    if found is not None and found[1] != world.size:
        print(f"rank {world.rank}: the launcher started {found[1]} processes ({found[0]}) but "
              f"MPI.COMM_WORLD holds {world.size}: mpi4py uses another MPI than the launcher "
              "(see the README, 'Installation')", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
