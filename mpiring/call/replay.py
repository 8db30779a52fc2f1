"""The eager fast path: a call of a shape seen before is replayed, with nothing decided afresh.

A call's full path describes its buffers, plans it (checks, ``auto``, the descriptor:
:mod:`mpiring.call.dispatch`), checks it against the peers' calls and enqueues it. Every decision
on that path depends only on the call's *shape* — the buffers' addresses, shapes, strides
and dtypes, the op, the algorithm and batches asked for, the collective — and on the
communicator's fixed settings (and, for some rows of ``auto``, on whether a CUDA graph is
being captured). So once a call of a row with a ``bind`` entry has run, the call's plan
(:class:`mpiring.call.dispatch.Plan`, kept per shape: the one cache of a call's decisions)
holds a :class:`Replay`: the row's enqueue with every argument fixed (for the one-launch
kernels, one ``cuLaunchKernel`` with pre-packed arguments) and what the agreement check
posts. A later call of the same shape costs a key read off the arrays, one lookup, the
communicator's health checks, the post and the launch.

Reference semantics, as plain code (``Communicator._collective``)::

    key = call_keys.key(collective, sendbuf, recvbuf, op, algorithm, batches)
    plan = dispatcher.planned(key)     # the plan of this shape, if kept (None: no key, or new)
    replay = plan and plan.replay      # None: take the full path, which may bind one
    # with a replay, the call does exactly what the full path would for the same arguments:
    usable()
    if replay.host_check is not None: check.host(False, replay.host_check)  # waits for the peers' calls
    elif replay.line is not None: post(replay.line)                           # the GPU compares them
    replay.enqueue(); check.after()

Compiled: where the extension is built, a replay of one bound launch also has a ``hot`` form
that does all of the above in one C call, handing anything rare back to this Python
(:mod:`mpiring.call.hot_replay`).

CuPy arrays and CUDA torch tensors are keyed (their pointer, shape, strides and dtype are
cheap to read); every other argument type takes the full path. A torch tensor's call, replayed
or not, runs on torch's current stream (:mod:`mpiring.cuda.streams`), which the communicator
reads at every such call. A replay is never
learned for a call that needs more than its launch and its check: ``avg`` on a row that sums then
divides, zero elements, or a call made while a graph is captured. A row checked on the host
(``nccl``, whose NCCL kernels cannot check on the GPU) keeps that check in its replays: the
wait for every rank's call, then the comparison, before the launch.
Keys include the algorithm table's version (``algorithms.register``), so a new row retires
every replay. Bounded with the plans that hold them (:data:`mpiring.call.dispatch.PLAN_ENTRIES`);
no reference to the arrays is kept.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from mpi4py import MPI

from .. import algorithms
from ..algorithms import Collective
from ..core.ops import OPS, Op
from .agreement import AgreementCheck
from .dispatch import Key, Replay

if TYPE_CHECKING:
    from .dispatch import Prepared
    from .hot_replay import HotPath


def _mpi_ops() -> dict[int, Op]:
    """``id`` of each predefined MPI op -> :class:`Op` (those objects live as long as mpi4py)."""
    found = {}
    for info in OPS.values():
        mpi_op = getattr(MPI, info.mpi, None) if info.mpi else None
        if mpi_op is not None:
            found[id(mpi_op)] = info.op
    return found


_IN_PLACE = ("in place",)  # the key of sendbuf None or MPI.IN_PLACE


class CallKeys:
    """The key of a call's shape read off its arguments (None: the call has no key), and the
    replay a call that ran may leave for later calls of its shape.

    Args:
        array_type: the array type keyed by ``data.ptr``, ``shape``, ``strides``, ``dtype``
            (``cupy.ndarray``); None: no type is.
        tensors: whether CUDA torch tensors are keyed too (by ``data_ptr()``, ``shape``,
            ``stride()``, ``dtype``), once the program has imported torch.
    """

    def __init__(self, array_type: type | None, tensors: bool = False) -> None:
        self._array_type = array_type
        self._ops = _mpi_ops()
        self._tensors = tensors
        self._tensor_type: type | None = None  # torch.Tensor, looked up once torch is imported
        self._strided: Any = None  # torch.strided, the dense layout, looked up with it
        # The communicator's compiled call table (mpiring.call.hot_replay), which keys the same
        # array type: it follows array_type. None: no compiled keys.
        self.compiled: Any = None

    @property
    def array_type(self) -> type | None:
        """The array type keyed (exactly that type; None: none). Settable (a test's stand-in
        type); the compiled call table, if any, follows and drops what it learned."""
        return self._array_type

    @array_type.setter
    def array_type(self, kind: type | None) -> None:
        self._array_type = kind
        if self.compiled is not None:
            self.compiled.array_type = kind

    @classmethod
    def for_gpu(cls) -> CallKeys:
        """Keys of calls on CuPy arrays (CuPy is imported once a communicator uses GPUs) and
        CUDA torch tensors."""
        cupy = sys.modules.get("cupy")
        return cls(None if cupy is None else cupy.ndarray, tensors=True)

    def is_tensor(self, obj: Any) -> bool:
        """Whether ``obj`` is exactly a torch tensor (a subclass may change what its data means:
        the full path then describes it)."""
        kind = self._tensor_type
        if kind is None:
            torch = sys.modules.get("torch") if self._tensors else None
            if torch is None:
                return False
            kind = self._tensor_type = torch.Tensor
            self._strided = torch.strided
        return type(obj) is kind

    def _buffer_key(self, buf: Any) -> Key | None:
        """What a buffer's key holds; None: a type that is not keyed (or a CPU tensor)."""
        array: Any = self._array_type
        if type(buf) is array:
            return (buf.data.ptr, buf.shape, buf.strides, buf.dtype)
        # A lazy negation shares its base's pointer, shape, strides and dtype: it takes the full
        # path, whose description refuses it (as it does a sparse tensor, which has no pointer).
        if self.is_tensor(buf) and buf.is_cuda and buf.layout is self._strided and not buf.is_neg():
            return (buf.data_ptr(), buf.shape, buf.stride(), buf.dtype)
        return None

    def key(self, collective: int, sendbuf: Any, recvbuf: Any, op: Any, algorithm: Any,
            batches: Any) -> Key | None:
        """The call's shape as a key, or None when an argument is of a type that is not keyed."""
        array: Any = self._array_type
        if type(recvbuf) is array and array is not None:  # the common case, inline
            recv: Key | None = (recvbuf.data.ptr, recvbuf.shape, recvbuf.strides, recvbuf.dtype)
        else:
            recv = self._buffer_key(recvbuf)
            if recv is None:
                return None
        if sendbuf is None or sendbuf is MPI.IN_PLACE:
            send: Key | None = _IN_PLACE
        else:
            send = self._buffer_key(sendbuf)
            if send is None:
                return None
        kind = type(op)
        if kind is Op or kind is str:
            op_key = op
        else:
            op_key = self._ops.get(id(op))
            if op_key is None:
                return None
        if not (algorithm is None or type(algorithm) is str) or not (batches is None or type(batches) is int):
            return None
        # Never equal to the dispatcher's keys of described buffers, which start with "described"
        # (one cache holds both).
        return (collective, recv, send, op_key, algorithm, batches, algorithms.version())


def replay_for(collective: Collective, prepared: Prepared, checked: bool,
               host_checked: bool, hot: HotPath | None = None) -> Replay | None:
    """After ``prepared`` ran on the full path: its replay, if it needs nothing but its launch
    and, where ``checked``, the agreement check (the post of a line packed once, or, where
    ``host_checked``, the host check of the call's values, whose wait for the peers a replay
    keeps); else None. ``Algorithm.bind`` binds an allreduce: other collectives are not
    replayed. With ``hot`` (the communicator's compiled path), a replay that only posts
    carries its compiled form where it has one (:mod:`mpiring.call.hot_replay`)."""
    row = prepared.row
    if (row.bind is None or collective is not Collective.ALLREDUCE
            or prepared.run is not row.runner(collective)
            or prepared.call.recv.count == 0 or prepared.backend.capturing()):
        return None
    backend = prepared.backend
    line = AgreementCheck.line(prepared.values) if checked and not host_checked else None
    capturing = backend.capturing if prepared.ask_capture else None
    replay = Replay(row.bind(backend, prepared.call), line, capturing,
                    host_check=prepared.values if checked and host_checked else None)
    return replay if hot is None or replay.host_check is not None else replay._replace(hot=hot.bind(replay))
