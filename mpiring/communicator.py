"""``mpiring.Communicator``: the public API, in mpi4py's idiom.

A communicator binds the ranks of one node, allocates its staging memory once, and then
allreduces host arrays (host transport) or GPU arrays (CUDA IPC transport, or the NCCL
baselines) with the algorithm asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import numpy as np
from mpi4py import MPI

from . import cuda, tuning
from .agreement import FIELDS, AgreementCheck, all_ranks, join
from .buffers import Buffer, Memory, check_pair, describe
from .errors import (
    CommunicatorClosedError,
    InvalidArgumentError,
    MpiringError,
    MpiringTimeoutError,
    PeerFailedError,
    SetupError,
    UnavailableError,
)
from .ops import Op, dtype_code, normalize_op
from .pipeline import RingPipeline
from .schedule import RingPlan, choose_batches, default_batches
from .signals import FAILED
from .transports.base import CallBuffers
from .transports.host import HostTransport

log = logging.getLogger(__name__)

# Codes sent in the agreement check. "auto" resolves to one of the others before that check.
ALGORITHMS = {"ring": 1, "nccl": 2, "nccl-ring": 3, "mpi": 4, "oneshot": 5, "twoshot": 6, "auto": 7}
HOST_ALGORITHMS = ("ring", "mpi")
CUDA_ALGORITHMS = ("ring", "oneshot", "twoshot", "nccl", "nccl-ring")

DEFAULT_HOST_SLOT_BYTES = 1 << 20  # two slots of 1 MiB of node shared memory per rank
DEFAULT_TIMEOUT = 300.0


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return float(value)
    except ValueError:
        raise InvalidArgumentError(f"{name}={value!r} is not a number of seconds") from None


class Communicator:
    """Allreduce over the ranks of ``comm``, all on one node, one GPU per rank.

    Args:
        comm: the MPI communicator whose ranks take part (default ``MPI.COMM_WORLD``);
            it is duplicated, so mpiring's messages never mix with the caller's.
        gpu: True to require the GPU path, False for host arrays only, None (default) to use
            GPUs when CuPy finds them.
        device: the GPU of this rank; default: the GPU of this process's first communicator,
            else its rank among the node's ranks.
        algorithm: default algorithm: ``"auto"`` (per message size, from the tuning table;
            ``MPIRING_ALGO`` overrides its choice), ``"ring"`` (the copy-engine ring),
            ``"oneshot"`` / ``"twoshot"`` (one-launch kernels for small / medium messages),
            ``"nccl"``, ``"nccl-ring"`` (GPU baselines) or ``"mpi"`` (host: ``MPI.Allreduce``).
        batches: mini-batches per call; None picks one by message size.
        slot_bytes: bytes per receive slot (two per rank); bounds staging memory.
        check: run the cross-rank agreement check on every call (default on;
            ``MPIRING_CHECK=0`` turns it off).
        timeout: seconds any wait for a peer may take, on the host or the GPU (default
            ``MPIRING_TIMEOUT`` or 300); GPU failures surface in :meth:`synchronize` or the next call.
    """

    def __init__(
        self,
        comm: MPI.Intracomm | None = None,
        *,
        gpu: bool | None = None,
        device: int | None = None,
        algorithm: str = "auto",
        batches: int | None = None,
        slot_bytes: int | None = None,
        check: bool | None = None,
        timeout: float | None = None,
    ) -> None:
        self._closed = True  # until set-up completes
        self._failed: str | None = None
        base = MPI.COMM_WORLD if comm is None else comm
        self.algorithm = self._check_algorithm(algorithm)
        forced = os.environ.get("MPIRING_ALGO") or None
        if forced is not None and self._check_algorithm(forced) == "auto":
            forced = None
        self._forced = forced and forced.lower()  # what "auto" runs instead of the table's choice
        self._tuning = tuning.load()
        self.batches = self._check_batches(batches)
        self.check = _env_flag("MPIRING_CHECK", True) if check is None else bool(check)
        self.timeout = _env_float("MPIRING_TIMEOUT", DEFAULT_TIMEOUT) if timeout is None else float(timeout)
        if self.timeout <= 0:
            raise InvalidArgumentError(f"timeout must be positive, got {self.timeout}")
        self.comm = join(base, self.timeout)  # bounded: names the ranks that never arrive, then dups
        self.node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.comm.rank)
        self._host: RingPipeline | None = None
        self._gpu = None
        try:
            self._set_up(base.size, gpu, device, slot_bytes)
        except BaseException as err:  # release what was made
            self._failed = f"set-up failed: {type(err).__name__}: {err}"
            # A SetupError is raised on every rank alike: they meet to free the host board. After
            # anything else peers may not have failed (or be gone): nothing waits for them.
            with contextlib.suppress(MpiringError):  # the set-up error is the one to report
                self._release(peers_failed_too=isinstance(err, SetupError))
            raise
        self._closed = False
        log.debug("rank %d: communicator of %d ranks, gpu=%s", self.rank, self.size, self.gpu)

    def _set_up(self, base_size: int, gpu: bool | None, device: int | None,
                slot_bytes: int | None) -> None:
        """Collective set-up on every rank: node check, host staging, GPU context."""
        if self.node.size != self.comm.size:
            raise SetupError(
                f"mpiring needs every rank on one node, but this communicator of {base_size} ranks "
                f"spans several nodes (this node has {self.node.size} of them): build one "
                "Communicator per node, e.g. from comm.Split_type(MPI.COMM_TYPE_SHARED)"
            )
        self.rank, self.size = self.comm.rank, self.comm.size
        host_slot = DEFAULT_HOST_SLOT_BYTES if slot_bytes is None else int(slot_bytes)
        self._host = RingPipeline(HostTransport(self.node, host_slot, self.timeout))
        # After the host board: the check counts its calls there, to name missing ranks.
        self._agreement = AgreementCheck(self.comm, self.timeout, self._host.transport.board)
        use_gpu = cuda.available() if gpu is None or gpu else False  # gpu=True needs one too
        # Every rank must take the same branch: set-up below is collective.
        use_gpu = all_ranks(self.comm, use_gpu, self.timeout, "decide whether to use GPUs")
        if gpu and not use_gpu:
            raise UnavailableError(
                "gpu=True but CuPy or a CUDA GPU is missing on some rank: install mpiring[cuda12] "
                "or mpiring[cuda13] and run where every rank sees a GPU"
            )
        if use_gpu:
            self._gpu = cuda.GpuContext(self.comm, self.node, device, slot_bytes, self.timeout)

    # -- argument checks ---------------------------------------------------------------

    @staticmethod
    def _check_algorithm(algorithm: str | None) -> str:
        name = str(algorithm).lower()
        if name not in ALGORITHMS:
            raise InvalidArgumentError(f"unknown algorithm {algorithm!r}: choose one of {sorted(ALGORITHMS)}")
        return name

    @staticmethod
    def _check_batches(batches: int | None) -> int | None:
        if batches is None:
            return None
        if isinstance(batches, bool) or not isinstance(batches, (int, np.integer)) or batches < 1:
            raise InvalidArgumentError(f"batches must be a positive integer or None, got {batches!r}")
        return int(batches)

    def _agree(self, rejected: bool, values: dict[str, int]) -> None:
        """The agreement check; a timeout fails the communicator (its allreduce stays pending)."""
        try:
            self._agreement.run(rejected, values, _ALGORITHM_NAMES.get(values["algorithm"]))
        except MpiringTimeoutError as err:
            self._fail(err)
            raise

    def _fail(self, err: BaseException) -> None:
        """Refuse further use, and tell the peers (in the host board) so they stop at once too."""
        self._failed = f"{type(err).__name__}: {err}"
        if self._host is not None and not self._closed:
            self._host.transport.board.post(self.rank, FAILED, 1)

    def _usable(self) -> None:
        if self._failed:
            raise CommunicatorClosedError(
                f"this communicator failed earlier ({self._failed}) and refuses further use: "
                "close it and create a new one"
            )
        if self._closed:
            raise CommunicatorClosedError("this communicator is closed")
        gpu_error = self._gpu.failure() if self._gpu is not None else None
        if gpu_error is not None:  # found by the watchdog or a kernel since the last call
            self._fail(gpu_error)
            raise gpu_error
        peers = self._failed_peers()
        if peers:
            err = PeerFailedError(
                f"rank {self.rank}: rank(s) {peers} gave up on this communicator after an error or "
                "a timeout of their own (their errors say why), so calls here would wait for them; "
                "this communicator refuses further use"
            )
            self._fail(err)
            raise err

    def _failed_peers(self) -> list[int]:
        """The peers that marked the communicator failed."""
        return [r for r, row in enumerate(self._host.transport.board.counters)
                if row[FAILED] and r != self.rank]

    def synchronize(self) -> None:
        """Wait until this rank's GPU calls on this communicator have finished; raise if one failed.

        GPU calls return once enqueued. A failure they meet later (a peer that does not answer
        within the timeout, or an abort by a peer) is raised here, or by the next call. Host
        calls complete before they return: then this only checks for failures.
        """
        self._usable()
        if self._gpu is not None:
            try:
                self._gpu.synchronize()
            except MpiringError as err:
                self._fail(err)
                raise
        self._usable()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def gpu(self) -> bool:
        """Whether this communicator reduces GPU arrays."""
        return self._gpu is not None

    @property
    def device(self) -> int | None:
        """The CUDA device of this rank, or None without GPUs."""
        return None if self._gpu is None else self._gpu.device_id

    # -- the collective ----------------------------------------------------------------

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = MPI.SUM, *,
                  algorithm: str | None = None, batches: int | None = None) -> None:
        """Reduce ``sendbuf`` over all ranks into ``recvbuf`` (mpi4py's ``Comm.Allreduce``).

        ``sendbuf`` may be ``MPI.IN_PLACE`` or None (reduce ``recvbuf`` in place), or the very
        same array as ``recvbuf``. GPU work is ordered after what the caller queued on the
        current CuPy stream, and later work there sees the result.
        """
        self._usable()
        rejected: Exception | None = None
        values = dict.fromkeys(("count", "dtype", "op", "algorithm", "batches", "memory"), 0)
        try:
            nb = self.batches if batches is None else self._check_batches(batches)
            the_op = normalize_op(op)
            recv = describe(recvbuf, "recvbuf")
            algo = self._resolve(recv.count * recv.dtype.itemsize, recv.memory, algorithm)
            in_place = sendbuf is None or sendbuf is MPI.IN_PLACE
            send = recv if in_place else describe(sendbuf, "sendbuf")
            in_place = in_place or check_pair(send, recv)
            if recv.readonly:
                raise InvalidArgumentError("recvbuf is read-only: the result cannot be written into it")
            self._check_memory(recv, algo)
            if not in_place and recv.memory is Memory.CUDA:
                self._gpu.check_buffer(send, "sendbuf")
            values.update(count=recv.count, dtype=dtype_code(recv.dtype), op=int(the_op),
                          algorithm=ALGORITHMS[algo], batches=nb or 0, memory=int(recv.memory))
        except Exception as err:  # any local failure must reach the peers, or they hang
            rejected = err
        if self.check:
            self._agree(rejected is not None, values)
        if rejected is not None:
            raise rejected
        if recv.count == 0:
            return
        try:
            self._dispatch(algo, None if in_place else send, recv, the_op, nb)
        except BaseException as err:  # mid-collective: peers' sequence numbers no longer match ours
            self._fail(err)
            raise

    def allreduce(self, x: Any, op: Any = MPI.SUM, *, algorithm: str | None = None,
                  batches: int | None = None) -> Any:
        """Return a new array holding the reduction of ``x`` over all ranks (like ``comm.allreduce``)."""
        self._usable()
        try:
            out = _empty_like(x)
        except Exception:
            if self.check:  # reject on every rank, as Allreduce does, instead of hanging peers
                self._agree(True, dict.fromkeys(FIELDS, 0))
            raise
        self.Allreduce(x, out, op, algorithm=algorithm, batches=batches)
        return out

    def _check_memory(self, buf: Buffer, algo: str) -> None:
        if buf.memory is Memory.HOST:
            if algo not in HOST_ALGORITHMS:
                raise InvalidArgumentError(
                    f"algorithm {algo!r} reduces GPU arrays, but these are host arrays "
                    f"(host algorithms: {', '.join(HOST_ALGORITHMS)})"
                )
            if algo == "mpi" and buf.dtype.name == "bfloat16":
                raise InvalidArgumentError(
                    "algorithm 'mpi' cannot reduce bfloat16 (MPI has no bfloat16 type): "
                    "use algorithm='ring'"
                )
            return
        if algo not in CUDA_ALGORITHMS:
            raise InvalidArgumentError(
                f"algorithm {algo!r} reduces host arrays, but these are GPU arrays "
                f"(GPU algorithms: {', '.join(CUDA_ALGORITHMS)})"
            )
        if self._gpu is None:
            raise UnavailableError(
                "GPU arrays passed to a communicator created without GPUs (gpu=False, or no CuPy/GPU "
                "at set-up)"
            )
        self._gpu.check_buffer(buf, "recvbuf")

    def _dispatch(self, algo: str, send: Buffer | None, recv: Buffer, op: Op, batches: int | None) -> None:
        if recv.memory is Memory.HOST:
            if algo == "mpi":
                self.comm.Allreduce(MPI.IN_PLACE if send is None else send.array, recv.array,
                                    op=_MPI_OPS[op]())
                return
            self._run_ring(self._host, send.array if send else None, recv.array, recv, op, batches, None)
            return
        g = self._gpu
        if algo == "ring":
            self._run_ring(g.pipeline, send, recv, recv, op, batches, g.ordered_stream())
        elif algo in ("oneshot", "twoshot"):
            g.direct_call(algo, send, recv, op)
        else:
            g.baseline(algo, send, recv, op, batches)

    def resolve(self, count: int, dtype: Any, algorithm: str | None = None, *,
                gpu: bool | None = None) -> str:
        """The algorithm a call of ``count`` elements of ``dtype`` runs: ``algorithm`` (default:
        the communicator's), with ``"auto"`` replaced by its choice for that size."""
        on_gpu = self.gpu if gpu is None else gpu
        nbytes = int(count) * np.dtype(dtype).itemsize
        return self._resolve(nbytes, Memory.CUDA if on_gpu else Memory.HOST, algorithm)

    def _resolve(self, nbytes: int, memory: Memory, algorithm: str | None) -> str:
        algo = self.algorithm if algorithm is None else self._check_algorithm(algorithm)
        on_gpu = memory is Memory.CUDA and self._gpu is not None
        if algo != "auto":
            if algo == "oneshot" and on_gpu and nbytes > self._oneshot_limit():
                raise InvalidArgumentError(
                    f"algorithm 'oneshot' takes messages of at most {self._oneshot_limit()} bytes, "
                    f"got {nbytes}: use 'twoshot' or 'auto'"
                )
            if algo == "ring" and on_gpu and self._gpu.capturing():
                raise InvalidArgumentError(
                    "algorithm 'ring' cannot be captured into a CUDA graph (its GPU signals carry "
                    "per-call sequence numbers): use 'oneshot', 'twoshot', 'nccl' or 'auto'"
                )
            return algo
        if memory is Memory.HOST or self._gpu is None:
            return "ring"  # the host path has one mpiring algorithm
        if self._forced is not None:
            return self._resolve(nbytes, memory, self._forced)
        if self.size == 1:
            return "ring"  # a copy, whatever the size
        choice = self._tuning.choose(self.size, nbytes)
        if choice == "oneshot" and nbytes > self._oneshot_limit():
            choice = "twoshot"
        elif choice == "ring" and self._gpu.capturing():
            choice = "twoshot"  # graph-capturable, unlike the ring
        return choice

    def _oneshot_limit(self) -> int:
        return self._gpu.oneshot_limit if self._gpu is not None else 0

    def batches_for(self, count: int, dtype: Any, *, gpu: bool | None = None,
                    algorithm: str | None = None, batches: int | None = None) -> int | None:
        """The mini-batch count a call of ``count`` elements would run with (None for
        algorithms without mini-batches): the request or default, raised to fit the slots."""
        algo = self.algorithm if algorithm is None else self._check_algorithm(algorithm)
        if algo == "auto":
            algo = self.resolve(count, dtype, algo, gpu=gpu)
        on_gpu = self.gpu if gpu is None else gpu
        dtype = np.dtype(dtype)
        if algo == "ring":
            pipeline = self._gpu.pipeline if on_gpu else self._host
            return self._ring_batches(pipeline, count, dtype, batches)
        if algo == "nccl-ring":
            return self._gpu.ring_batches(count, dtype, batches)
        return None

    def _ring_batches(self, pipeline: RingPipeline, count: int, dtype: np.dtype,
                      batches: int | None) -> int:
        """The one rule for the ring's mini-batches: request or default, raised to fit a slot."""
        return choose_batches(count, self.size, pipeline.transport.slot_capacity(dtype), batches,
                              default_batches(count * dtype.itemsize, self.size))

    def _run_ring(self, pipeline: RingPipeline, send: Any, recv: Any, desc: Buffer, op: Op,
                  batches: int | None, stream: Any) -> None:
        nb = self._ring_batches(pipeline, desc.count, desc.dtype, batches)
        plan = RingPlan(self.size, desc.count, nb)
        call = CallBuffers(send, recv, desc.count, desc.dtype, op, stream)
        if stream is None:
            pipeline.run(plan, call)
        else:
            self._gpu.run_ring(plan, call)

    # -- lifetime ----------------------------------------------------------------------

    def close(self) -> None:
        """Collective: wait for outstanding work, release staging memory and handles.

        Bounded by the timeout. After a failure it does not wait for peers (they may be gone):
        the host shared memory is then left to MPI_Finalize.
        """
        if self._closed:
            return
        self._closed = True
        self._release()

    def _release(self, peers_failed_too: bool = False) -> None:
        """Free what set-up made (all of it, or what a failed set-up got to), in reverse order.

        After a failure (here or on a peer) nothing waits for peers: they may be gone; unless
        ``peers_failed_too`` (every rank met the same set-up error), when the host board is
        closed with the usual bounded handshake."""
        peers = self._failed_peers() if self._host is not None else []
        failed = (self._failed is not None and not peers_failed_too) or bool(peers)
        error: MpiringError | None = None
        if peers and self._failed is None:  # this rank has not heard yet: close tells it
            error = PeerFailedError(
                f"rank {self.rank} cannot free the communicator's memory: rank(s) {peers} abandoned "
                "it after an error or a timeout of their own (their errors say why); it is left to "
                "the end of the process"
            )
        if self._gpu is not None:
            try:
                seen = self._gpu.close(abandon=failed)
                if seen is not None and self._failed is None:  # met after the last call: say so
                    error, failed = seen, True
            except MpiringError as err:  # a bounded wait expired: the GPU context abandoned
                error, failed = err, True
            self._gpu = None
        try:
            if self._host is not None:
                host, self._host = self._host, None
                host.transport.close(abandon=failed)
        finally:
            self.node.Free()
            self.comm.Free()
        if error is not None:
            raise error

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("failed" if self._failed else "open")
        where = f"{getattr(self, 'rank', '?')}/{getattr(self, 'size', '?')}"
        return f"<mpiring.Communicator rank {where} {state}>"


_ALGORITHM_NAMES = {code: name for name, code in ALGORITHMS.items()}
_MPI_OPS = {Op.SUM: lambda: MPI.SUM, Op.PROD: lambda: MPI.PROD, Op.MAX: lambda: MPI.MAX,
            Op.MIN: lambda: MPI.MIN}


def _empty_like(x: Any) -> Any:
    """A fresh output array of the same shape, dtype and kind of memory as ``x``."""
    if isinstance(x, np.ndarray):
        return np.empty_like(x)
    if hasattr(x, "new_empty"):  # torch
        return x.new_empty(x.shape)
    if hasattr(x, "__cuda_array_interface__") or hasattr(x, "__dlpack__"):
        import cupy

        view = cupy.asarray(x) if hasattr(x, "__cuda_array_interface__") else cupy.from_dlpack(x)
        return cupy.empty_like(view)
    raise InvalidArgumentError(f"cannot allreduce an object of type {type(x).__name__}")
