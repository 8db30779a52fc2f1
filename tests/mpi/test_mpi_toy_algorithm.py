"""Adding an algorithm is one module plus one row: the toy row (toy_algorithm.py) runs through
the API, the agreement check, the host matrix and the bench with no other file touched."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import toy_algorithm
from mpi4py import MPI
from mpi_support import (
    DTYPES,
    OPS,
    all_ok,
    attempt,
    check_result,
    expect_raised,
    gather_inputs,
    make_input,
)

import mpiring
from mpiring import algorithms
from mpiring.bench.__main__ import main as bench_main

NAME = toy_algorithm.ROW.name
world = MPI.COMM_WORLD


@pytest.fixture(scope="module", autouse=True)
def toy_row():
    mpiring.register(toy_algorithm.ROW)
    yield toy_algorithm.ROW
    algorithms.unregister(NAME)


@pytest.fixture(scope="module")
def comm():
    c = mpiring.Communicator(world, gpu=False, timeout=60.0)
    yield c
    c.close()


@pytest.mark.mpi
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d.name != "bfloat16"], ids=str)
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
def test_toy_runs_the_host_matrix(comm, dtype, op, in_place) -> None:
    problems = []
    for count in (0, 1, 7919):
        x = make_input(dtype, op, count, seed=11)
        stack = gather_inputs(x)
        if in_place:
            out = x.copy()
            comm.Allreduce(MPI.IN_PLACE, out, op, algorithm=NAME)
        else:
            out = np.full_like(x, 0)
            comm.Allreduce(x, out, op, algorithm=NAME)
        problems += check_result(out, stack, op, f"{NAME} {dtype} {op.name} n={count}")
    all_ok(problems)


@pytest.mark.mpi
def test_toy_as_the_communicator_default_and_resolve(comm) -> None:
    with mpiring.Communicator(world, gpu=False, algorithm=NAME) as c:
        assert c.resolve(10, np.float32) == NAME
        np.testing.assert_array_equal(c.allreduce(np.ones(5)), world.size)


@pytest.mark.mpi(min_size=2)
def test_agreement_names_the_toy_when_ranks_disagree(comm) -> None:
    algo = NAME if world.rank == 0 else "ring"
    err = attempt(lambda: comm.Allreduce(MPI.IN_PLACE, np.ones(8), algorithm=algo))
    all_ok(expect_raised(err, mpiring.RankMismatchError, "algorithm", NAME, "ring"))
    np.testing.assert_array_equal(comm.allreduce(np.ones(3), algorithm=NAME), world.size)  # still fine


@pytest.mark.mpi
def test_toy_is_refused_for_gpu_memory_kinds_it_does_not_serve(comm) -> None:
    assert NAME in algorithms.names(mpiring.core.buffers.Memory.HOST)
    assert NAME not in algorithms.names(mpiring.core.buffers.Memory.CUDA)


@pytest.mark.mpi
def test_toy_in_the_bench(tmp_path_factory) -> None:
    out = world.bcast(str(tmp_path_factory.mktemp("toy")) if world.rank == 0 else None)
    status = bench_main(["--host", "-b", "1K", "-e", "8K", "--algo", f"mpi,{NAME}", "--output-dir", out,
                         "--name", "toy", "--time-budget", "0.005", "--reps", "2", "--progress", "off",
                         "--no-plot"])
    problems = [] if status == 0 else [f"bench exit status {status}"]
    if world.rank == 0:
        written = sorted(pathlib.Path(out).glob("toy_*.csv"))  # toy_<host>_<time>.csv
        text = written[-1].read_text() if written else ""
        rows = [line for line in text.splitlines() if f",{NAME}," in line]
        if len(rows) != 4 or any(",OK" not in r for r in rows):
            problems.append(f"bench rows for {NAME}: {rows}")
    all_ok(problems)
