"""A communicator dropped without close() (issue 17, item 6): a ResourceWarning says so."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok

import mpiring

pytestmark = pytest.mark.mpi(min_size=1)


def test_an_unclosed_communicator_warns_when_collected() -> None:
    comm = mpiring.Communicator(MPI.COMM_WORLD, gpu=False, slot_bytes=4096, timeout=60)
    comm.allreduce(np.ones(4))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        del comm
        gc.collect()
    problems = [] if any(issubclass(w.category, ResourceWarning) and "without close()" in str(w.message)
                         for w in seen) else [f"no ResourceWarning: {[str(w.message) for w in seen]}"]
    with warnings.catch_warnings(record=True) as seen:  # a closed one stays quiet
        warnings.simplefilter("always")
        with mpiring.Communicator(MPI.COMM_WORLD, gpu=False, slot_bytes=4096, timeout=60):
            pass
        gc.collect()
    problems += [f"closed, yet: {w.message}" for w in seen if issubclass(w.category, ResourceWarning)
                 and "mpiring" in str(w.message)]
    all_ok(problems)
