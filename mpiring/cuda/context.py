"""Everything a communicator holds on the GPU: its device, the CUDA IPC ring, the NCCL baselines."""

from __future__ import annotations

from mpi4py import MPI

from ..buffers import Buffer
from ..ops import Op
from ..pipeline import RingPipeline
from ..schedule import RingPlan, choose_batches
from ..transports.cuda_ipc import CudaIpcTransport
from .device import bind_device, check_device_pointer
from .kernels import FoldKernel

# Two 64 MiB slots per rank. Each transfer costs a ~20 us bubble on the GPU, so big chunks pay:
# 1 GiB took 5870 / 5100 / 4640 us with 16 / 32 / 64 MiB slots on 4 H200s.
DEFAULT_SLOT_BYTES = 64 << 20


class GpuContext:
    """The GPU side of one communicator. Staging memory per rank: ``2 * slot_bytes`` (rounded
    to 2 MiB) for the ring, plus ``slot_bytes`` for nccl-ring once that algorithm is used."""

    def __init__(self, comm: MPI.Intracomm, node: MPI.Intracomm, device: int | None,
                 slot_bytes: int | None, timeout: float) -> None:
        import cupy

        self._cupy = cupy
        self.comm = comm
        self.device_id = bind_device(node, device)
        self.slot_bytes = DEFAULT_SLOT_BYTES if slot_bytes is None else int(slot_bytes)
        self.kernel = FoldKernel(self.device_id)
        self.transport = CudaIpcTransport(node, self.device_id, self.slot_bytes, timeout, self.kernel)
        self.pipeline = RingPipeline(self.transport)
        self._nccl = None

    def current_stream(self):
        """The caller's current CuPy stream, on which calls are ordered."""
        return self._cupy.cuda.get_current_stream()

    def check_buffer(self, buf: Buffer, role: str) -> None:
        """Raise unless ``buf`` is plain device memory on this rank's GPU."""
        check_device_pointer(buf, self.device_id, role)

    def baseline(self, algo: str, send: Buffer | None, recv: Buffer, op: Op,
                 batches: int | None) -> None:
        """Run ``nccl`` or ``nccl-ring`` on the caller's stream."""
        from ..baselines.nccl import NcclBaselines

        if self._nccl is None:  # collective: every rank agreed on the algorithm before this
            self._nccl = NcclBaselines(self.comm, self.slot_bytes, self.kernel)
        stream = self.current_stream()
        src = recv.address if send is None else send.address
        if algo == "nccl":
            self._nccl.allreduce(src, recv.address, recv.count, recv.dtype, op, stream)
            return
        if self.comm.size == 1:
            if send is not None:
                self._cupy.cuda.runtime.memcpyAsync(recv.address, send.address, recv.nbytes,
                                                    self._cupy.cuda.runtime.memcpyDeviceToDevice,
                                                    stream.ptr)
            return
        nb = self.ring_batches(recv.count, recv.dtype, batches)
        self._nccl.ring(RingPlan(self.comm.size, recv.count, nb), src, recv.address, recv.dtype,
                        op, stream)

    def ring_batches(self, count: int, dtype, batches: int | None) -> int:
        """Mini-batches of nccl-ring: as asked (default 1), raised so a chunk fits the staging."""
        capacity = self.slot_bytes // dtype.itemsize
        return choose_batches(count, self.comm.size, capacity, batches, 1)

    def close(self) -> None:
        if self._nccl is not None:
            self.current_stream().synchronize()
            self._nccl.close()
            self._nccl = None
        self.transport.close()
