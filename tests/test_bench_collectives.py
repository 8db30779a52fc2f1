"""mpiring.bench.collectives: what a size means per collective, the exact expected contents of
reduce_scatter's and allgather's buffers, and their check, on n simulated ranks in one process."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.bench import collectives as co
from mpiring.bench.arrays import HostSpace
from mpiring.bench.data import InputGenerator

RANKS = [1, 2, 3, 4, 7]


def test_names_and_kinds():
    assert co.NAMES == ("allreduce", "reduce_scatter", "allgather")
    assert co.kind("reduce_scatter").label == "Reduce_scatter_block"
    assert co.kind("allgather").label == "Allgather"


def test_sizes_round_down_to_whole_blocks_as_nccl_tests():
    sizes = [1, 4, 8, 1000, 1024, 4096]
    # allreduce: whole elements
    assert co.element_counts(sizes, 4, 3) == [(4, 1), (8, 2), (1000, 250), (1024, 256),
                                              (4096, 1024)]
    # 3 ranks of float32: multiples of 3 elements; under 3 elements dropped
    assert co.element_counts(sizes, 4, 3, "reduce_scatter") == [(996, 249), (1020, 255),
                                                                 (4092, 1023)]
    assert co.element_counts(sizes, 4, 3, "allgather") == co.element_counts(sizes, 4, 3,
                                                                             "reduce_scatter")
    # sizes that round alike are kept once
    assert co.element_counts([12, 16, 20], 4, 4, "allgather") == [(16, 4)]
    assert co.element_counts(sizes, 8, 1, "allgather") == co.element_counts(sizes, 8, 1)


def test_count_column_is_one_ranks_block_except_for_allreduce():
    assert co.reported_count("allreduce", 1024, 4) == 1024
    assert co.reported_count("reduce_scatter", 1024, 4) == 256
    assert co.reported_count("allgather", 1023, 3) == 341


def test_bus_factors_and_their_text():
    assert co.bus_factor(4) == 1.5 and co.bus_factor(4, "allreduce") == 1.5
    assert co.bus_factor(4, "reduce_scatter") == co.bus_factor(4, "allgather") == 0.75
    assert co.bus_factor(1, "allgather") == 0.0
    assert co.factor_text("allreduce") == "2(n-1)/n" and co.factor_text("allgather") == "(n-1)/n"
    assert "whole send buffer" in co.size_line("reduce_scatter")
    assert "whole receive buffer" in co.size_line("allgather")
    assert "rounded down" in co.size_line("allgather")


def reference(gen: InputGenerator, collective: str, total: int) -> tuple[list, list]:
    """(send, result) per rank, from the ranks' full input vectors, by brute force."""
    n, m = gen.nranks, total // gen.nranks
    full = [np.asarray(gen.values(q, 0, total), dtype=np.int64) for q in range(n)]
    summed = np.sum(full, axis=0)
    if collective == "allreduce":
        return full, [summed] * n
    if collective == "reduce_scatter":
        return full, [summed[r * m:(r + 1) * m] for r in range(n)]
    gathered = np.concatenate([full[q][q * m:(q + 1) * m] for q in range(n)])
    return [full[r][r * m:(r + 1) * m] for r in range(n)], [gathered] * n


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("collective", co.NAMES)
def test_expected_values_are_the_collective_of_the_inputs(n, collective):
    total = 5 * n
    gen = InputGenerator(np, "sum", np.dtype(np.int64), n, seed=3)
    sends, results = reference(gen, collective, total)
    for r in range(n):
        e = co.Expect(gen, collective, total, r)
        assert np.array_equal(e.own(0, e.send_count), sends[r])
        assert np.array_equal(e.want(0, e.recv_count), results[r])
        assert np.array_equal(e.want(2, 4), results[r][2:4])  # any piece, across block edges


def simulate(n: int, collective: str, in_place: bool, wrong_rank: int | None = None):
    """Every rank's SizeBuffers, the collective done by numpy from the buffers' contents as the
    call would see them, and each rank's check."""
    space, total = HostSpace(), 6 * n
    gen = InputGenerator(np, "sum", np.dtype(np.float32), n, seed=9)
    bufs = [co.SizeBuffers(space, gen, total, r, cache=True, collective=collective)
            for r in range(n)]
    for b in bufs:
        if in_place:
            b.prepare_in_place()
        else:
            space.poison(b.recv)
    m = total // n
    if in_place and collective == "allgather":
        inputs = [b.recv[b.rank * m:(b.rank + 1) * m].copy() for b in bufs]
    else:
        inputs = [(b.recv if in_place else b.send).copy() for b in bufs]
    for b in bufs:
        out = b.recv_arg(in_place)
        assert out.size == (m if collective == "reduce_scatter" and not in_place else total)
        if collective == "allreduce":
            out[:] = np.sum(inputs, axis=0)
        elif collective == "reduce_scatter":
            out[:m] = np.sum(inputs, axis=0)[b.rank * m:(b.rank + 1) * m]
        else:
            out[:] = np.concatenate(inputs)
        if b.rank == wrong_rank:
            out[b.count - 1] += 1  # the last element of the result
    return [(b.check_output(), b.check_input()) for b in bufs]


@pytest.mark.parametrize("n", RANKS)
@pytest.mark.parametrize("collective", co.NAMES)
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in"])
def test_a_true_collective_passes_the_check(n, collective, in_place):
    assert simulate(n, collective, in_place) == [(None, None)] * n


@pytest.mark.parametrize("collective", co.NAMES)
@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in"])
def test_one_wrong_element_is_counted(collective, in_place):
    checks = simulate(3, collective, in_place, wrong_rank=1)
    assert checks[0] == checks[2] == (None, None)
    bad, _ = checks[1]
    assert bad is not None and bad.count == 1


def test_poisoned_output_fails_every_element():
    space = HostSpace()
    gen = InputGenerator(np, "sum", np.dtype(np.float32), 4, seed=1)
    for collective, checked in (("reduce_scatter", 2), ("allgather", 8)):
        b = co.SizeBuffers(space, gen, 8, 0, cache=False, collective=collective)
        space.poison(b.recv)
        bad = b.check_output()
        assert bad is not None and bad.count == checked, collective


@given(st.integers(min_value=-5, max_value=1 << 40))
def test_the_odd_count_check_uses_an_odd_count_just_under_the_point(count: int) -> None:
    near = co.odd_count_near(count)
    if count < 2:
        assert near is None
    else:
        assert near is not None and near % 2 == 1 and max(1, count - 8) <= near < count
