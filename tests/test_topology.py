"""Nodes, places and rails from node keys, and virtual nodes from MPIRING_VIRTUAL_NODES (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.core.errors import InvalidArgumentError
from mpiring.core.topology import Topology, from_node_keys, virtual_node_of, virtual_node_sizes


def test_nodes_are_numbered_by_first_rank_and_places_by_rank() -> None:
    topo = from_node_keys(["b", "a", "b", "a", "c"])
    assert topo.node_of == (0, 1, 0, 1, 2) and topo.local_of == (0, 0, 1, 1, 0)
    assert topo.node_sizes == (2, 2, 1) and topo.nodes == 3 and not topo.even
    assert topo.node_ranks(0) == (0, 2) and topo.rail_ranks(1) == (2, 3)
    assert topo.describe() == "3 nodes of 2, 2, 1 ranks"


def test_one_node_and_even_nodes() -> None:
    assert from_node_keys([5, 5, 5, 5]).describe() == "1 node of 4 ranks"
    two = from_node_keys([0, 0, 1, 1])
    assert two.even and two.describe() == "2 nodes of 2 ranks"
    assert [two.rail_ranks(p) for p in range(2)] == [(0, 2), (1, 3)]
    assert from_node_keys([0]).describe() == "1 node of 1 rank"


@given(st.lists(st.integers(0, 5), min_size=1, max_size=40))
def test_every_rank_is_on_one_node_and_one_rail(keys: list[int]) -> None:
    topo = from_node_keys(keys)
    assert sum(topo.node_sizes) == len(keys)
    for node in range(topo.nodes):
        ranks = topo.node_ranks(node)
        assert [topo.local_of[r] for r in ranks] == list(range(len(ranks)))
        assert len({keys[r] for r in ranks}) == 1
    rails = [r for p in range(max(topo.node_sizes)) for r in topo.rail_ranks(p)]
    assert sorted(rails) == list(range(len(keys)))
    # rail 0 holds one rank of every node: the leaders of the uneven fallback
    assert sorted(topo.node_of[r] for r in topo.rail_ranks(0)) == list(range(topo.nodes))


@pytest.mark.parametrize(("spec", "size", "want"), [
    ("2", 4, (2, 2)), ("2", 3, (2, 1)), ("3", 9, (3, 3, 3)), ("1", 5, (5,)),
    ("4,2,3", 9, (4, 2, 3)), (" 2 ", 2, (1, 1)),
])
def test_virtual_node_sizes(spec: str, size: int, want: tuple[int, ...]) -> None:
    assert virtual_node_sizes(spec, size) == want
    assert virtual_node_of(spec, size) == tuple(n for n, k in enumerate(want) for _ in range(k))


@pytest.mark.parametrize(("spec", "size", "message"), [
    ("two", 4, "neither a node count"), ("0", 4, "positive"), ("5", 4, "asks for 5 nodes"),
    ("2,2", 5, "add up to 4"), ("2,-1,4", 5, "positive"),
])
def test_bad_virtual_node_specs_name_the_variable(spec: str, size: int, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message) as info:
        virtual_node_sizes(spec, size)
    assert "MPIRING_VIRTUAL_NODES" in str(info.value)


def test_a_topology_needs_ranks() -> None:
    with pytest.raises(ValueError):
        Topology((), ())
