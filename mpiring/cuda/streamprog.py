"""Stream programs: a fixed list of device operations (stream waits and writes, copy-engine
copies, kernel launches) issued by one C call, where only the call's buffers and round counts
change from call to call.

A :class:`Program` is a numpy array of records of :data:`WIDTH` int64 fields::

    [op, stream, a_base, a_offset, b_base, b_offset, c, d]

==========  =========================================  ===========================================
op          a                                          b, c, d
==========  =========================================  ===========================================
WAIT        the flag's address (``a_base`` FIXED)      the value: ``rounds[b_base] + b_offset``
WRITE       the flag's address (``a_base`` FIXED)      the value: ``rounds[b_base] + b_offset``
COPY        the destination: ``buffers[a_base] + a``   the source ``buffers[b_base] + b``; c bytes
FOLD        the output: ``buffers[a_base] + a``        this rank's piece ``buffers[b_base] + b``;
                                                       c the table of the peers' pieces; d elements
==========  =========================================  ===========================================

where ``buffers = (0, input, output)`` and ``rounds = (0, scatter, gather)`` are what a call
supplies (:data:`FIXED`, :data:`INPUT`, :data:`OUTPUT`; :data:`SCATTER`, :data:`GATHER`). The
program's maker (:meth:`mpiring.ring.alltoall_engine.AllToAllEngine.program`) fixes everything
else: streams, staging addresses, flag addresses, the fold table, sizes.

Two readers issue a program, the same operations in the same order:

* :meth:`Program.issue`, in Python, onto any object with the device methods ``wait_geq``,
  ``write``, ``copy`` and ``fold`` (the engine's ``Device``): the simulated GPUs of the tests;
* :class:`Executor`, the C extension ``mpiring/cuda/_streamprog.c``: one loop that calls
  ``cuStreamWaitValue64_v2``, ``cuStreamWriteValue64_v2``, ``cuMemcpyAsync`` and
  ``cuLaunchKernel`` through function pointers (the driver's, found with ``dlsym`` in
  ``libcuda.so.1``, or a test's recording stand-ins), the GIL released. A fold is one launch
  of a kernel with ``csrc/fold_n.cu``'s parameters; its grid and its 16-byte path are decided
  per call from the addresses (:func:`fold_grid`), as the Python device decides them. The
  first driver error stops the loop: :meth:`Executor.run` raises what the Python device
  raises for that operation (:meth:`~.memops.StreamMemOps.error`, or the launch's error).

Off (the caller's Python path runs instead): where the extension is not built (``pip install``
builds it where a C compiler exists; a checkout: ``python -m tools.build_hotpath``), with
``MPIRING_HOTPATH=0``, or without ``libcuda.so.1``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, Protocol

import numpy as np

from ..core import extensions
from .grids import fold_blocks
from .launcher import driver_error
from .memops import StreamMemOps

EXTENSION = "mpiring.cuda._streamprog"
WIDTH = 8  # int64 fields per record: 64 bytes
OP, STREAM, A_BASE, A, B_BASE, B, C, D = range(WIDTH)
WAIT, WRITE, COPY, FOLD = 1, 2, 3, 4  # op
FIXED, INPUT, OUTPUT = 0, 1, 2  # an address's base: none, the call's input, the call's output
SCATTER, GATHER = 1, 2  # a value's base: the rounds of the reduce-scatter or all-gather stage
DRIVER_NAMES = {WAIT: "cuStreamWaitValue64", WRITE: "cuStreamWriteValue64", COPY: "cuMemcpyAsync",
                FOLD: "cuLaunchKernel"}
FOLD_PARAMS = ("ptr", "ptr", "ptr", "i32", "i32", "i64", "i32", "ptr", "ptr")  # csrc/fold_n.cu's
MALFORMED = -1  # the code Executor.run's C loop answers for a record it cannot read


class ProgramDevice(Protocol):
    """What :meth:`Program.issue` enqueues onto (per stream; handles are ints)."""

    def wait_geq(self, stream: int, addr: int, value: int) -> None: ...

    def write(self, stream: int, addr: int, value: int) -> None: ...

    def copy(self, stream: int, dst: int, src: int, nbytes: int) -> None: ...

    def fold(self, stream: int, out: int, mine: int, table: int, me: int, ranks: int, count: int) -> None: ...


def fold_grid(out: int, mine: int, count: int, itemsize: int, threads: int,
              max_blocks: int) -> tuple[int, bool]:
    """(blocks, vectorized) of a ``fold_n`` launch: 16-byte loads where both of this rank's
    addresses allow them (the staging's areas always do), one block per ``threads`` loads."""
    vectorized = (out | mine) % 16 == 0
    return fold_blocks(count, itemsize, vectorized, max_blocks, threads), vectorized


class Program:
    """One call shape's operations (records as the module docstring says), for rank ``rank`` of
    ``ranks`` and items of ``itemsize`` bytes (a fold's arguments)."""

    def __init__(self, records: np.ndarray, rank: int, ranks: int, itemsize: int) -> None:
        if records.dtype != np.int64 or records.ndim != 2 or records.shape[1] != WIDTH:
            raise ValueError(f"a program is an int64 array of {WIDTH} columns, got {records.dtype} "
                             f"{records.shape}")
        self.records = np.ascontiguousarray(records)
        self.records.setflags(write=False)  # cached and shared by every call of the shape
        self.rank, self.ranks, self.itemsize = rank, ranks, itemsize

    def __len__(self) -> int:
        return len(self.records)

    @property
    def nbytes(self) -> int:
        return int(self.records.nbytes)

    def issue(self, device: ProgramDevice, input_addr: int, output_addr: int, scatter: int,
              gather: int) -> None:
        """Enqueue every operation onto ``device``, for a call of these buffers after rounds
        ``scatter`` and ``gather`` (the Python reading of what :class:`Executor` does)."""
        buffers, rounds = (0, input_addr, output_addr), (0, scatter, gather)
        for op, stream, a_base, a, b_base, b, c, d in self.records.tolist():
            if op == WAIT:
                device.wait_geq(stream, a, rounds[b_base] + b)
            elif op == WRITE:
                device.write(stream, a, rounds[b_base] + b)
            elif op == COPY:
                device.copy(stream, buffers[a_base] + a, buffers[b_base] + b, c)
            elif op == FOLD:
                device.fold(stream, buffers[a_base] + a, buffers[b_base] + b, c, self.rank, self.ranks, d)
            else:
                raise ValueError(f"a program record with no operation {op}")


def compiled(environ: dict[str, str] | None = None) -> ModuleType | None:
    """The extension module, or None where it is not built or ``MPIRING_HOTPATH=0``."""
    module = extensions.optional(EXTENSION, environ)
    if module is None:
        return None
    codes = (module.WAIT, module.WRITE, module.COPY, module.FOLD)
    if module.WIDTH != WIDTH or codes != (WAIT, WRITE, COPY, FOLD):
        raise ImportError(f"{EXTENSION} reads other records than this module writes: rebuild it "
                          "(python -m tools.build_hotpath)")
    return module


class Executor:
    """Issues :class:`Program` s with one C call each (``mpiring/cuda/_streamprog.c``).

    Args:
        module: the extension (:func:`compiled`).
        memops: the device's :class:`~.memops.StreamMemOps`: its wait and write flags, and the
            errors of a failed wait, write or copy.
        threads: threads per block of a fold (its kernel's ``__launch_bounds__``).
        max_blocks: the most blocks of a fold.
        guard: a fold's last two arguments (the communicator's abort word, its status block).
        functions: addresses of functions with the signatures of ``cuStreamWaitValue64``,
            ``cuStreamWriteValue64``, ``cuMemcpyAsync`` and ``cuLaunchKernel``, by those names
            (default: the driver's, ``module.driver_functions()``); tests pass recorders.
        launch_error: the exception of a failed launch, from its ``CUresult``.
        keep: what owns ``functions``' code (a test's ctypes callbacks): kept as long as this.
    """

    def __init__(self, module: ModuleType, memops: StreamMemOps | Any, threads: int, max_blocks: int,
                 guard: tuple[int, int], functions: dict[str, int] | None = None,
                 launch_error: Callable[[int], BaseException] = driver_error, keep: object = None) -> None:
        self.memops, self.launch_error, self._keep = memops, launch_error, keep
        found = module.driver_functions() if functions is None else functions
        self._run = module.Executor(
            wait=found["cuStreamWaitValue64"], write=found["cuStreamWriteValue64"],
            copy=found["cuMemcpyAsync"], launch=found["cuLaunchKernel"],
            wait_flags=memops.wait_flags, write_flags=memops.write_flags, threads=threads,
            max_blocks=max_blocks, abort=guard[0], status=guard[1]).run

    def run(self, program: Program, input_addr: int, output_addr: int, scatter: int, gather: int,
            function: int) -> None:
        """Issue ``program`` for a call of these buffers after rounds ``scatter`` and ``gather``,
        its folds launching ``function``; raises the first failure's error (the operations before
        it are enqueued, none after)."""
        failed = self._run(program.records, input_addr, output_addr, scatter, gather, function,
                           program.rank, program.ranks, program.itemsize)
        if failed is None:
            return
        index, status = failed
        op = int(program.records[index, OP]) if 0 <= index < len(program) else 0
        if status == MALFORMED or op not in DRIVER_NAMES:
            raise ValueError(f"stream program record {index} is malformed: {program.records[index].tolist()}")
        if op == FOLD:
            raise self.launch_error(status)
        raise self.memops.error(DRIVER_NAMES[op], status)
