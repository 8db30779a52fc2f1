"""torch for the rivals: one NCCL process group over the MPI ranks, torch's view of CuPy's
streams, and CUDA graphs captured the torch way. Shared by the torch rivals of a run (made by
the first that sets up, closed by the last that closes).

The process group: rank and size come from MPI; rank 0 opens the rendezvous store
(``torch.distributed.TCPStore`` on a port the system picks) and broadcasts its address through
MPI: 127.0.0.1 when every rank is on rank 0's host, rank 0's host name otherwise. Then
``init_process_group("nccl", store=..., device_id=...)`` on every rank, on the GPU CuPy uses.

Streams: the bench times on CuPy's current stream; torch must enqueue there too, and the rows
are timed the way torch's users call torch: they set torch's current stream once (or stay on
the default one) and then call, without switching streams per call. So a call made by
:meth:`TorchSession.on_current` does not enter ``torch.cuda.stream(...)`` (whose
``__enter__``/``__exit__`` query and set the current stream: host time on every call, which
torch's users do not pay). It compares CuPy's current stream with the one torch's current
stream was last found or put on (one lookup and an int compare), and only where CuPy's has
changed since (a new phase of the bench) does it check torch's, and set it
(``torch.cuda.set_stream``) if it differs: once per change, not per call. The bench's phases
keep torch's current stream on CuPy's already (both libraries' default is the legacy stream 0;
the overlap timeline switches both; :meth:`TorchSession.capture` switches torch's for the
whole capture), so in a run that check finds it there and switches nothing.

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
from .base import RivalContext, current_stream_reader, missing
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
        # The CUDA stream (pointer) torch's current stream was last found or put on by a call of
        # on_current, -1 before the first call (see on_current). It is not told when a context
        # that made both libraries' streams current ends (the overlap timeline's): the next call
        # on another CuPy stream looks again, but a call on that same stream with CuPy's switched
        # alone would not; the bench has no such phase (the capture forgets it, below).
        self._followed = -1
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

    def follow(self, ptr: int) -> None:
        """Make torch's current stream the CUDA stream ``ptr`` (CuPy's current one) and remember
        it: ``torch.cuda.set_stream``, as a torch user sets their stream once, where torch's
        current stream is another one (a stream switched by CuPy alone); nothing where it is
        that one already (the bench switched both, or both are on the default stream)."""
        torch = self.torch
        if int(torch.cuda.current_stream(self.device).cuda_stream) != ptr:
            torch.cuda.set_stream(self.stream(ptr))
        self._followed = ptr

    def on_current(self, op: Callable[[], None]) -> Callable[[], None]:
        """``op`` made to enqueue on CuPy's current stream (the bench's timer's), without a
        stream switch per call (see the module docstring)."""
        current = current_stream_reader()

        def call() -> None:
            # The one per-call cost: CuPy's stream pointer against the stream torch's current
            # stream was last found or put on, an int compare. Only when they differ (the bench
            # changed streams: a new phase) does follow() look at torch's current stream and
            # set it, once; every later call of the phase runs op() directly, as a torch user's
            # loop does once it has set its stream. A context manager per call instead (what
            # this replaced) queried and set torch's stream on every call, host time the torch
            # rows paid and torch's users do not.
            ptr = current()
            if ptr != self._followed:
                self.follow(ptr)
            op()
        return call

    def capture(self, stream: Any, call: Callable[[], None], k: int) -> TorchGraph:
        """``k`` calls in one ``torch.cuda.graph`` on the bench's capture ``stream`` (after one
        call outside the capture, as the bench does). torch's current stream is the capture
        stream for the whole of it (one switch, restored after: the rows' eager calls then find
        it back on CuPy's default stream, and so does any torch work that follows)."""
        torch = self.torch
        ext = self.stream(int(stream.ptr))
        with torch.cuda.stream(ext):
            call()
            graph = torch.cuda.CUDAGraph()
            with capture_guard(), torch.cuda.graph(graph, stream=ext,
                                                   capture_error_mode="thread_local"):
                for _ in range(k):
                    call()
        self._followed = -1  # torch's current stream is back where it was: look again next call
        return TorchGraph(torch, graph, ext)


class TorchGraph:
    """A captured torch graph, replayed on the stream it was captured on."""

    def __init__(self, torch: Any, graph: Any, stream: Any) -> None:
        self.torch, self.graph, self.stream = torch, graph, stream

    def launch(self, _stream: Any = None) -> None:
        # replay() launches on torch's current stream (CuPy's launch takes the stream): one
        # switch per replay of the graph's k calls, restored after, so that torch's current
        # stream is not left on the capture stream once the bench's graph phase is over.
        with self.torch.cuda.stream(self.stream):
            self.graph.replay()
