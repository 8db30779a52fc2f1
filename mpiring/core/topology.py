"""Where the ranks of a communicator are: which node each is on, its place among its node's
ranks, and the *rails* that join the ranks with the same place across nodes. Pure: no MPI.

    topo = from_node_keys([7, 7, 3, 3])      # ranks 0,1 share one node, ranks 2,3 another
    topo.nodes, topo.node_sizes              # 2, (2, 2): nodes numbered by their first rank
    topo.node_ranks(1), topo.rail_ranks(0)   # (2, 3), (0, 2)

A hierarchical allreduce reduce-scatters inside each node, allreduces each rank's shard along
its rail (one inter-node engine call per rail), and all-gathers inside each node; that needs
nodes of equal size (``even``), or the shards of different nodes would not line up.

Virtual nodes (``MPIRING_VIRTUAL_NODES``, a testing aid) cut one machine's ranks into nodes,
so the whole hierarchy runs where there is one node: ``"2"`` makes two nodes of consecutive
ranks (sizes differing by at most one), ``"4,2,3"`` nodes of exactly those sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from .errors import InvalidArgumentError

VIRTUAL_NODES = "MPIRING_VIRTUAL_NODES"


@dataclass(frozen=True)
class Topology:
    """Per rank of the communicator (by index): its node, and its place on that node."""

    node_of: tuple[int, ...]
    local_of: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.node_of) != len(self.local_of) or not self.node_of:
            raise ValueError("a topology needs one node and one place per rank")

    @property
    def size(self) -> int:
        return len(self.node_of)

    @cached_property
    def node_sizes(self) -> tuple[int, ...]:
        counts = [0] * (max(self.node_of) + 1)
        for node in self.node_of:
            counts[node] += 1
        return tuple(counts)

    @property
    def nodes(self) -> int:
        return len(self.node_sizes)

    @property
    def even(self) -> bool:
        """Every node has as many ranks: rails of equal length join every node."""
        return len(set(self.node_sizes)) == 1

    def node_ranks(self, node: int) -> tuple[int, ...]:
        """The ranks of ``node``, in rank order (their places are 0, 1, ...)."""
        return tuple(r for r, n in enumerate(self.node_of) if n == node)

    def rail_ranks(self, place: int) -> tuple[int, ...]:
        """The ranks at ``place`` on their nodes, one per node that has such a place."""
        return tuple(r for r, p in enumerate(self.local_of) if p == place)

    def describe(self) -> str:
        """"1 node of 4 ranks", "2 nodes of 2 ranks", "3 nodes of 4, 2, 3 ranks"."""
        sizes = self.node_sizes
        nodes = f"{len(sizes)} node{'s' if len(sizes) > 1 else ''}"
        of = str(sizes[0]) if self.even else ", ".join(map(str, sizes))
        return f"{nodes} of {of} rank{'s' if sizes != (1,) else ''}"


def from_node_keys(keys: Sequence[object]) -> Topology:
    """The topology of ranks whose node is named by ``keys[rank]`` (any equal values share a
    node). Nodes are numbered in the order of their first rank; places in rank order."""
    index: dict[object, int] = {}
    places: dict[object, int] = {}
    node_of, local_of = [], []
    for key in keys:
        node_of.append(index.setdefault(key, len(index)))
        local_of.append(places.get(key, 0))
        places[key] = local_of[-1] + 1
    return Topology(tuple(node_of), tuple(local_of))


def virtual_node_sizes(spec: str, size: int) -> tuple[int, ...]:
    """The sizes of the virtual nodes that ``spec`` (``MPIRING_VIRTUAL_NODES``) asks for on a
    communicator of ``size`` ranks: ``"K"`` (K nodes, as even as possible) or ``"a,b,c"``."""
    text = spec.strip()
    where = f"{VIRTUAL_NODES}={spec!r}"
    try:
        parts = [int(p) for p in text.split(",")]
    except ValueError:
        raise InvalidArgumentError(f"{where} is neither a node count nor a comma list of node "
                                   "sizes (e.g. 2, or 4,2,3)") from None
    if any(p < 1 for p in parts):
        raise InvalidArgumentError(f"{where}: node counts and sizes must be positive")
    if len(parts) == 1:
        nodes = parts[0]
        if nodes > size:
            raise InvalidArgumentError(f"{where} asks for {nodes} nodes, but the communicator has "
                                       f"{size} rank(s)")
        base, extra = divmod(size, nodes)
        return tuple(base + (1 if i < extra else 0) for i in range(nodes))
    if sum(parts) != size:
        raise InvalidArgumentError(f"{where}: the node sizes add up to {sum(parts)}, but the "
                                   f"communicator has {size} ranks")
    return tuple(parts)


def virtual_node_of(spec: str, size: int) -> tuple[int, ...]:
    """Per rank, its virtual node: consecutive ranks fill each node in turn."""
    return tuple(node for node, n in enumerate(virtual_node_sizes(spec, size)) for _ in range(n))
