"""``mpi-twoshot``: host arrays reduced in rank order over MPI, the row of ``reproducible=True``
for host arrays (on one node or many).

Per chunk of the message: every rank's shard for owner j goes to j (``MPI_Ialltoallv``, the
reduce-scatter shot); each owner reduces the n copies of its shard in rank order, accumulating
in float32 for 2-byte floats, and rounds once (:func:`mpiring.core.reproducible.reference`, exactly);
the owners' results go to every rank (``MPI_Iallgatherv`` in place, the all-gather shot).
``Reduce_scatter_block`` is the first shot with shards = blocks; ``Allgather`` moves bytes only.

Memory: one staging buffer of ``min(slot_bytes, 1 GiB)`` bytes per communicator (1 MiB by
default), made at the row's first call and kept until ``close``; a message larger than the
staging runs in chunks. Every MPI operation is nonblocking and polled, so the timeout bounds it
(a whole operation: MPI shows no progress inside one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
from mpi4py import MPI

from ..core.reproducible import accumulation_dtype
from .base import HOST, Algorithm, Call, CallShape, Scope, SmWork

if TYPE_CHECKING:
    from ..context.base import Backend
    from ..context.host import HostBackend

NAME = "mpi-twoshot"
MAX_STAGING_BYTES = 1 << 30  # per-peer byte counts stay below MPI's 2**31


@dataclass
class Staging:
    """The row's per-communicator memory: ``raw`` bytes, cut per call into the n received
    shards and, for 2-byte floats, two float32 rows (the accumulator and one widened shard)."""

    raw: np.ndarray

    def shard_capacity(self, size: int, dtype: np.dtype) -> int:
        """The most elements of one shard a chunk may have, for ``size`` ranks."""
        wide = accumulation_dtype(dtype)
        extra = 2 * wide.itemsize if wide != dtype else 0
        return max(1, self.raw.nbytes // (size * dtype.itemsize + extra))

    def views(self, size: int, shard: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray | None,
                                                                     np.ndarray | None]:
        """(the n shards as rows, the accumulator, the widened shard) for shards of ``shard``."""
        received = self.raw[:size * shard * dtype.itemsize].view(dtype).reshape(size, shard)
        wide = accumulation_dtype(dtype)
        if wide == dtype:
            return received, None, None
        at = size * shard * dtype.itemsize
        at += -at % wide.itemsize  # aligned
        rows = self.raw[at:at + 2 * shard * wide.itemsize].view(wide).reshape(2, shard)
        return received, rows[0], rows[1]


def _host(backend: Backend) -> HostBackend:
    return cast("HostBackend", backend)  # the row serves host arrays only (its memory column)


def _staging(backend: HostBackend) -> Staging:
    return backend.state(NAME, lambda: Staging(np.empty(min(backend.slot_bytes, MAX_STAGING_BYTES),
                                                        dtype=np.uint8)))


def _flat_bytes(array: np.ndarray) -> np.ndarray:
    return array.reshape(-1).view(np.uint8)


def _wait(backend: HostBackend, request: MPI.Request, what: str, *buffers: np.ndarray) -> None:
    backend.waiter.request(request, lambda: f"every rank to join {NAME}'s {what}", buffers=buffers)


def _shards(m: int, size: int) -> tuple[int, list[int], list[int]]:
    """Shard length and the (counts, starts) of ``size`` shards covering ``m`` elements."""
    shard = -(-m // size)
    starts = [min(s * shard, m) for s in range(size)]
    counts = [min(shard, m - lo) for lo in starts]
    return shard, counts, starts


def _reduce_in_rank_order(call: Call, received: np.ndarray, acc: np.ndarray | None,
                          wide: np.ndarray | None, out: np.ndarray) -> None:
    """``out = received[0] op received[1] op ... op received[n-1]``, left to right, in the
    accumulation type, rounded once (mpiring.core.reproducible.reference)."""
    fold = call.op.ufunc  # the dispatcher runs avg as sum, then divides
    if acc is None:  # accumulate in the type itself, straight into the output
        np.copyto(out, received[0])
        for r in range(1, len(received)):
            fold(out, received[r], out=out)
        return
    assert wide is not None  # made with acc (Staging.views)
    np.copyto(acc, received[0])
    for r in range(1, len(received)):
        np.copyto(wide, received[r])
        fold(acc, wide, out=acc)
    np.copyto(out, acc, casting="unsafe")  # rounded to the type once


def _reduce_scatter_chunk(backend: HostBackend, call: Call, source: np.ndarray, lo: int, length: int,
                          block: int, out: np.ndarray, staging: Staging) -> None:
    """Elements [lo, lo + length) of every rank's block r: rank r receives them from every rank
    and writes their rank-ordered reduction into ``out`` (``length`` elements)."""
    size, dtype = backend.size, call.recv.dtype
    item = dtype.itemsize
    received, acc, wide = staging.views(size, length, dtype)
    counts = [length * item] * size
    send = ([_flat_bytes(source), (counts, [(s * block + lo) * item for s in range(size)]), MPI.BYTE])
    recv = [_flat_bytes(received), (counts, [r * length * item for r in range(size)]), MPI.BYTE]
    _wait(backend, backend.comm.Ialltoallv(send, recv), "reduce-scatter", source, received)
    _reduce_in_rank_order(call, received, None if acc is None else acc[:length],
                          None if wide is None else wide[:length], out)


def sm_work(shape: CallShape) -> SmWork:
    """No SMs (host arrays). The fold of :func:`_reduce_in_rank_order`, per element of this
    rank's shard (``1 / n`` of the message on average) of ``s`` bytes: in the type itself, a
    copy of the first row (``2s``) and ``n - 1`` in-place folds (``3s`` each): ``(3n - 1) / n``
    bytes per byte; widened to ``w``-byte floats (2-byte floats): the first row widened
    (``s + w``), per further row a widening copy (``s + w``) and a fold (``3w``), the rounding
    copy (``w + s``): ``(2(s + w) + (n - 1)(s + 4w)) / (s n)``, ``(9n - 3) / n`` for w = 2s."""
    if not shape.count:
        return SmWork(0, None)
    n = shape.ranks if shape.comm_ranks is None else shape.comm_ranks  # it shards over them all
    s, w = shape.itemsize, accumulation_dtype(shape.dtype).itemsize
    if w == s:
        return SmWork(0, (3 * n - 1) / n)
    return SmWork(0, (2 * (s + w) + (n - 1) * (s + 4 * w)) / (s * n))


def run(backend: Backend, call: Call) -> None:
    """Allreduce: per chunk, reduce-scatter into shards, reduce each in rank order, all-gather."""
    host = _host(backend)
    size, dtype = host.size, call.recv.dtype
    out = call.recv.array.reshape(-1)
    source = call.source.array.reshape(-1)
    staging = _staging(host)
    chunk = staging.shard_capacity(size, dtype) * size
    item = dtype.itemsize
    with np.errstate(all="ignore"):  # IEEE results and integer wrap-around, as the GPU rows
        for base in range(0, out.size, chunk):
            m = min(chunk, out.size - base)
            shard, counts, starts = _shards(m, size)
            received, acc, wide = staging.views(size, shard, dtype)
            byte_counts = [c * item for c in counts]
            send = [_flat_bytes(source[base:base + m]), (byte_counts, [s * item for s in starts]), MPI.BYTE]
            mine = counts[host.rank]
            recv = [_flat_bytes(received), ([mine * item] * size, [r * shard * item for r in range(size)]),
                    MPI.BYTE]
            _wait(host, host.comm.Ialltoallv(send, recv), "reduce-scatter", source, received)
            lo = base + starts[host.rank]
            # This rank's Ialltoallv has completed: its chunk of input is sent, so (in place)
            # the reduced shard may overwrite it.
            _reduce_in_rank_order(call, received[:, :mine], None if acc is None else acc[:mine],
                                  None if wide is None else wide[:mine], out[lo:lo + mine])
            gathered = [_flat_bytes(out[base:base + m]), (byte_counts, [s * item for s in starts]), MPI.BYTE]
            _wait(host, host.comm.Iallgatherv(MPI.IN_PLACE, gathered), "all-gather", out)


def reduce_scatter(backend: Backend, call: Call) -> None:
    """``Reduce_scatter_block``: the first shot, with every rank's block as its shard."""
    host = _host(backend)
    size, dtype = host.size, call.recv.dtype
    out = call.recv.array.reshape(-1)
    source = call.source.array.reshape(-1)
    block = source.size // size
    staging = _staging(host)
    step = staging.shard_capacity(size, dtype)
    with np.errstate(all="ignore"):
        # In place the result recv[:block] overlaps the input's block 0: its chunk [lo, hi) is
        # written only after this rank's Ialltoallv of that chunk has completed (sent it), and
        # later chunks read only beyond hi.
        for lo in range(0, block, step):
            length = min(step, block - lo)
            _reduce_scatter_chunk(host, call, source, lo, length, block, out[lo:lo + length], staging)


def allgather(backend: Backend, call: Call) -> None:
    """``Allgather``: bytes moved, nothing reduced (the same bits from every row)."""
    host = _host(backend)
    recv = _flat_bytes(call.recv.array)
    send = MPI.IN_PLACE if call.send is None else [_flat_bytes(call.send.array), MPI.BYTE]
    _wait(host, host.comm.Iallgather(send, [recv, MPI.BYTE]), "all-gather", recv)


ROW = Algorithm(
    NAME, 11, HOST, run,
    summary="MPI two-shot: each rank's shards to their owners (`MPI_Ialltoallv`), each owner reduces "
            "its shard in rank order, the shards to every rank (`MPI_Iallgatherv`)",
    best_for="host arrays with `reproducible=True` (the same bits at every size)",
    scope=Scope.ANY, reduce_scatter=reduce_scatter, allgather=allgather, rank_ordered=True,
    sm_work=sm_work,
)
