"""One communicator over several (virtual) nodes: the hierarchical allreduce on host arrays, in
every node layout the world size allows — even (2 x 2), uneven (2 + 1, 1 + 3), one rank per
node, one node — through the full host matrix, and what a communicator across nodes refuses.

Virtual nodes (``MPIRING_VIRTUAL_NODES``) cut this machine's ranks into nodes: the node's
ranks share memory, and nodes meet only through MPI on the rails, as real nodes do.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest
from mpi4py import MPI
from mpi_support import (
    DTYPES,
    MODES,
    OPS,
    all_ok,
    attempt,
    expect_raised,
    gather_inputs,
    make_input,
    reduce_and_check,
)

import mpiring
from mpiring.algorithms import Collective
from mpiring.core.ops import Op
from mpiring.core.topology import VIRTUAL_NODES, virtual_node_sizes

pytestmark = pytest.mark.mpi(min_size=1)
world = MPI.COMM_WORLD
LAYOUTS = {1: ["1"], 2: ["2", "1"], 3: ["2", "1,2", "3"], 4: ["2", "1,3", "4"]}.get(world.size, ["2"])
COUNTS = [0, 1, 5, 7919, (1 << 15) + 3]


def make(spec: str, **kwargs) -> mpiring.Communicator:
    os.environ[VIRTUAL_NODES] = spec
    try:
        return mpiring.Communicator(world, gpu=False, timeout=60.0, **kwargs)
    finally:
        del os.environ[VIRTUAL_NODES]


@pytest.fixture(scope="module", params=LAYOUTS)
def spread(request: pytest.FixtureRequest) -> Iterator[mpiring.Communicator]:
    """A communicator over the virtual nodes of one layout, with 4 KiB slots (many batches)."""
    comm = make(request.param, slot_bytes=4096)
    yield comm
    comm.close()


def test_the_topology_is_the_layout(spread: mpiring.Communicator, request: pytest.FixtureRequest) -> None:
    """The virtual nodes are the ones the layout asked for (its sizes, in order), the ranks lie
    on them in order, and auto runs hier where there is more than one."""
    spec = request.node.callspec.params["spread"]
    topo = spread.topology
    sizes = list(topo.node_sizes)
    want = list(virtual_node_sizes(spec, world.size))
    ok = sizes == want and sum(want) == world.size
    problems = [] if ok else [f"nodes of {sizes} for {spec!r}, not {want}"]
    want_node = [n for n, k in enumerate(sizes) for _ in range(k)]
    if list(topo.node_of) != want_node:
        problems.append(f"nodes {topo.node_of} != {want_node}")
    auto = spread.resolve(1 << 20, np.float32)
    if auto != ("hier" if topo.nodes > 1 else "ring"):
        problems.append(f"auto runs {auto} on {topo.describe()}")
    all_ok(problems)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d.name != "bfloat16"], ids=lambda d: d.name)
@pytest.mark.parametrize("op", OPS, ids=lambda o: o.name)
def test_hier_matrix(spread: mpiring.Communicator, op: Op, dtype: np.dtype, mode: str) -> None:
    """Every op x dtype x placement x count through hier (auto's pick across nodes): exact
    where it must be, bitwise identical on every rank."""
    problems: list[str] = []
    for count in COUNTS:
        label = f"{spread.topology.describe()}: hier {op.name} {dtype.name}[{count}] {mode}"
        problems += reduce_and_check(spread, dtype, op, count, mode, seed=count + 1, label=label,
                                     algorithm="hier")
    all_ok(problems)


@pytest.mark.parametrize("pieces", [1, 3, 8])
def test_hier_in_pieces(spread: mpiring.Communicator, pieces: int) -> None:
    """The pipelined pieces (``batches=`` of hier) change nothing in the result."""
    problems: list[str] = []
    for count in (7, 100_003):
        for mode in ("out", "in_place"):
            problems += reduce_and_check(spread, np.dtype(np.int64), Op.SUM, count, mode, seed=pieces,
                                         label=f"pieces={pieces} [{count}] {mode}", batches=pieces)
    all_ok(problems)


def test_auto_and_flat_mpi_agree_bitwise(spread: mpiring.Communicator) -> None:
    x = make_input(np.dtype(np.int32), Op.SUM, 50_001, seed=4)
    outs = {a: spread.allreduce(x, algorithm=a) for a in ("auto", "hier", "mpi")}
    all_ok([f"{a} differs from mpi" for a in ("auto", "hier") if not np.array_equal(outs[a], outs["mpi"])])


def test_block_collectives_across_nodes(spread: mpiring.Communicator) -> None:
    """Reduce_scatter_block and Allgather run everywhere (auto: flat MPI across nodes)."""
    n, r, m = world.size, world.rank, 777
    x = make_input(np.dtype(np.int64), Op.SUM, n * m, seed=8)
    want = gather_inputs(x).sum(axis=0)[r * m:(r + 1) * m]
    got = np.zeros(m, dtype=np.int64)
    spread.Reduce_scatter_block(x, got)
    problems = [] if np.array_equal(got, want) else ["Reduce_scatter_block wrong"]
    out = np.zeros(n * m, dtype=np.int64)
    spread.Allgather(x[:m], out)
    if not np.array_equal(out, gather_inputs(x[:m]).reshape(-1)):
        problems.append("Allgather wrong")
    rs = spread.resolve(n * m, np.int64, collective=Collective.REDUCE_SCATTER)
    if rs != ("mpi" if spread.topology.nodes > 1 else "ring"):
        problems.append(f"auto Reduce_scatter_block runs {rs}")
    all_ok(problems)


def test_node_algorithms_refuse_a_communicator_across_nodes(spread: mpiring.Communicator) -> None:
    """The ring moves data through one node's memory: across nodes it says so, on every rank."""
    if spread.topology.nodes == 1:
        pytest.skip("one node: every algorithm runs")
    x = np.ones(100)
    err = attempt(lambda: spread.Allreduce(MPI.IN_PLACE, x, algorithm="ring"))
    problems = expect_raised(err, mpiring.InvalidArgumentError, "runs inside one node",
                             spread.topology.describe(), "'hier'")
    if not np.all(x == 1):
        problems.append("the refused call wrote its buffer")
    y = spread.allreduce(np.ones(10))  # still usable
    if not np.all(y == world.size):
        problems.append(f"after the refusal: {y}")
    all_ok(problems)


def test_bfloat16_is_refused_by_hier_on_the_host(spread: mpiring.Communicator) -> None:
    bf16 = next(d for d in DTYPES if d.name == "bfloat16")
    err = attempt(lambda: spread.allreduce(np.ones(8, dtype=bf16), algorithm="hier"))
    all_ok(expect_raised(err, mpiring.InvalidArgumentError, "bfloat16"))


def test_ranks_that_see_different_layouts_fail_set_up_on_every_rank() -> None:
    if world.size == 1:
        pytest.skip("needs two ranks")
    os.environ[VIRTUAL_NODES] = "1" if world.rank == 0 else str(world.size)
    try:
        err = attempt(lambda: mpiring.Communicator(world, gpu=False, timeout=30.0))
    finally:
        del os.environ[VIRTUAL_NODES]
    all_ok(expect_raised(err, mpiring.SetupError, VIRTUAL_NODES, "set it alike"))


def test_a_bad_layout_is_an_error_on_every_rank() -> None:
    err = attempt(lambda: make(str(world.size + 1)))
    all_ok(expect_raised(err, mpiring.InvalidArgumentError, VIRTUAL_NODES,
                         f"asks for {world.size + 1} nodes"))
