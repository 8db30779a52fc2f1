"""A toy GPU algorithm, as a contributor would add one: a ``.cu`` file, this module, one row.

"stage and sum": every rank copies its input into its own ring slot 0 of the communicator's
IPC staging, the node's ranks meet, every rank sums every rank's slot in rank order with the
kernel of ``toy_sum.cu`` (CuPy compiles it), and the ranks meet again before any slot is
reused. float32 sums only, up to one ring slot. Host-synchronous (the meetings are MPI
barriers): a test of the algorithm table, not a fast row. It touches no file of the package:
what it uses is what the GPU context offers every algorithm (``ordered_stream``, ``copy``,
``staging``, ``layout``, ``state``, ``groups``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mpiring.algorithms import GPU, Algorithm, Call
from mpiring.core.errors import InvalidArgumentError
from mpiring.core.ops import Op

SOURCE = Path(__file__).with_name("toy_sum.cu")
NAME = "toy-stage-sum"


def _kernel_and_rows(gpu):
    """What the row keeps per communicator (made at its first call): the compiled kernel and the
    device table of every rank's slot address."""
    import cupy

    kernel = cupy.RawModule(code=SOURCE.read_text()).get_function("toy_sum")
    slot = gpu.layout.ring_slot(0)
    rows = cupy.asarray([gpu.staging.addr(q, slot) for q in range(gpu.node_size)], dtype=np.uint64)
    return kernel, rows


def limit(backend) -> int:
    return backend.slot_bytes


def check(backend, call: Call) -> None:
    if call.recv.dtype != np.float32 or call.op is not Op.SUM:
        raise InvalidArgumentError(f"algorithm {NAME!r} reduces float32 sums only")


def run(backend, call: Call) -> None:
    gpu, recv = backend, call.recv
    kernel, rows = gpu.state(NAME, lambda: _kernel_and_rows(gpu))
    node, stream = gpu.groups.node, gpu.ordered_stream()
    mine = gpu.staging.addr(gpu.node_rank, gpu.layout.ring_slot(0))
    stream.synchronize()
    node.Barrier()  # every rank's earlier calls are done: no ring still uses slot 0
    if recv.count:
        gpu.copy(mine, call.source.address, recv.nbytes, stream)
    stream.synchronize()
    node.Barrier()  # every rank's input is in its slot
    if recv.count:
        blocks = min(1024, -(-recv.count // 256))
        with stream:
            kernel((blocks,), (256,), (rows, np.int32(gpu.node_size), np.int64(recv.count),
                                       recv.address))
    stream.synchronize()
    node.Barrier()  # every rank has read every slot: the next call may overwrite them


ROW = Algorithm(NAME, 98, GPU, run, summary="stage in IPC, barrier, sum every rank's slot",
                best_for="a test of the algorithm table", limit=limit, check=check)
