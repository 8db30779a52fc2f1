"""Inputs that should just work (issue 17, item 5): np.matrix (as mpi4py takes it), and the
NaN rule of max/min, the same for every mpiring algorithm on host arrays (item 7)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import all_ok

import mpiring

pytestmark = pytest.mark.mpi(min_size=1)
world = MPI.COMM_WORLD


@pytest.fixture(autouse=True)
def _one_node_rows(request: pytest.FixtureRequest) -> None:
    if os.environ.get("MPIRING_VIRTUAL_NODES") and "ring]" in request.node.name:
        pytest.skip("ring runs inside one node")


@pytest.mark.parametrize("algorithm", ["ring", "mpi", "hier"])
def test_np_matrix_is_reduced_like_an_array(algorithm: str) -> None:
    """Before: ValueError on every rank (the matrix's 2-D flat view), or a failure partway."""
    problems = []
    with mpiring.Communicator(world, gpu=False, slot_bytes=4096, timeout=60) as comm:
        x = np.matrix(np.arange(2000, dtype=np.float64).reshape(2, 1000) + world.rank)
        want = np.arange(2000, dtype=np.float64).reshape(2, 1000) * world.size + sum(range(world.size))
        got = comm.allreduce(x, algorithm=algorithm)
        if not np.array_equal(np.asarray(got), want):
            problems.append(f"allreduce of a matrix: {np.asarray(got).ravel()[:4]}")
        out = np.matrix(np.zeros((2, 1000)))
        comm.Allreduce(x, out, algorithm=algorithm)
        if not np.array_equal(np.asarray(out), want):
            problems.append(f"Allreduce into a matrix: {np.asarray(out).ravel()[:4]}")
    all_ok(problems)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("algorithm", ["ring", "mpi", "hier"])
def test_nan_propagates_in_max_and_min_on_every_algorithm(algorithm: str, op: str) -> None:
    """Element k holds NaN on rank k % size only: every algorithm returns NaN there (IEEE
    maximum/minimum, numpy's rule); elements without NaN reduce as usual."""
    n = 4 * world.size
    x = np.arange(n, dtype=np.float64) + world.rank
    x[np.arange(n) % world.size == world.rank] = np.nan
    x[-1] = 1.0 + world.rank  # no NaN anywhere here
    with mpiring.Communicator(world, gpu=False, slot_bytes=4096, timeout=60) as comm:
        got = comm.allreduce(x, op=op, algorithm=algorithm)
    want_last = 1.0 + (world.size - 1 if op == "max" else 0)
    problems = []
    if not np.isnan(got[:-1]).all():
        problems.append(f"{algorithm} {op}: NaN did not propagate: {got}")
    if got[-1] != want_last:
        problems.append(f"{algorithm} {op}: last element {got[-1]}, expected {want_last}")
    all_ok(problems)


@pytest.mark.parametrize("forced, want", [("mpi", "mpi"), ("ring", "ring"), ("oneshot", "ring")])
def test_mpiring_algo_on_host_arrays(forced: str, want: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """MPIRING_ALGO replaces auto's choice wherever that algorithm serves the call; a GPU-only
    one (oneshot) leaves host arrays to auto (the ring), as the README says."""
    monkeypatch.setenv("MPIRING_ALGO", forced)
    with mpiring.Communicator(world, gpu=False, slot_bytes=4096, timeout=60) as comm:
        got = comm.resolve(1000, np.float64, gpu=False)
        y = comm.allreduce(np.ones(1000))
    problems = [] if got == want else [f"MPIRING_ALGO={forced}: resolved {got}, expected {want}"]
    if not np.array_equal(y, np.full(1000, float(world.size))):
        problems.append("wrong sum")
    all_ok(problems)
