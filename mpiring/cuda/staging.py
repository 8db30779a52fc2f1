"""One rank's IPC staging allocation, and every peer's, mapped once per communicator.

Set-up (collective, every step bounded by the timeout): allocate a dedicated ``cudaMalloc``
(not CuPy's pool: an IPC handle names a whole allocation), zero its control words, exchange
the memory handles in one ``allgather`` on the node communicator (no files, no mutex), open
every peer's handle, and prove peer access by writing into every peer and reading back what
arrived.

The allocation holds staging data and sequence flags only, never user data at rest: any
process holding the handle can read and write it, which is why handles stay inside the
node communicator of one job.
"""

from __future__ import annotations

import logging
from typing import Generic, Protocol, TypeVar

import numpy as np
from mpi4py import MPI

from ..core.errors import SetupError
from ..node.setup_steps import allgather
from ..node.signals import Waiter
from .layout import MAX_RANKS
from .resources import LIVE

log = logging.getLogger(__name__)


PROBE_BYTES = 64  # what each rank writes into every peer to prove peer access


def agree(node: MPI.Intracomm, problem: str | None, timeout: float, what: str) -> None:
    """Collective, bounded: raise the same :class:`SetupError` on every rank if any rank had a
    problem with ``what``."""
    problems = [p for p in allgather(node, problem, timeout, what) if p]
    if problems:
        raise SetupError("; ".join(problems))


class Layout(Protocol):
    """What a staging's layout says to its set-up: :class:`~.layout.StagingLayout` (the
    communicator's) or :class:`~.alltoall_layout.AllToAllLayout` (the all-to-all two-shot's)."""

    @property
    def alloc_bytes(self) -> int: ...

    def zero_ranges(self) -> list[tuple[int, int]]: ...

    @property
    def probe_offset(self) -> int: ...


L = TypeVar("L", bound=Layout)


class IpcStaging(Generic[L]):
    """This rank's staging allocation and its mappings of every peer's, laid out by ``layout``.
    Every collective step of set-up and close is bounded by ``timeout``."""

    def __init__(self, node: MPI.Intracomm, layout: L, timeout: float) -> None:
        import cupy

        if node.size > MAX_RANKS:
            raise SetupError(f"mpiring's GPU path supports at most {MAX_RANKS} ranks per node, "
                             f"got {node.size}")
        self._rt = rt = cupy.cuda.runtime
        self.node = node
        self.rank, self.size = node.rank, node.size
        self.layout = layout
        self.waiter = Waiter(timeout, node.rank)
        self.base = 0
        self._opened: list[int] = []
        self._shared = False  # whether peers may map ours: our handle went out
        try:
            self.base = rt.malloc(layout.alloc_bytes)
            LIVE["staging"] += 1
            for offset, nbytes in layout.zero_ranges():  # every flag starts at 0 (and, in the
                rt.memset(self.base + offset, 0, nbytes)  # main staging, every oneshot-ll line)
            # ... and the probe's rows: recycled memory could hold a pattern of an earlier probe
            rt.memset(self.base + layout.probe_offset, 0, PROBE_BYTES * MAX_RANKS)
            rt.deviceSynchronize()  # set-up only: the zeros land before any peer can signal
            everyone = allgather(node, (rt.ipcGetMemHandle(self.base), layout), timeout,
                                 "exchange CUDA IPC handles")
            self._shared = True
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
                        LIVE["ipc_mappings"] += 1
                        self.bases[r] = ptr
            except rt.CUDARuntimeError as err:
                problem = f"rank {self.rank} could not open a peer's IPC handle ({err})"
            agree(node, problem, timeout, "open every peer's IPC handle")
            agree(node, self._probe_peers(cupy), timeout, "check peer-to-peer writes")
        except BaseException as err:
            self._unmap()
            if isinstance(err, SetupError):  # raised on every rank alike: meet, then free
                try:
                    self.waiter.barrier(node, "every rank to unmap the staging after a failed set-up")
                except BaseException:
                    self._keep()
                    raise err from None
                self._free()
            elif self._shared:
                self._keep()  # a peer may still map it
            else:
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
        words, at = PROBE_BYTES // 4, self.layout.probe_offset  # unused until the first call
        patterns = {
            r: (np.arange(words, dtype=np.uint32) * 2654435761 + 97 * r + 1).astype(np.uint32)
            for r in range(self.size)
        }
        try:
            src = cupy.asarray(patterns[self.rank])
            for r, base in self.bases.items():
                if r != self.rank:
                    rt.memcpy(base + at + PROBE_BYTES * self.rank, src.data.ptr, PROBE_BYTES,
                              rt.memcpyDeviceToDevice)
            rt.deviceSynchronize()  # set-up only: make the writes land
        except rt.CUDARuntimeError as err:
            return f"rank {self.rank} could not write into a peer's GPU memory ({err})"
        self.waiter.barrier(self.node, "every rank to write its peer-to-peer probe")
        got = np.empty(words * self.size, dtype=np.uint32)
        rt.memcpy(got.ctypes.data, self.base + at, got.nbytes, rt.memcpyDeviceToHost)
        bad = [r for r in range(self.size)
               if r != self.rank and not np.array_equal(got[r * words:(r + 1) * words], patterns[r])]
        self.waiter.barrier(self.node, "every rank to read its peer-to-peer probe")
        if bad:
            return (f"rank {self.rank} did not receive what ranks {bad} wrote through CUDA IPC: "
                    "peer-to-peer access is reported but does not work (check the GPU topology, "
                    "IOMMU/ACS settings, or run with algorithm='nccl')")
        return None

    def close(self, abandon: bool = False) -> None:
        """Collective, bounded: unmap peers, then (once no peer maps ours any more) free our
        allocation. The caller drains every stream of this rank that touches staging first.

        ``abandon`` (the communicator failed: a peer may be gone, or still running work
        released by the abort that writes into our staging): unmap peers, but keep our own
        allocation until the process ends, without waiting for anyone. A bounded wait that
        expires abandons the same way, then raises.
        """
        if not self.base:
            return
        try:
            if not abandon:
                self.waiter.barrier(self.node, "every rank to finish its GPU work before the staging "
                                    "is unmapped")
        finally:
            self._unmap()
        if abandon:
            self._keep()
            return
        try:
            self.waiter.barrier(self.node, "every rank to unmap the staging before it is freed")
        except BaseException:
            self._keep()
            raise
        self._free()

    def _unmap(self) -> None:
        for ptr in self._opened:
            self._rt.ipcCloseMemHandle(ptr)
            LIVE["ipc_mappings"] -= 1
        self._opened.clear()

    def _keep(self) -> None:
        """Never free our allocation: a peer may still map it (freed when the process exits)."""
        self.base = 0  # still counted live in LIVE["staging"]: it is still held

    def _free(self) -> None:
        if self.base:
            self._rt.free(self.base)
            self.base = 0
            LIVE["staging"] -= 1
