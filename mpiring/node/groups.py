"""The MPI communicators one mpiring communicator works on, made once at set-up.

* ``comm``: every rank (the communicator's own duplicate of the caller's);
* ``node``: the ranks of this rank's node, which share memory: the IPC staging, the host
  board and the intra-node algorithms live here;
* ``rail``: the ranks at this rank's place on every node, which the inter-node engine joins;
* ``shared``: this rank's physical node (``MPI_COMM_TYPE_SHARED``), which picks the GPU.

``node`` is ``shared`` unless ``MPIRING_VIRTUAL_NODES`` cuts the machine into virtual nodes
(a testing aid, see :mod:`mpiring.core.topology`). Every rank learns every rank's node from one
bounded allgather, so all ranks build the same :class:`~mpiring.core.topology.Topology`.

MPI makes only so many communicators per process (MPICH: 2048 context ids), and each mpiring
communicator holds :data:`MPI_PER_COMMUNICATOR` of them, so with MPICH the 512th open one cannot
be set up. :func:`out_of_communicators` turns MPI's error at that point into a
:class:`~mpiring.core.errors.SetupError` naming the limit and the communicators this process holds.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

from mpi4py import MPI

from ..core import settings as environment
from ..core.consensus import check_setup
from ..core.errors import SetupError
from ..core.topology import VIRTUAL_NODES, Topology, from_node_keys, virtual_node_of
from .setup_steps import allgather, join

# What one mpiring communicator holds of MPI's communicators: its duplicate of the caller's, its
# node's (one more under MPIRING_VIRTUAL_NODES), its rail's, and its node shared-memory window
# (MPI_Win_allocate_shared makes a communicator of its own). Measured with MPICH 5.0 from PyPI:
# 2048 context ids per process, the 512th open mpiring communicator fails.
MPI_PER_COMMUNICATOR = 4
MPICH_CONTEXT_IDS = 2048
_SIGNS = ("too many communicators", "context id", "contextid", "out of resource")
_open = 0  # Groups made and not freed in this process: the mpiring communicators that hold MPI ones


def open_communicators() -> int:
    """How many mpiring communicators of this process hold MPI communicators (made, not freed)."""
    return _open


def _exhausted(text: str, committed_dup: bool) -> bool:
    """Whether MPI's error ``text`` says it has no communicator left. A nonblocking duplicate
    only says "Other MPI error" (MPICH), from the schedule of its nonblocking agreement on a
    context id. Where every rank had committed to that duplicate (``committed_dup``:
    :func:`duplicate`), an id free on every rank is all it needs, so that error from that
    schedule is this: a probe of this process alone could still succeed (its free ids may not
    be another rank's). Elsewhere this process tries to make one of its own."""
    lower = text.lower()
    if any(sign in lower for sign in _SIGNS):
        return True
    if committed_dup and "other mpi error" in lower and "sched" in lower:
        return True
    try:
        MPI.COMM_SELF.Dup().Free()  # local: needs a context id of this process only
    except MPI.Exception:
        return True
    return False


@contextlib.contextmanager
def out_of_communicators(rank: int, committed_dup: bool = False) -> Iterator[None]:
    """Around a set-up step that makes an MPI communicator: where MPI has run out of them, raise
    a :class:`SetupError` that says so and names the limit, instead of MPI's own error (every
    rank meets it in the same collective); MPI's other errors pass unchanged. ``committed_dup``:
    the step is a duplicate every rank has committed to (:func:`duplicate`)."""
    try:
        yield
    except MPI.Exception as err:
        text = err.Get_error_string()
        if not _exhausted(text, committed_dup):
            raise
        last = [line.strip() for line in text.splitlines() if line.strip()][-1]
        held = open_communicators()
        raise SetupError(
            f"rank {rank}: MPI cannot make another communicator ({last}): this process holds {held} "
            f"other open mpiring communicator(s), each holding {MPI_PER_COMMUNICATOR} MPI communicators "
            f"(a duplicate, its node's, its rail's and its shared-memory window's), and MPI makes a "
            f"bounded number per process (MPICH: {MPICH_CONTEXT_IDS} context ids, so at most about "
            f"{MPICH_CONTEXT_IDS // MPI_PER_COMMUNICATOR - 1} mpiring communicators): close() the "
            "communicators no longer used (or use 'with'), or share one") from None


def duplicate(comm: MPI.Intracomm, timeout: float) -> MPI.Intracomm:
    """The communicator's own duplicate of ``comm`` (:func:`mpiring.node.setup_steps.join`: bounded,
    names the ranks that never arrive), where MPI running out of communicators is named."""
    with out_of_communicators(comm.rank, committed_dup=True):
        return join(comm, timeout)


@dataclass
class Groups:
    comm: MPI.Intracomm
    node: MPI.Intracomm
    rail: MPI.Intracomm
    shared: MPI.Intracomm
    topology: Topology
    virtual: bool
    _freed: bool = field(default=False, init=False, repr=False)

    @property
    def node_ranks(self) -> tuple[int, ...]:
        """The communicator ranks of this rank's node, by place: ``node_ranks[p]`` is the rank
        at place ``p`` (what node-local rank numbers mean in messages)."""
        topo = self.topology
        return topo.node_ranks(topo.node_of[self.comm.rank])

    @property
    def spans_nodes(self) -> bool:
        return self.topology.nodes > 1

    def __post_init__(self) -> None:
        global _open
        _open += 1

    def free(self) -> None:
        """Free the communicators made here (not ``comm``: its owner frees it)."""
        global _open
        if not self._freed:
            self._freed, _open = True, _open - 1
        for group in {id(g): g for g in (self.rail, self.node, self.shared)}.values():
            if group != MPI.COMM_NULL:
                group.Free()


def make_groups(comm: MPI.Intracomm, timeout: float, settings: dict[str, object] | None = None) -> Groups:
    """Collective over ``comm`` (bounded exchange, then blocking splits with every rank present):
    find the nodes and make the node, rail and physical-node communicators. The same exchange
    carries every rank's set-up ``settings``: if they differ, every rank raises the same
    SetupError (:mod:`mpiring.core.consensus`) before any shared memory is carved."""
    rank = comm.rank
    with out_of_communicators(rank):
        shared = cast(MPI.Intracomm, comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank))
    try:
        physical = min(allgather(shared, rank, timeout, "name its physical node"))
        spec = environment.text(VIRTUAL_NODES) or ""
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
        made: list[MPI.Intracomm] = []  # freed again if a later step fails
        try:
            with out_of_communicators(rank):
                node = cast(MPI.Intracomm, comm.Split(topo.node_of[rank], key=rank)) if spec else shared
                made += [node] if spec else []
                rail = cast(MPI.Intracomm, comm.Split(topo.local_of[rank], key=rank))
                made.append(rail)
                # MPICH crashes (SIGSEGV) in MPI_Win_allocate_shared when no communicator is left,
                # so prove here that the node's window (made next, mpiring.node.control) will get one.
                node.Dup().Free()
        except BaseException:
            for group in made:
                group.Free()
            raise
    except BaseException:
        shared.Free()
        raise
    return Groups(comm, node, rail, shared, topo, bool(spec))
