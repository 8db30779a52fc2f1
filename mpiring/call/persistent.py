"""Persistent allreduce (MPI-4's ``MPI_Allreduce_init``, mpi4py's ``Comm.Allreduce_init``): the
call's arguments fixed once, run by ``Start()`` as often as wanted.

Reference semantics, as plain code::

    request = comm.Allreduce_init(sendbuf, recvbuf, op)  # local: nothing runs, nothing is checked
    request.Start()   # == comm.Allreduce(sendbuf, recvbuf, op): the same result, stream order and checks
    request.Wait()    # nothing left to wait for on the host (as after Allreduce): returns at once
    request.Free()    # drops the arrays; a later Start raises

What a Start saves: ``Allreduce`` reads the key of its arrays (pointer, shape, strides, dtype)
and looks up the call's kept plan at every call (:mod:`mpiring.call.replay`); a request holds
its arrays, so its key cannot change, and it keeps the replay its first Start found or made.
A later Start checks that the communicator's plans were not dropped since (the dispatcher's
``generation``) and that no row was registered (``algorithms.version()``), takes the
communicator's lock and runs the replay: one C call where the replay is compiled
(:mod:`mpiring.call.hot_replay`). Anything else (no replay, plans dropped, the replay handing
the call back: a capture, a failure, a closed communicator) runs ``Allreduce``'s own path,
which raises what it raises. Torch tensors always take that path (it reads torch's current
stream at every call).

The request keeps its arrays alive until :meth:`PersistentAllreduce.Free`: the replay's launch
names their device addresses. Changing an array's shape or dtype in place after
``Allreduce_init`` is not supported (as in MPI, the buffers are fixed); its contents are the
point, and may change between Starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import algorithms
from ..core.errors import InvalidArgumentError
from .hot_replay import FALLBACK, REPLAYED

if TYPE_CHECKING:
    from .dispatch import Dispatcher, Replay


class StartHooks(NamedTuple):
    """What a request needs of its communicator (``Communicator.Allreduce_init`` passes them)."""

    call: Callable[..., Replay | None]  # the call's path (``Communicator._collective``); answers its replay
    lock: Any  # the communicator's lock (taken without waiting, as every call does)
    finish: Callable[[Replay, int], bool]  # Replayer.finish: what a replay handed back
    busy: Callable[[str], Exception]  # the error of a call made while another runs
    dispatcher: Dispatcher  # its ``generation`` changes whenever the kept plans are dropped


class PersistentAllreduce:
    """A persistent allreduce of one communicator (``Communicator.Allreduce_init``).

    Args:
        hooks: the communicator's :class:`StartHooks`.
        args: ``(collective, sendbuf, recvbuf, op, algorithm, batches)`` as ``Allreduce`` passes
            them on.
    """

    def __init__(self, hooks: StartHooks, args: tuple[Any, ...]) -> None:
        self._hooks = hooks
        self._dispatcher, self._lock = hooks.dispatcher, hooks.lock  # (read at every Start)
        self._table_version = algorithms.version_word()[1]  # [0]: algorithms.version()
        self._args: tuple[Any, ...] | None = args  # None once freed
        self._label = args[0].label  # the collective's name, for a busy error as its call raises
        self._replay: Replay | None = None  # kept by the last Start on the full path
        self._generation = self._version = -1  # the dispatcher's and the table's, at that Start

    def Start(self) -> None:
        """Run the allreduce (what ``Communicator.Allreduce`` does with the same arguments)."""
        replay = self._replay
        if (replay is not None and self._generation == self._dispatcher.generation
                and self._version == self._table_version[0]):
            lock = self._lock
            if not lock.acquire(False):
                raise self._hooks.busy(self._label)
            try:  # Communicator._collective's replay, without its key or lookup
                outcome = replay.hot.run() if replay.hot is not None else FALLBACK
                if outcome == REPLAYED or self._hooks.finish(replay, outcome):
                    return
            finally:
                lock.release()
        args = self._args
        if args is None:
            raise InvalidArgumentError("Start() of a freed persistent Allreduce: make a new one "
                                       "with Communicator.Allreduce_init")
        # Read before the call: plans dropped during it (a full table) leave this replay unused.
        generation, version = self._dispatcher.generation, self._table_version[0]
        self._replay = self._hooks.call(*args)
        self._generation, self._version = generation, version

    def Wait(self) -> None:
        """Return: a started allreduce is complete on the host (host arrays) or ordered on the
        stream (GPU arrays: later work there sees the result), as after ``Allreduce``."""

    def Free(self) -> None:
        """Drop the arrays and the kept replay; a later :meth:`Start` raises."""
        self._args = self._replay = None
