"""The event-signalled ring's own IPC staging: two receive slots and four interprocess events
per rank, exported with ``cudaIpcGetMemHandle``/``cudaIpcGetEventHandle`` and exchanged in one
allgather on the node communicator (the seed's design).

Events per rank: ``full[k]``, recorded on this rank's copy stream after it copied into the
next rank's slot k; ``free[k]``, recorded on its fold stream after it folded its own slot k.
Each rank maps the next rank's slots and opens the previous rank's ``full`` and the next
rank's ``free`` events. A dedicated allocation (not the main staging's ring slots): two ring
protocols must never share slots, since neither would wait for the other's reader.
"""

from __future__ import annotations

from mpi4py import MPI

from ..core.errors import SetupError
from ..node.setup_steps import allgather
from ..node.signals import Waiter
from .layout import ALLOC_ALIGN
from .resources import LIVE


class EventStaging:
    """This rank's slots and events, and its neighbours' as opened here. Set-up and close are
    collective over the node and bounded by ``timeout``."""

    def __init__(self, node: MPI.Intracomm, slot_bytes: int, timeout: float) -> None:
        import cupy

        self._rt = rt = cupy.cuda.runtime
        self.node = node
        self.rank, self.size = node.rank, node.size
        self.next, self.prev = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        self.slot_bytes = slot_bytes
        self.waiter = Waiter(timeout, self.rank)
        self.base = 0
        self.full_events: list[int] = []
        self.free_events: list[int] = []
        self._opened_mem: list[int] = []
        self._opened_events: list[int] = []
        flags = rt.eventDisableTiming | rt.eventInterprocess
        self.base = rt.malloc(-(-2 * slot_bytes // ALLOC_ALIGN) * ALLOC_ALIGN)
        LIVE["staging"] += 1
        self.full_events = [rt.eventCreateWithFlags(flags) for _ in range(2)]
        self.free_events = [rt.eventCreateWithFlags(flags) for _ in range(2)]
        LIVE["events"] += 4
        self.own_slots = [self.base + k * slot_bytes for k in range(2)]
        mine = (rt.ipcGetMemHandle(self.base),
                [rt.ipcGetEventHandle(e) for e in self.full_events + self.free_events], slot_bytes)
        # The one exchange of handles: memory and events together, no files, no mutex.
        everyone = allgather(node, mine, timeout, "exchange CUDA IPC handles of the event ring")
        if len({s for _, _, s in everyone}) != 1:
            raise SetupError(f"ranks asked for different ring slot sizes: {[s for _, _, s in everyone]}")
        problem = None
        self.next_slots = list(self.own_slots)
        self.prev_full, self.next_free = list(self.full_events), list(self.free_events)
        if self.size > 1:
            try:
                ptr = rt.ipcOpenMemHandle(everyone[self.next][0])
                self._opened_mem.append(ptr)
                LIVE["ipc_mappings"] += 1
                self.next_slots = [ptr + k * slot_bytes for k in range(2)]
                self.prev_full = [self._open_event(h) for h in everyone[self.prev][1][:2]]
                self.next_free = [self._open_event(h) for h in everyone[self.next][1][2:]]
            except rt.CUDARuntimeError as err:
                problem = f"rank {self.rank} could not open a neighbour's IPC handle ({err})"
        problems = [p for p in allgather(node, problem, timeout, "open the event ring's handles") if p]
        if problems:
            self.close(abandon=True)
            raise SetupError("; ".join(problems))

    def _open_event(self, handle: bytes) -> int:
        event = self._rt.ipcOpenEventHandle(handle)
        self._opened_events.append(event)
        LIVE["events"] += 1
        return event

    def close(self, abandon: bool = False) -> None:
        """Collective, bounded (the caller drained this rank's streams first): unmap and close
        the neighbours' handles, then, once every rank did, free ours. ``abandon``: a peer may be
        gone or still writing: unmap, keep our slots until the process ends, wait for nobody."""
        if not self.base:
            return
        rt = self._rt
        if not abandon:
            self.waiter.barrier(self.node, "every rank to finish the event ring's GPU work")
        for ptr in self._opened_mem:
            rt.ipcCloseMemHandle(ptr)
            LIVE["ipc_mappings"] -= 1
        for event in self._opened_events:
            rt.eventDestroy(event)
            LIVE["events"] -= 1
        self._opened_mem.clear()
        self._opened_events.clear()
        if abandon:
            self.base = 0  # kept: a peer may still map it (still counted in LIVE["staging"])
            return
        self.waiter.barrier(self.node, "every rank to unmap the event ring's slots")
        for event in self.full_events + self.free_events:
            rt.eventDestroy(event)
            LIVE["events"] -= 1
        self.full_events, self.free_events = [], []
        rt.free(self.base)
        self.base = 0
        LIVE["staging"] -= 1
