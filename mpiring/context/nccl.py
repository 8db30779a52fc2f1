"""The NCCL baselines, run through mpiring's API so the benchmark compares like with like.

* ``nccl``: ``ncclAllReduce`` (and ``ncclReduceScatter``, ``ncclAllGather`` with MPI's
  buffer rules, for ``Reduce_scatter_block`` and ``Allgather``).
* ``nccl-ring``: the AsyncAllReduce paper's baseline: the same ring schedule as mpiring, each
  step one ``ncclSend``/``ncclRecv`` pair inside ``ncclGroupStart``/``ncclGroupEnd``, followed
  by the fold kernel, everything on one stream. Reduce-scatter receives into a dedicated
  staging buffer (``staging_bytes``, so memory stays bounded); all-gather receives straight
  into the output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ..core.buffers import Buffer
from ..core.collective import Collective
from ..core.errors import SetupError, UnavailableError
from ..core.install import cuda_choices
from ..core.ops import Op
from ..ring.schedule import RingPlan, Source


def nccl_module():
    """CuPy's NCCL bindings, or raise :class:`UnavailableError` naming what is missing."""
    try:
        from cupy.cuda import nccl
    except ImportError as err:
        raise UnavailableError(
            f"NCCL is unavailable ({err}): install the extra of your CUDA major, which brings the "
            f"nvidia-nccl wheel: {cuda_choices()}"
        ) from None
    if not getattr(nccl, "available", True):
        raise UnavailableError("NCCL is unavailable: CuPy was built without NCCL support")
    return nccl


class NcclBaselines:
    """One NCCL communicator over the ranks of ``comm`` plus the nccl-ring staging buffer."""

    def __init__(self, comm: MPI.Intracomm, staging_bytes: int, fold_kernel) -> None:
        import cupy

        ok, problem = True, None
        try:
            nccl = nccl_module()
        except UnavailableError as err:
            ok, problem = False, str(err)
        if not comm.allreduce(ok, op=MPI.LAND):
            raise UnavailableError(problem or "NCCL is unavailable on another rank")
        self.nccl = nccl
        uid = nccl.get_unique_id() if comm.rank == 0 else None
        uid = comm.bcast(uid, root=0)
        try:
            self.comm = nccl.NcclCommunicator(comm.size, uid, comm.rank)
        except nccl.NcclError as err:
            raise SetupError(f"ncclCommInitRank failed on rank {comm.rank}: {err}") from None
        self.rank, self.size = comm.rank, comm.size
        self.staging = cupy.empty(staging_bytes, dtype=np.uint8)  # dedicated, made once
        self.kernel = fold_kernel
        self.dtypes = {
            "float16": nccl.NCCL_FLOAT16, "float32": nccl.NCCL_FLOAT32,
            "float64": nccl.NCCL_FLOAT64, "int32": nccl.NCCL_INT32, "int64": nccl.NCCL_INT64,
            "bfloat16": getattr(nccl, "NCCL_BFLOAT16", 9),
        }
        self.ops = {Op.SUM: nccl.NCCL_SUM, Op.PROD: nccl.NCCL_PROD, Op.MAX: nccl.NCCL_MAX,
                    Op.MIN: nccl.NCCL_MIN, Op.AVG: getattr(nccl, "NCCL_AVG", 4)}  # ncclAvg

    def allreduce(self, send: int, recv: int, count: int, dtype: np.dtype, op: Op, stream) -> None:
        """``ncclAllReduce`` on raw pointers (``send == recv`` for in place)."""
        self.comm.allReduce(send, recv, count, self.dtypes[dtype.name], self.ops[op], stream.ptr)

    def bind_allreduce(self, send: int, recv: int, count: int, dtype: np.dtype, op: Op,
                       stream: Callable[[], Any]) -> Callable[[], None]:
        """:meth:`allreduce` with every argument fixed but the stream, ``stream()`` at each call."""
        all_reduce, nccl_dtype, nccl_op = self.comm.allReduce, self.dtypes[dtype.name], self.ops[op]

        def enqueue() -> None:
            all_reduce(send, recv, count, nccl_dtype, nccl_op, stream().ptr)
        return enqueue

    def run(self, collective: Collective, send: Buffer | None, recv: Buffer, op: Op, stream) -> None:
        """One collective with MPI's buffer rules (``send`` None: ``MPI.IN_PLACE``)."""
        nd, item, s = self.dtypes[recv.dtype.name], recv.dtype.itemsize, stream.ptr
        if collective is Collective.ALLREDUCE:
            src = recv.address if send is None else send.address
            self.comm.allReduce(src, recv.address, recv.count, nd, self.ops[op], s)
        elif collective is Collective.REDUCE_SCATTER:
            if send is not None:
                self.comm.reduceScatter(send.address, recv.address, recv.count, nd, self.ops[op], s)
                return
            # In place, NCCL leaves block r at its place; MPI wants it at the start of recvbuf.
            m = recv.count // self.size
            mine = recv.address + self.rank * m * item
            self.comm.reduceScatter(recv.address, mine, m, nd, self.ops[op], s)
            if self.rank and m:
                import cupy

                rt = cupy.cuda.runtime
                rt.memcpyAsync(recv.address, mine, m * item, rt.memcpyDeviceToDevice, s)
        else:
            m = recv.count // self.size
            src = recv.address + self.rank * m * item if send is None else send.address
            self.comm.allGather(src, recv.address, m, nd, s)

    def ring(self, plan: RingPlan, send: int, recv: int, dtype: np.dtype, op: Op, stream) -> None:
        """The paper's baseline: ring reduce-scatter + all-gather of send/recv pairs and a fold."""
        nccl, item = self.nccl, dtype.itemsize
        nd = self.dtypes[dtype.name]
        nxt, prv = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        fn = self.kernel.function(dtype, op)
        tmp = self.staging.data.ptr
        for tr in plan.transfers(self.rank):
            src = (send if tr.source is Source.INPUT else recv) + tr.send_start * item
            dst = recv + tr.recv_start * item
            nccl.groupStart()
            self.comm.send(src, tr.send_count, nd, nxt, stream.ptr)
            self.comm.recv(tmp if tr.reduce else dst, tr.recv_count, nd, prv, stream.ptr)
            nccl.groupEnd()
            if tr.reduce:
                self.kernel.launch(fn, dst, send + tr.recv_start * item, tmp, tr.recv_count, item,
                                   stream)

    def close(self) -> None:
        self.comm.destroy()
        self.staging = None

    def abort(self) -> None:
        """After a failure: tear the NCCL communicator down without waiting for peers."""
        self.comm.abort()
        self.staging = None
