"""torch for the rivals: one NCCL process group over the MPI ranks, torch's view of CuPy's
streams, and CUDA graphs captured the torch way. Shared by the torch rivals of a run (made by
the first that sets up, closed by the last that closes).

The process group: rank and size come from MPI; rank 0 opens the rendezvous store
(``torch.distributed.TCPStore`` on a port the system picks) and broadcasts its address through
MPI: 127.0.0.1 when every rank is on rank 0's host, rank 0's host name otherwise. Then
``init_process_group("nccl", store=..., device_id=...)`` on every rank, on the GPU CuPy uses.

Streams: the bench times on CuPy's current stream; torch must enqueue there too.
:meth:`TorchSession.on_current` runs a call under ``torch.cuda.stream(ExternalStream(ptr))``
when CuPy's stream is not the default one (both libraries' default is the legacy stream 0).

Graphs: torch's ops allocate through its caching allocator and its process group keeps
bookkeeping that must know a capture is under way, so a torch rival's calls are captured with
``torch.cuda.graph`` on an ``ExternalStream`` of the bench's capture stream (``capture``):
the same k calls in one graph, replayed on the same stream, as the bench does with CuPy.
"""

from __future__ import annotations

import socket
import warnings
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ..capture import capture_guard
from ..measure import agree
from .base import RivalContext, current_stream_pointer, missing
from .env import multicast_off

TORCH_HINT = "install a CUDA build of torch to measure the torch rivals"

_SESSION: list[TorchSession] = []  # the run's session, while some torch rival uses it


def torch_missing() -> str | None:
    """Why torch cannot drive the rivals on this rank; None when it can."""
    why = missing("torch", TORCH_HINT)
    if why:
        return why
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device (a CPU-only build?): {TORCH_HINT}"
    if not dist.is_available() or not dist.is_nccl_available():
        return f"torch {torch.__version__} was built without distributed NCCL support"
    return None


def store_address(hosts: list[str]) -> str:
    """Where the ranks reach rank 0's store: loopback when every rank runs on rank 0's host
    (``hosts``: every rank's host name, in rank order)."""
    return "127.0.0.1" if all(h == hosts[0] for h in hosts) else hosts[0]


class TorchSession:
    """The run's torch process group and stream/graph plumbing (see the module docstring)."""

    def __init__(self, world: Any, ctx: RivalContext) -> None:
        multicast_off()  # before torch initialises NCCL or symmetric memory
        import cupy
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.users = 0
        self.device = torch.device("cuda", cupy.cuda.Device().id)
        self._streams: dict[int, Any] = {}
        timeout = timedelta(seconds=ctx.timeout)
        hosts = world.allgather(socket.gethostname())

        def open_store() -> tuple[str, int]:
            torch.cuda.set_device(self.device)
            if world.rank != 0:
                return "", 0
            address = store_address(hosts)
            store = dist.TCPStore(address, 0, world.size, True, timeout=timeout,
                                  wait_for_workers=False)  # port 0: the system picks one
            self._store = store
            return address, int(store.port)

        host, port = agree(world, open_store, share=True)[0]

        def join() -> None:
            if world.rank != 0:
                self._store = dist.TCPStore(host, port, world.size, False, timeout=timeout)
            kwargs: dict[str, Any] = {"store": self._store, "rank": world.rank,
                                      "world_size": world.size, "timeout": timeout}
            try:
                dist.init_process_group("nccl", device_id=self.device, **kwargs)
            except TypeError:  # torch before 2.3: no device_id (the NCCL comm starts lazily)
                dist.init_process_group("nccl", **kwargs)

        agree(world, join)
        self.group = dist.group.WORLD
        self.group_name = str(self.group.group_name)
        self.address = f"{host}:{port}"

    @classmethod
    def acquire(cls, world: Any, ctx: RivalContext) -> TorchSession:
        """Collective: the run's session, made on first use."""
        if not _SESSION:
            _SESSION.append(cls(world, ctx))
        session = _SESSION[0]
        session.users += 1
        return session

    def release(self) -> None:
        """Collective: one user less; the last one destroys the process group."""
        self.users -= 1
        if self.users > 0:
            return
        _SESSION.clear()
        self.torch.cuda.synchronize(self.device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.dist.destroy_process_group()

    def describe(self) -> str:
        nccl = ".".join(map(str, self.torch.cuda.nccl.version()))
        return f"torch {self.torch.__version__}, its NCCL {nccl}"

    def tensor(self, arr: Any) -> Any:
        """A torch tensor aliasing the bench's buffer (no copy): DLPack for CuPy arrays."""
        return arr if isinstance(arr, self.torch.Tensor) else self.torch.from_dlpack(arr)

    def stream(self, ptr: int) -> Any:
        """torch's handle of the CUDA stream ``ptr`` (CuPy's), made once per stream."""
        if ptr not in self._streams:
            self._streams[ptr] = (self.torch.cuda.default_stream(self.device) if ptr == 0 else
                                  self.torch.cuda.ExternalStream(ptr, device=self.device))
        return self._streams[ptr]

    def on_current(self, op: Callable[[], None]) -> Callable[[], None]:
        """``op`` made to enqueue on CuPy's current stream (the bench's timer's)."""
        torch = self.torch

        def call() -> None:
            ptr = current_stream_pointer()
            if ptr == 0:
                op()
                return
            with torch.cuda.stream(self.stream(ptr)):
                op()
        return call

    def capture(self, stream: Any, call: Callable[[], None], k: int) -> TorchGraph:
        """``k`` calls in one ``torch.cuda.graph`` on the bench's capture ``stream`` (after one
        call outside the capture, as the bench does)."""
        torch = self.torch
        ext = self.stream(int(stream.ptr))
        call()
        graph = torch.cuda.CUDAGraph()
        with capture_guard(), torch.cuda.graph(graph, stream=ext, capture_error_mode="thread_local"):
            for _ in range(k):
                call()
        return TorchGraph(torch, graph, ext)


class TorchGraph:
    """A captured torch graph, replayed on the stream it was captured on."""

    def __init__(self, torch: Any, graph: Any, stream: Any) -> None:
        self.torch, self.graph, self.stream = torch, graph, stream

    def launch(self, _stream: Any = None) -> None:
        with self.torch.cuda.stream(self.stream):
            self.graph.replay()
