"""The scale-out cost model (pure): the formulas' shape, the fit, and what they predict."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.auto.costmodel import (
    NIC_400G,
    Cluster,
    Link,
    best_pieces,
    fit_ring,
    flat,
    hier,
    network_allreduce,
    ring_allreduce,
    ring_phase,
    tree_allreduce,
)

NVL = Link(alpha=9e-6, beta=380e9)


def test_ring_and_tree_formulas() -> None:
    link = Link(alpha=1e-6, beta=1e9)
    assert ring_phase(4e6, 4, link) == pytest.approx(3 * (1e-6 + 1e-3))
    assert ring_allreduce(4e6, 4, link) == pytest.approx(2 * 3 * (1e-6 + 1e-3))
    assert tree_allreduce(4e6, 4, link) == pytest.approx(2 * 2 * 1e-6 + 8e-3)
    assert ring_allreduce(1e9, 1, link) == tree_allreduce(1e9, 1, link) == 0.0


def test_fit_recovers_the_link() -> None:
    truth = Link(alpha=7e-6, beta=300e9)
    points = [(s, ring_allreduce(s, 4, truth)) for s in (1 << 30, 1, 1 << 26)]
    fitted = fit_ring(points, 4)
    assert fitted.alpha == pytest.approx(truth.alpha, rel=1e-3) and fitted.beta == pytest.approx(truth.beta)


def test_fit_takes_latency_from_the_fastest_small_message() -> None:
    """alpha is the fastest message of up to 64 KiB over the ring's 2(P-1) steps: one slow small
    point is noise, and a message above 64 KiB is not latency even where it measured faster
    (the smallest message stands in only where none is that small)."""
    steps = 2 * (4 - 1)
    big = [(64 << 20, 300e-6), (1 << 30, 3000e-6)]
    noisy = [(1 << 10, 12e-6), (8 << 10, 30e-6), (64 << 10, 9e-6), ((64 << 10) + 1, 5e-6), *big]
    assert fit_ring(noisy, 4).alpha == pytest.approx(9e-6 / steps)
    no_small = [((64 << 10) + 1, 40e-6), (1 << 20, 20e-6), *big]
    assert fit_ring(no_small, 4).alpha == pytest.approx(40e-6 / steps)


@pytest.mark.parametrize("points", [[(1, 1.0), (2, 2.0)], [(1, 1.0), (5, 1.0), (5, 2.0)],
                                    [(1, 0.5), (1, 2.0), (2, 1.0)]])
def test_fit_refuses_what_it_cannot_fit(points) -> None:
    with pytest.raises(ValueError):
        fit_ring(points, 2)


def test_one_node_hier_is_the_ring_and_one_gpu_per_node_is_the_network() -> None:
    one_node = Cluster(1, 4, NVL, NIC_400G)
    assert hier(1e8, one_node) == pytest.approx(ring_allreduce(1e8, 4, NVL))
    one_gpu = Cluster(8, 1, NVL, NIC_400G)
    assert hier(1e8, one_gpu) == pytest.approx(network_allreduce(1e8, 8, NIC_400G))


@given(nodes=st.integers(2, 64), gpus=st.sampled_from([2, 4, 8]),
       size=st.integers(1 << 10, 8 << 30), pieces=st.integers(1, 8))
def test_predictions_grow_with_size(nodes: int, gpus: int, size: int, pieces: int) -> None:
    c = Cluster(nodes, gpus, NVL, NIC_400G)
    assert 0 < hier(size, c, pieces) < hier(2 * size, c, pieces)
    assert 0 < flat(size, c) < flat(2 * size, c)
    best = best_pieces(size, c)
    assert best in range(1, 9) and hier(size, c, best) == min(hier(size, c, k) for k in range(1, 9))


def test_one_gpu_per_node_makes_hier_and_flat_the_same_network_call() -> None:
    for nodes in (2, 5, 64):
        c = Cluster(nodes, 1, NVL, NIC_400G)
        for size in (1 << 10, 1 << 30):
            assert hier(size, c) == pytest.approx(flat(size, c))


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_large_messages_put_about_the_same_bytes_on_the_network(gpus: int) -> None:
    """Flat NCCL's channels spread a node's traffic over its L NICs as hier's rails do: per NIC
    a flat ring moves 2(P-1)/P of S/L, a rail 2(N-1)/N of it (half as much on 2 nodes); hier
    pays its NVLink phases on top, of which pipelining hides all but 1/K."""
    size, nodes = 8 << 30, 16
    c = Cluster(nodes, gpus, NVL, NIC_400G)
    per_nic, alpha = size / (gpus * NIC_400G.beta), NIC_400G.alpha
    p = nodes * gpus
    ring = 2 * (p - 1) * alpha + 2 * (p - 1) / p * per_nic
    tree = 2 * 4 * alpha + 2 * (gpus - 1) * NVL.alpha + 2 * per_nic  # log2(16) = 4 levels
    assert flat(size, c) == pytest.approx(min(ring, tree))
    net = network_allreduce(size / gpus, nodes, NIC_400G)
    assert net == pytest.approx(2 * (nodes - 1) * alpha + 2 * (nodes - 1) / nodes * per_nic)
    inside = 2 * ring_phase(size, gpus, NVL)
    assert hier(size, c, 8) == pytest.approx(max(inside, net) + min(inside, net) / 8 + 7 * c.piece_cost)
