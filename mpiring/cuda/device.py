"""Binding each rank to its GPU, and the checks that make CUDA IPC possible at all.

CUDA IPC can only open memory of a GPU the process can see, so every rank must see every
rank's GPU. Per-task GPU binding (Slurm's ``--gpus-per-task``/``--gpu-bind``, or a wrapper
setting ``CUDA_VISIBLE_DEVICES`` per rank) hides them; this module says so, by name, at set-up.
"""

from __future__ import annotations

import os

from mpi4py import MPI

from ..core import settings
from ..core.buffers import Buffer
from ..core.errors import InvalidArgumentError, SetupError
from ..node.setup_steps import allgather

REMEDY = (
    "make every GPU of the node visible to every rank (no per-rank CUDA_VISIBLE_DEVICES; with "
    "Slurm use --gpus-per-node and --gpu-bind=none, not --gpus-per-task) and let mpiring pick "
    "the GPU by node rank, or pass device="
)


_PROCESS_DEVICE: int | None = None  # the GPU the first communicator of this process chose

# Testing aid: several ranks of a node may share one GPU (correctness only, never speed). CUDA
# IPC works between processes on one GPU; run them under MPS (nvidia-cuda-mps-control -d), or
# their contexts time-slice and every cross-rank wait costs milliseconds. NCCL refuses two
# ranks on one GPU, so the NCCL rows are unavailable then (Backend.unavailable).
SHARE_GPU = "MPIRING_SHARE_GPU"


def share_gpu_allowed() -> bool:
    """Whether ``MPIRING_SHARE_GPU=1`` lets ranks of a node share a GPU (a testing aid)."""
    return bool(settings.flag(SHARE_GPU))


def bind_device(node: MPI.Intracomm, place: int, device: int | None,
                timeout: float) -> tuple[int, bool, tuple[str, ...]]:
    """Choose and activate this rank's GPU; collective over ``node``, the ranks that will map
    each other's memory (bounded by ``timeout``), raises on every rank. Default: the GPU of
    this process's first communicator, else ``place``, the rank's place on its machine, so
    communicators from reordered splits keep the process's GPU. Returns the GPU's index,
    whether some ranks of the node share a GPU (only with ``MPIRING_SHARE_GPU=1``), and the PCI
    bus ids of every node rank's GPU, by node rank (what :mod:`mpiring.auto.machine` reads)."""
    import cupy

    rt = cupy.cuda.runtime
    global _PROCESS_DEVICE
    visible = rt.getDeviceCount()
    problem = None
    if device is not None:
        chosen = int(device)
    elif _PROCESS_DEVICE is not None:  # a later communicator (e.g. from Split): the same GPU
        chosen = _PROCESS_DEVICE
    else:
        chosen = place % max(visible, 1)
    if not 0 <= chosen < visible:
        problem = (f"rank {node.rank} asked for GPU {chosen} but sees {visible} GPU(s) "
                   f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')})")
    bus = rt.deviceGetPCIBusId(chosen).lower() if problem is None else None
    seen = [rt.deviceGetPCIBusId(i).lower() for i in range(visible)]
    everyone = allgather(node, (problem, bus, seen, share_gpu_allowed()), timeout, "say which GPU it uses")
    problems = [p for p, _, _, _ in everyone if p]
    if problems:
        raise SetupError("; ".join(problems) + ": " + REMEDY)
    allowed = {a for _, _, _, a in everyone}
    if len(allowed) > 1:
        raise SetupError(f"ranks see different {SHARE_GPU} values: set it alike on every rank")
    sharing = allowed == {True}
    owners: dict[str, int] = {}
    shared = False
    for r, (_, b, _, _) in enumerate(everyone):
        if b in owners and sharing:
            shared = True
        elif b in owners:
            raise SetupError(
                f"ranks {owners[b]} and {r} both use GPU {b}: mpiring needs one GPU per rank. "
                f"Start at most as many ranks per node as GPUs, or pass distinct device= values "
                f"({SHARE_GPU}=1 allows sharing, for testing only)"
            )
        owners.setdefault(b, r)
    for r, (_, _, their_view, _) in enumerate(everyone):
        for s, (_, b, _, _) in enumerate(everyone):
            if b not in their_view:
                raise SetupError(
                    f"rank {r} cannot see GPU {b} of rank {s}, so CUDA IPC cannot map it: {REMEDY}"
                )
    cupy.cuda.Device(chosen).use()
    if _PROCESS_DEVICE is None:
        _PROCESS_DEVICE = chosen
    return chosen, shared, tuple(str(b) for _, b, _, _ in everyone)


# cudaMemoryType values reported by cudaPointerGetAttributes.
_MEMORY_TYPES = {0: "unregistered host memory", 1: "pinned host memory", 2: "device memory",
                 3: "CUDA managed memory"}


def check_device_pointer(buf: Buffer, device_id: int, role: str = "buffer") -> None:
    """Raise unless ``buf`` is plain device memory on ``device_id``."""
    if buf.count == 0:
        return
    import cupy

    try:
        attrs = cupy.cuda.runtime.pointerGetAttributes(buf.address)
    except cupy.cuda.runtime.CUDARuntimeError as err:
        raise InvalidArgumentError(f"{role} at {buf.address:#x} is not CUDA memory ({err})") from None
    kind = int(attrs.type)
    if kind != 2:
        raise InvalidArgumentError(
            f"{role} is in {_MEMORY_TYPES.get(kind, f'memory of type {kind}')}, which mpiring does "
            "not support: pass plain device memory (cudaMalloc / CuPy / torch allocations)"
        )
    if int(attrs.device) != device_id:
        raise InvalidArgumentError(
            f"{role} lives on GPU {attrs.device} but this rank's communicator uses GPU {device_id}: "
            "allocate it on this rank's GPU (cupy.cuda.Device(comm.device).use())"
        )
