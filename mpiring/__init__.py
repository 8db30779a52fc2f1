"""mpiring: allreduce of GPU memory for MPI programs, one process per GPU.

    from mpi4py import MPI
    import mpiring

    with mpiring.Communicator(MPI.COMM_WORLD) as comm:
        y = comm.allreduce(x)            # new array
        comm.Allreduce(x, y, op=MPI.MAX) # into y; MPI.IN_PLACE works too
"""

from . import algorithms
from .algorithms import Algorithm, register
from .call.persistent import PersistentAllreduce
from .communicator import CallStats, Communicator
from .core.errors import (
    CommunicatorClosedError,
    ConcurrentCallError,
    InvalidArgumentError,
    MpiringError,
    MpiringTimeoutError,
    PeerArgumentError,
    PeerFailedError,
    RankMismatchError,
    SetupError,
    UnavailableError,
)
from .core.log import configure_logging
from .core.ops import Op
from .node.launch import warn_if_singleton
from .node.timeouts import TimeoutPolicy

__version__ = "0.2.0"  # the one place: pyproject.toml reads it (setuptools dynamic version)
__all__ = [
    "Algorithm",
    "CallStats",
    "Communicator",
    "CommunicatorClosedError",
    "ConcurrentCallError",
    "InvalidArgumentError",
    "MpiringError",
    "MpiringTimeoutError",
    "Op",
    "PeerArgumentError",
    "PeerFailedError",
    "PersistentAllreduce",
    "RankMismatchError",
    "SetupError",
    "TimeoutPolicy",
    "UnavailableError",
    "algorithms",
    "register",
]

configure_logging()
warn_if_singleton()  # a launcher that started several processes, each alone: the wrong MPI
