"""One rank's IPC staging allocation, and every peer's, mapped once per communicator.

Set-up (collective): allocate a dedicated ``cudaMalloc`` (not CuPy's pool: an IPC handle
names a whole allocation), zero its control words, exchange the memory handles in one
``allgather`` on the node communicator (no files, no mutex), open every peer's handle, and
prove peer access by writing into every peer and reading back what arrived.

The allocation holds staging data and sequence flags only, never user data at rest: any
process holding the handle can read and write it, which is why handles stay inside the
node communicator of one job.
"""

from __future__ import annotations

import logging

import numpy as np
from mpi4py import MPI

from ..errors import SetupError
from .layout import MAX_RANKS, StagingLayout

log = logging.getLogger(__name__)


def agree(node: MPI.Intracomm, problem: str | None) -> None:
    """Collective: raise the same :class:`SetupError` on every rank if any rank had a problem."""
    problems = [p for p in node.allgather(problem) if p]
    if problems:
        raise SetupError("; ".join(problems))


class IpcStaging:
    """This rank's staging allocation and its mappings of every peer's."""

    def __init__(self, node: MPI.Intracomm, layout: StagingLayout) -> None:
        import cupy

        if node.size > MAX_RANKS:
            raise SetupError(f"mpiring's GPU path supports at most {MAX_RANKS} ranks per node, "
                             f"got {node.size}")
        self._rt = rt = cupy.cuda.runtime
        self.node = node
        self.rank, self.size = node.rank, node.size
        self.layout = layout
        self.base = 0
        self._opened: list[int] = []
        try:
            self.base = rt.malloc(layout.alloc_bytes)
            rt.memset(self.base, 0, layout.control_bytes)  # every flag starts at 0
            rt.deviceSynchronize()  # set-up only: the zeros land before any peer can signal
            everyone = node.allgather((rt.ipcGetMemHandle(self.base), layout))
            handles = [h for h, _ in everyone]
            layouts = {r: lay for r, (_, lay) in enumerate(everyone)}
            if any(lay != layout for lay in layouts.values()):
                raise SetupError(
                    "ranks asked for different staging layouts (slot_bytes, or MPIRING_* tuning "
                    f"variables differ between ranks): {layouts}; give every rank the same settings"
                )
            problem = None
            self.bases = {self.rank: self.base}
            try:
                for r, handle in enumerate(handles):
                    if r != self.rank:
                        ptr = rt.ipcOpenMemHandle(handle)
                        self._opened.append(ptr)
                        self.bases[r] = ptr
            except rt.CUDARuntimeError as err:
                problem = f"rank {self.rank} could not open a peer's IPC handle ({err})"
            agree(node, problem)
            agree(node, self._probe_peers(cupy))
        except BaseException:
            self._unmap()
            self._free()
            raise

    def addr(self, rank: int, offset: int) -> int:
        """Address, in this process, of ``offset`` bytes into ``rank``'s allocation."""
        return self.bases[rank] + offset

    def _probe_peers(self, cupy) -> str | None:
        """Write a rank-specific pattern into every peer's first ring slot and read back what
        arrives: drivers can report peer access that does not work."""
        if self.size == 1:
            return None
        rt = self._rt
        words, at = 16, self.layout.ring_slot(0)  # unused until the first call
        patterns = {
            r: (np.arange(words, dtype=np.uint32) * 2654435761 + 97 * r + 1).astype(np.uint32)
            for r in range(self.size)
        }
        try:
            src = cupy.asarray(patterns[self.rank])
            for r, base in self.bases.items():
                if r != self.rank:
                    rt.memcpy(base + at + 64 * self.rank, src.data.ptr, 64, rt.memcpyDeviceToDevice)
            rt.deviceSynchronize()  # set-up only: make the writes land
        except rt.CUDARuntimeError as err:
            return f"rank {self.rank} could not write into a peer's GPU memory ({err})"
        self.node.Barrier()
        got = np.empty(words * self.size, dtype=np.uint32)
        rt.memcpy(got.ctypes.data, self.base + at, got.nbytes, rt.memcpyDeviceToHost)
        bad = [r for r in range(self.size)
               if r != self.rank and not np.array_equal(got[r * words:(r + 1) * words], patterns[r])]
        self.node.Barrier()
        if bad:
            return (f"rank {self.rank} did not receive what ranks {bad} wrote through CUDA IPC: "
                    "peer-to-peer access is reported but does not work (check the GPU topology, "
                    "IOMMU/ACS settings, or run with algorithm='nccl')")
        return None

    def close(self) -> None:
        """Collective: unmap peers, then (once no peer maps ours any more) free our allocation.
        The caller drains every stream that touches staging memory first."""
        if not self.base:
            return
        self.node.Barrier()  # no rank still reads or writes a peer's staging
        self._unmap()
        self.node.Barrier()  # every peer has unmapped ours: now it may go
        self._free()

    def _unmap(self) -> None:
        for ptr in self._opened:
            self._rt.ipcCloseMemHandle(ptr)
        self._opened.clear()

    def _free(self) -> None:
        if self.base:
            self._rt.free(self.base)
            self.base = 0
