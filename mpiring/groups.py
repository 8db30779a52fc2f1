"""The MPI communicators one mpiring communicator works on, made once at set-up.

* ``comm``: every rank (the communicator's own duplicate of the caller's);
* ``node``: the ranks of this rank's node, which share memory: the IPC staging, the host
  board and the intra-node algorithms live here;
* ``rail``: the ranks at this rank's place on every node, which the inter-node engine joins;
* ``shared``: this rank's physical node (``MPI_COMM_TYPE_SHARED``), which picks the GPU.

``node`` is ``shared`` unless ``MPIRING_VIRTUAL_NODES`` cuts the machine into virtual nodes
(a testing aid, see :mod:`mpiring.topology`). Every rank learns every rank's node from one
bounded allgather, so all ranks build the same :class:`~mpiring.topology.Topology`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import cast

from mpi4py import MPI

from .agreement import allgather
from .consensus import check_setup
from .errors import SetupError
from .topology import VIRTUAL_NODES, Topology, from_node_keys, virtual_node_of


@dataclass
class Groups:
    comm: MPI.Intracomm
    node: MPI.Intracomm
    rail: MPI.Intracomm
    shared: MPI.Intracomm
    topology: Topology
    virtual: bool

    @property
    def node_ranks(self) -> tuple[int, ...]:
        """The communicator ranks of this rank's node, by place: ``node_ranks[p]`` is the rank
        at place ``p`` (what node-local rank numbers mean in messages)."""
        topo = self.topology
        return topo.node_ranks(topo.node_of[self.comm.rank])

    @property
    def spans_nodes(self) -> bool:
        return self.topology.nodes > 1

    def free(self) -> None:
        """Free the communicators made here (not ``comm``: its owner frees it)."""
        for group in {id(g): g for g in (self.rail, self.node, self.shared)}.values():
            if group != MPI.COMM_NULL:
                group.Free()


def make_groups(comm: MPI.Intracomm, timeout: float, settings: dict[str, object] | None = None) -> Groups:
    """Collective over ``comm`` (bounded exchange, then blocking splits with every rank present):
    find the nodes and make the node, rail and physical-node communicators. The same exchange
    carries every rank's set-up ``settings``: if they differ, every rank raises the same
    SetupError (:mod:`mpiring.consensus`) before any shared memory is carved."""
    rank = comm.rank
    shared = cast(MPI.Intracomm, comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank))
    try:
        physical = min(allgather(shared, rank, timeout, "name its physical node"))
        spec = os.environ.get(VIRTUAL_NODES, "").strip()
        everyone = allgather(comm, (spec, physical, settings or {}), timeout,
                             "say which node it is on and how it is set up")
        check_setup([s for _, _, s in everyone])
        specs = {s for s, _, _ in everyone}
        if len(specs) > 1:
            raise SetupError(f"ranks see different {VIRTUAL_NODES} values ({sorted(specs)}): set it "
                             "alike for every rank (Open MPI: mpirun -x; Slurm exports it)")
        keys: list[object] = [p for _, p, _ in everyone]
        if spec:
            virtual = virtual_node_of(spec, comm.size)  # the same error on every rank
            for index in set(virtual):
                machines = {keys[r] for r in range(comm.size) if virtual[r] == index}
                if len(machines) > 1:
                    raise SetupError(f"{VIRTUAL_NODES}={spec!r} puts ranks of different machines on "
                                     f"virtual node {index}: virtual nodes only split one machine")
            keys = [("virtual", v) for v in virtual]
        topo = from_node_keys(keys)
        node = cast(MPI.Intracomm, comm.Split(topo.node_of[rank], key=rank)) if spec else shared
        rail = cast(MPI.Intracomm, comm.Split(topo.local_of[rank], key=rank))
    except BaseException:
        shared.Free()
        raise
    return Groups(comm, node, rail, shared, topo, bool(spec))
