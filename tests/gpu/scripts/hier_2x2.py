"""4 ranks on 2 GPUs as 2 virtual nodes x 2 (run by tests/gpu/test_gpu_hier_jobs.py):

    MPIRING_VIRTUAL_NODES=2 mpirun -n 4 python hier_2x2.py

Node 0 is ranks 0, 1 on GPUs 0, 1; node 1 is ranks 2, 3 on GPUs 1, 0, so the rails {0, 2} and
{1, 3} each join two different GPUs (NCCL refuses a communicator that holds one GPU twice) and
each node's ring joins two different GPUs. Correctness only: two ranks share each GPU.
Prints "HIER 2x2 OK <calls>" on rank 0 when every call on every rank was exact; exits 1 else.
"""

from __future__ import annotations

import sys

import cupy
from mpi4py import MPI

import mpiring

world = MPI.COMM_WORLD
rank = world.rank
node, place = divmod(rank, 2)
gpus = cupy.cuda.runtime.getDeviceCount()
device = (place + node) % gpus

comm = mpiring.Communicator(world, gpu=True, device=device, inter="nccl", timeout=60.0)
assert comm.topology.describe() == "2 nodes of 2 ranks", comm.topology.describe()
problems = []
calls = 0
for dtype in ("float16", "float32", "float64", "int32", "int64"):
    for op in mpiring.Op:
        if op is mpiring.Op.AVG and dtype.startswith("int"):
            continue  # avg is for floating types (refused on integers)
        for n in (1, 3, 7919, (1 << 20) + 5, 1 << 24):
            for in_place in (False, True):
                span = 2 if op is mpiring.Op.PROD else 8
                idx = cupy.arange(n, dtype=cupy.int64)
                x = ((idx * (2 * rank + 3) + 11 * rank + n) % (2 * span + 1) - span).astype(dtype)
                want = None
                for r in range(world.size):
                    v = ((idx * (2 * r + 3) + 11 * r + n) % (2 * span + 1) - span).astype(cupy.float64)
                    want = v if want is None else {mpiring.Op.SUM: cupy.add, mpiring.Op.PROD: cupy.multiply,
                                                   mpiring.Op.MAX: cupy.maximum,
                                                   mpiring.Op.MIN: cupy.minimum,
                                                   mpiring.Op.AVG: cupy.add}[op](want, v)
                if op is mpiring.Op.AVG:
                    want = want / world.size  # sums of small integers over 4: exact in every float
                out = x if in_place else cupy.full(n, -99, dtype=dtype)
                comm.Allreduce(MPI.IN_PLACE if in_place else x, out, op)  # auto: hier across nodes
                calls += 1
                wrong = int(cupy.count_nonzero(out.astype(cupy.float64) != want))
                if wrong:
                    problems.append(f"rank {rank}: {dtype} {op.name} n={n} in_place={in_place}: "
                                    f"{wrong} wrong")
comm.synchronize()
comm.close()
everyone = world.gather(problems, root=0)
if rank == 0:
    bad = [p for ps in everyone for p in ps]
    print("\n".join(bad[:20]) if bad else f"HIER 2x2 OK {calls}", flush=True)
    sys.exit(1 if bad else 0)
