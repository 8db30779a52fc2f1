"""``mpiring.Communicator``: the public API, in mpi4py's idiom.

A communicator binds the ranks of one node, allocates its staging memory once (the control
board in node shared memory, and a GPU backend when there are GPUs), and then allreduces host
or GPU arrays with the algorithm asked for: a row of the table in ``mpiring.algorithms``.

One call, in order: describe the buffers; resolve the algorithm (``auto`` -> a row); check
the call locally; the agreement check (every rank learns whether any rank rejected its call
or disagrees); the row's ``run`` on the backend of the buffers' memory.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from mpi4py import MPI

from . import algorithms, cuda
from .agreement import FIELDS, AgreementCheck, all_ranks, join
from .algorithms import AUTO, Algorithm, Call
from .algorithms import auto as auto_table
from .backends.base import Backend
from .backends.host import HostBackend
from .buffers import Memory, check_pair, describe
from .control import ControlBoard
from .errors import (
    CommunicatorClosedError,
    InvalidArgumentError,
    MpiringError,
    MpiringTimeoutError,
    PeerFailedError,
    SetupError,
    UnavailableError,
)
from .ops import dtype_code, normalize_op
from .options import DEFAULT_HOST_SLOT_BYTES, Options, check_batches, empty_like
from .transports.host import slot_bytes_for

if TYPE_CHECKING:
    from .backends.gpu import GpuBackend

log = logging.getLogger(__name__)


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
            ``MPIRING_ALGO`` overrides its choice) or any name of ``mpiring.algorithms.names()``
            (``"ring"``, ``"ring-events"``, ``"oneshot"``, ``"twoshot"``, ``"nccl"``,
            ``"nccl-ring"``, ``"mpi"``).
        batches: mini-batches per call; None picks one by message size.
        slot_bytes: bytes per receive slot (two per rank); bounds staging memory.
        check: run the cross-rank agreement check on every call (default on;
            ``MPIRING_CHECK=0`` turns it off).
        timeout: seconds any wait for a peer may take, on the host or the GPU (default
            ``MPIRING_TIMEOUT`` or 300); GPU failures surface in :meth:`synchronize` or the next call.
    """

    def __init__(self, comm: MPI.Intracomm | None = None, *, gpu: bool | None = None,
                 device: int | None = None, algorithm: str = "auto", batches: int | None = None,
                 slot_bytes: int | None = None, check: bool | None = None,
                 timeout: float | None = None) -> None:
        self._closed = True  # until set-up completes
        self._failed: str | None = None
        base = MPI.COMM_WORLD if comm is None else comm
        opts = Options.resolve(algorithm, batches, check, timeout)
        self.algorithm, self.batches, self.check = opts.algorithm, opts.batches, opts.check
        self.timeouts = opts.timeouts
        self._forced = opts.forced  # what "auto" runs instead of the table's choice
        self._tuning = auto_table.load()
        self.comm = join(base, self.timeout)  # bounded: names the ranks that never arrive, then dups
        self.node = cast(MPI.Intracomm, self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.comm.rank))
        self.board: ControlBoard | None = None
        self._host: HostBackend | None = None
        self._gpu: GpuBackend | None = None
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

    @property
    def timeout(self) -> float:
        """Seconds any wait for a peer may take (the communicator's :class:`TimeoutPolicy`)."""
        return self.timeouts.seconds

    def _set_up(self, base_size: int, gpu: bool | None, device: int | None,
                slot_bytes: int | None) -> None:
        """Collective set-up on every rank: node check, control board, backends."""
        if self.node.size != self.comm.size:
            raise SetupError(
                f"mpiring needs every rank on one node, but this communicator of {base_size} ranks "
                f"spans several nodes (this node has {self.node.size} of them): build one "
                "Communicator per node, e.g. from comm.Split_type(MPI.COMM_TYPE_SHARED)"
            )
        self.rank, self.size = self.comm.rank, self.comm.size
        host_slot = slot_bytes_for(DEFAULT_HOST_SLOT_BYTES if slot_bytes is None else int(slot_bytes))
        self.board = ControlBoard(self.node, 2 * host_slot, self.timeouts)
        self._host = HostBackend(self.comm, self.board, host_slot, self.timeouts)
        # After the board: the check counts its calls there, to name missing ranks.
        self._agreement = AgreementCheck(self.comm, self.timeout, self.board.shared,
                                         algorithms.name_of_code)
        use_gpu = cuda.available() if gpu is None or gpu else False  # gpu=True needs one too
        # Every rank must take the same branch: set-up below is collective.
        use_gpu = all_ranks(self.comm, use_gpu, self.timeout, "decide whether to use GPUs")
        if gpu and not use_gpu:
            raise UnavailableError(
                "gpu=True but CuPy or a CUDA GPU is missing on some rank: install mpiring[cuda12] "
                "or mpiring[cuda13] and run where every rank sees a GPU"
            )
        if use_gpu:
            from .backends.gpu import GpuBackend

            self._gpu = GpuBackend(self.comm, self.node, self.board, device, slot_bytes, self.timeouts)

    # -- failure state -----------------------------------------------------------------

    def _fail(self, err: BaseException) -> None:
        """Refuse further use, and tell the peers (in the control board) so they stop at once too."""
        self._failed = f"{type(err).__name__}: {err}"
        if self.board is not None and not self._closed:
            self.board.mark_failed()

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
        peers = cast(ControlBoard, self.board).failed_peers()
        if peers:
            err = PeerFailedError(
                f"rank {self.rank}: rank(s) {peers} gave up on this communicator after an error or "
                "a timeout of their own (their errors say why), so calls here would wait for them; "
                "this communicator refuses further use"
            )
            self._fail(err)
            raise err

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
        values = dict.fromkeys(FIELDS, 0)
        try:
            call, row, backend = self._prepare(sendbuf, recvbuf, op, algorithm, batches)
            recv = call.recv
            values.update(count=recv.count, dtype=dtype_code(recv.dtype), op=int(call.op), algorithm=row.code,
                          batches=call.batches or 0, memory=int(recv.memory))
        except Exception as err:  # any local failure must reach the peers, or they hang
            rejected = err
        if self.check:
            self._agree(rejected is not None, values)
        if rejected is not None:
            raise rejected
        if recv.count == 0:
            return
        try:
            row.run(backend, call)
        except BaseException as err:  # mid-collective: peers' sequence numbers no longer match ours
            self._fail(err)
            raise

    def _prepare(self, sendbuf: Any, recvbuf: Any, op: Any, algorithm: str | None,
                 batches: int | None) -> tuple[Call, Algorithm, Backend]:
        """Describe and check one call on this rank: raises what is wrong with it here."""
        nb = self.batches if batches is None else check_batches(batches)
        the_op = normalize_op(op)
        recv = describe(recvbuf, "recvbuf")
        backend = self._backend(recv.memory)
        row = self._resolve(recv.nbytes, recv.memory, algorithm)
        in_place = sendbuf is None or sendbuf is MPI.IN_PLACE
        send = recv if in_place else describe(sendbuf, "sendbuf")
        in_place = in_place or check_pair(send, recv)
        if recv.readonly:
            raise InvalidArgumentError("recvbuf is read-only: the result cannot be written into it")
        backend.check_buffer(recv, "recvbuf")
        if not in_place:
            backend.check_buffer(send, "sendbuf")
        call = Call(None if in_place else send, recv, the_op, nb)
        if row.check is not None:
            row.check(backend, call)
        return call, row, backend

    def _backend(self, memory: Memory) -> Backend:
        if memory is Memory.HOST:
            return cast(HostBackend, self._host)
        if self._gpu is None:
            raise UnavailableError(
                "GPU arrays passed to a communicator created without GPUs (gpu=False, or no CuPy/GPU "
                "at set-up)"
            )
        return self._gpu

    def _agree(self, rejected: bool, values: dict[str, int]) -> None:
        """The agreement check; a timeout fails the communicator (its allreduce stays pending)."""
        try:
            self._agreement.run(rejected, values, algorithms.name_of_code(values["algorithm"]))
        except MpiringTimeoutError as err:
            self._fail(err)
            raise

    def allreduce(self, x: Any, op: Any = MPI.SUM, *, algorithm: str | None = None,
                  batches: int | None = None) -> Any:
        """Return a new array holding the reduction of ``x`` over all ranks (like ``comm.allreduce``)."""
        self._usable()
        try:
            out = empty_like(x)
        except Exception:
            if self.check:  # reject on every rank, as Allreduce does, instead of hanging peers
                self._agree(True, dict.fromkeys(FIELDS, 0))
            raise
        self.Allreduce(x, out, op, algorithm=algorithm, batches=batches)
        return out

    # -- which algorithm -----------------------------------------------------------------

    def resolve(self, count: int, dtype: Any, algorithm: str | None = None, *,
                gpu: bool | None = None) -> str:
        """The algorithm a call of ``count`` elements of ``dtype`` runs: ``algorithm`` (default:
        the communicator's), with ``"auto"`` replaced by its choice for that size."""
        on_gpu = self.gpu if gpu is None else gpu
        nbytes = int(count) * np.dtype(dtype).itemsize
        return self._resolve(nbytes, Memory.CUDA if on_gpu else Memory.HOST, algorithm).name

    def _resolve(self, nbytes: int, memory: Memory, algorithm: str | None) -> Algorithm:
        """The row a call of ``nbytes`` in ``memory`` runs; raises if it cannot run it."""
        name = self.algorithm if algorithm is None else algorithms.check_name(algorithm)
        if name == AUTO:  # MPIRING_ALGO replaces auto's choice wherever it can serve the memory
            forced = self._forced and algorithms.get(self._forced).serves(memory)
            name = cast(str, self._forced) if forced else self._auto_choice(nbytes, memory)
        row = algorithms.get(name)
        if not row.serves(memory):
            kind = "GPU" if memory is Memory.CUDA else "host"
            raise InvalidArgumentError(
                f"algorithm {row.name!r} reduces {row.describe_memory()} arrays, but these are {kind} "
                f"arrays ({kind} algorithms: {', '.join(algorithms.names(memory, with_auto=False))})")
        backend = self._backend(memory)
        limit = row.max_bytes(backend)
        if limit is not None and nbytes > limit:
            raise InvalidArgumentError(
                f"algorithm {row.name!r} takes messages of at most {limit} bytes, got {nbytes}: "
                "use another algorithm or 'auto'")
        if not row.graph_capturable and backend.capturing():
            capturable = [a.name for a in algorithms.rows() if a.graph_capturable and a.serves(memory)]
            raise InvalidArgumentError(
                f"algorithm {row.name!r} cannot be captured into a CUDA graph (its GPU signals carry "
                f"per-call sequence numbers): use {', '.join(map(repr, capturable))} or 'auto'")
        return row

    def _auto_choice(self, nbytes: int, memory: Memory) -> str:
        """What auto runs: the tuning table's choice, moved to the next candidate that can run
        the call (fits its size limit; capturable while a CUDA graph is being captured)."""
        candidates = algorithms.auto_candidates(memory)
        if memory is Memory.HOST or self._gpu is None or self.size == 1:
            return candidates[0]  # the host has one mpiring algorithm; one rank: a copy
        first = self._tuning.choose(self.size, nbytes)
        for name in (first, *(c for c in ("twoshot", "nccl", *candidates) if c != first)):
            row = algorithms.get(name)
            limit = row.max_bytes(self._gpu)
            # Hot path: ask the GPU whether it is capturing only for a row that cannot be captured.
            if (limit is None or nbytes <= limit) and (row.graph_capturable or not self._gpu.capturing()):
                return name
        return first

    def batches_for(self, count: int, dtype: Any, *, gpu: bool | None = None,
                    algorithm: str | None = None, batches: int | None = None) -> int | None:
        """The mini-batch count a call of ``count`` elements would run with (None for
        algorithms without mini-batches): the request or default, raised to fit the slots."""
        on_gpu = self.gpu if gpu is None else gpu
        dtype = np.dtype(dtype)
        memory = Memory.CUDA if on_gpu else Memory.HOST
        row = self._resolve(int(count) * dtype.itemsize, memory, algorithm)
        if row.batches is None:
            return None
        return row.batches(self._backend(memory), int(count), dtype, batches)

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
        ``peers_failed_too`` (every rank met the same set-up error), when the control board is
        closed with the usual bounded handshake."""
        peers = self.board.failed_peers() if self.board is not None else []
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
            except MpiringError as err:  # a bounded wait expired: the GPU backend abandoned
                error, failed = err, True
            self._gpu = None
        try:
            if self._host is not None:
                host, self._host = self._host, None
                host.close(abandon=failed)
            if self.board is not None:
                board, self.board = self.board, None
                board.close(abandon=failed)
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
