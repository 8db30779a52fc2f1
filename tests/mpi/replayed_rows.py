"""What the host tests of the eager replay run on a machine without GPUs (test_mpi_replay.py,
test_mpi_persistent.py): the toy row with a ``bind`` entry that counts its replayed launches,
and a host communicator that keys host arrays dressed as CuPy ones (``keyed_arrays.Keyed``)."""

from __future__ import annotations

import dataclasses

import pytest
import toy_algorithm
from keyed_arrays import Keyed
from mpi4py import MPI

import mpiring
from mpiring import algorithms
from mpiring.algorithms import Algorithm


def replayed_row(name: str, code: int, launches: list[int]) -> Algorithm:
    """The toy row under ``name`` and wire ``code``, whose replays append 1 to ``launches``."""
    def bind(backend, call):
        def again() -> None:
            launches.append(1)
            toy_algorithm.run(backend, call)
        return again
    return dataclasses.replace(toy_algorithm.ROW, name=name, code=code, bind=bind)


def registered(row: Algorithm):
    """A module-scoped autouse fixture that registers ``row`` for the module's tests, then
    unregisters it (``row = registered(ROW)`` at module level)."""
    @pytest.fixture(scope="module", autouse=True, name="row")
    def fixture():
        mpiring.register(row)
        yield row
        algorithms.unregister(row.name)
    return fixture


def keyed_comm(**kwargs) -> mpiring.Communicator:
    """A host communicator of ``MPI.COMM_WORLD`` whose calls on ``Keyed`` arrays have a key, as GPU
    calls on CuPy arrays do."""
    comm = mpiring.Communicator(MPI.COMM_WORLD, gpu=False, timeout=60.0, **kwargs)
    comm.call_keys.array_type = Keyed  # what a GPU communicator keys on (CuPy's arrays): the stand-in
    return comm
