"""An alpha-beta cost model of allreduce across nodes: mpiring's ``hier`` against flat NCCL.
Pure: no MPI, no device. ``docs/scale-out.md`` explains it and plots it.

A link is ``alpha`` seconds per step plus ``bytes / beta`` seconds per step's data, ``beta``
being one GPU's bandwidth in one direction. With ``P`` ranks and ``S`` bytes:

    ring reduce-scatter or all-gather   (P - 1) * (alpha + S / (P * beta))
    ring allreduce                      2 * that
    tree allreduce (NCCL's, pipelined)  2 * ceil(log2 P) * alpha + 2 * S / beta

``hier`` on N nodes of L GPUs: ring reduce-scatter of S in the node (NVLink), allreduce of the
S / L shard along each rail (the network, the better of NCCL's ring and tree), ring all-gather
in the node. In K pieces the ring stage (reduce-scatter + all-gather) and the network stage
overlap: ``max(ring, net) + min(ring, net) / K + K * piece_cost``.

Flat NCCL runs rings (or trees) over all ``P = N * L`` ranks, one channel per NIC, so each of
a node's L NICs carries 1/L of the data: per NIC a flat ring moves ``2 (P-1)/P * S/L`` bytes,
``hier``'s rail ``2 (N-1)/N * S/L`` (half as much on 2 nodes, nearly the same on many). Every
flat ring step waits for its network hop, so its latency is ``2 (P - 1) alpha_nic``; NCCL's
tree (a chain through each node, a double binary tree between nodes) pays
``2 ceil(log2 N) alpha_nic + 2 (L - 1) alpha_nvlink`` instead.

So the model expects ``hier`` ahead of flat NCCL on few nodes (it puts fewer bytes on the
network), about even on many (the same bytes, plus its NVLink phases, which pipelining hides
in part), and behind NCCL's tree for small messages on many nodes (its ring in the node pays
an NVLink step's alpha L - 1 times each way).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """One hop: ``alpha`` seconds per step, ``beta`` bytes per second per GPU and direction."""

    alpha: float
    beta: float

    def __post_init__(self) -> None:
        if not (self.alpha >= 0 and self.beta > 0):
            raise ValueError(f"a link needs alpha >= 0 and beta > 0, got {self}")


@dataclass(frozen=True)
class Cluster:
    """``nodes`` nodes of ``gpus`` GPUs; ``nvlink``: mpiring's ring inside a node, ``nic``: one
    GPU's network between nodes, ``nccl_nvlink``: NCCL's own hop inside a node (default: the
    same as ``nvlink``)."""

    nodes: int
    gpus: int
    nvlink: Link
    nic: Link
    piece_cost: float = 20e-6  # host and GPU work per extra pipelined piece (two ring calls)
    nccl_nvlink: Link | None = None

    @property
    def nccl_node(self) -> Link:
        return self.nccl_nvlink or self.nvlink

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus


def ring_phase(nbytes: float, ranks: int, link: Link) -> float:
    """One ring reduce-scatter or all-gather of ``nbytes`` over ``ranks``."""
    if ranks <= 1:
        return 0.0
    return (ranks - 1) * (link.alpha + nbytes / (ranks * link.beta))


def ring_allreduce(nbytes: float, ranks: int, link: Link) -> float:
    return 2 * ring_phase(nbytes, ranks, link)


def tree_allreduce(nbytes: float, ranks: int, link: Link) -> float:
    if ranks <= 1:
        return 0.0
    return 2 * math.ceil(math.log2(ranks)) * link.alpha + 2 * nbytes / link.beta


def network_allreduce(nbytes: float, ranks: int, link: Link) -> float:
    """NCCL between nodes: the better of its ring and its tree."""
    return min(ring_allreduce(nbytes, ranks, link), tree_allreduce(nbytes, ranks, link))


def hier(nbytes: float, c: Cluster, pieces: int = 1) -> float:
    """``hier``: ring reduce-scatter and all-gather in the node, the network on the rails."""
    ring = 2 * ring_phase(nbytes, c.gpus, c.nvlink)
    net = network_allreduce(nbytes / c.gpus, c.nodes, c.nic)
    if pieces <= 1:
        return ring + net
    return max(ring, net) + min(ring, net) / pieces + (pieces - 1) * c.piece_cost


def best_pieces(nbytes: float, c: Cluster, most: int = 8) -> int:
    return min(range(1, most + 1), key=lambda k: hier(nbytes, c, k))


def flat(nbytes: float, c: Cluster) -> float:
    """Flat NCCL over every rank, one channel per NIC: ring or tree, whichever is faster."""
    p, n, g = c.ranks, c.nodes, c.gpus
    if n == 1:
        return network_allreduce(nbytes, p, c.nccl_node)
    ring = 2 * (p - 1) * (c.nic.alpha + nbytes / (p * g * c.nic.beta))
    tree = (2 * math.ceil(math.log2(n)) * c.nic.alpha + 2 * (g - 1) * c.nccl_node.alpha
            + 2 * nbytes / (g * c.nic.beta))
    return min(ring, tree)


def fit_ring(points: Iterable[tuple[int, float]], ranks: int) -> Link:
    """The link of a ring allreduce over ``ranks`` from measured ``(bytes, seconds)``: alpha from
    the fastest of the small messages (up to 64 KiB, or the smallest: all latency; the fastest,
    because one slow point is noise, not latency), beta from the slope between the two largest
    (all bandwidth), as alpha-beta models are read: ``t(s) = 2(P-1) alpha + 2(P-1)/P s / beta``."""
    pts = sorted((int(s), float(t)) for s, t in points)
    if len(pts) < 3 or ranks < 2:
        raise ValueError("fitting a ring needs three or more sizes and two or more ranks")
    (s1, t1), (s2, t2) = pts[-2], pts[-1]
    if s2 == s1 or t2 <= t1:
        raise ValueError("the measured times do not grow with size")
    steps = 2 * (ranks - 1)
    latency = min([t for s, t in pts if s <= SMALL] or [pts[0][1]])
    return Link(alpha=latency / steps, beta=steps * (s2 - s1) / (ranks * (t2 - t1)))


SMALL = 64 << 10  # messages up to this size measure latency


# Stated inter-node figures (docs/scale-out.md): 8 x 400 Gb/s InfiniBand per node, one NIC per
# GPU, about 45 GB/s per NIC as NCCL sees it, about 8 us per network step.
NIC_400G = Link(alpha=8e-6, beta=45e9)
