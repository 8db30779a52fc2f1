"""One-launch allreduce kernels that use every NVLink at once: one-shot and two-shot.

The CUDA source is ``csrc/direct.cu``, whose header comment states the protocol: how blocks
meet at flag barriers, why no wait is unbounded, and why buffers are reused without extra
barriers. Both algorithms push: every byte crossing NVLink is a store into a peer's staging,
never a load from it (remote stores are posted; remote loads wait a full round trip).

* **one-shot** (small messages, latency): each rank stores its input into row ``me`` of every
  peer's slot, meets the others at a flag barrier, then reduces the rows of its own slot in
  rank order 0..n-1, so every rank computes bit-identical results.
* **two-shot** (medium messages, bandwidth): per chunk, each rank stores shard s of its input
  into row ``me`` of rank s's input staging, meets the others, reduces its own shard from
  its rows and stores the result into its output and into every peer's output staging, meets
  them again, then copies the other shards into its output. Each shard is reduced by one
  rank only, so results are bit-identical on all ranks.

* **oneshot-ll** (the smallest messages): one-shot without a barrier. Every 16-byte line a
  rank stores into a peer carries 8 bytes of payload and the call's flag in both halves, so
  a reader waits for exactly the lines it reduces (``csrc/oneshot_ll.cu`` states the
  protocol).

Every kernel checks on the GPU that its peers run the same call (``csrc/agree.cuh``): each
launch carries the call's descriptor (:mod:`mpiring.core.descriptor`); where a peer's differs, every
rank skips the call and reports it in the host status block, and the communicator stays
usable. A rank whose call cannot run on the GPU this time launches a *notice* instead
(:meth:`DirectKernels.notice`), so that its peers' kernels do not wait for it in vain.

The kernels find every rank's regions through one table (``struct Ctl`` of
``csrc/contract.cuh``, mirrored by :data:`mpiring.cuda.contract.CONTROL`) that
:class:`DirectKernels` writes into this rank's staging once. Kernels of one communicator must
never run concurrently (the caller orders them on one stream): flags and lines serve one
kernel at a time.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ..core.descriptor import Descriptor
from ..core.errors import InvalidArgumentError
from ..core.ops import Op
from . import sources
from .contract import CONTROL, DIRECT_THREADS, LL_LINES, LL_THREADS
from .launcher import BoundLaunch, PackedLaunch, function_handle
from .layout import StagingLayout

THREADS = DIRECT_THREADS  # the kernels' __launch_bounds__: launching more threads would fail
WORD = 16  # bytes: rows and shards start on 16-byte boundaries of the staging
_SOURCE = "direct.cu"
_LL_SOURCE = "oneshot_ll.cu"
_NOTICE_SOURCE = "notice.cu"
LL_BLOCK_LINES = LL_THREADS * LL_LINES  # the most lines one oneshot-ll block moves
WARP = 32


class LlShape(NamedTuple):
    """The grid of one oneshot-ll launch: ``blocks`` of ``threads`` threads, each thread moving
    up to ``per_thread`` lines (``csrc/oneshot_ll.cu``, "Shape")."""

    blocks: int
    threads: int
    per_thread: int


def ll_shape(count: int, itemsize: int, block_lines: int = LL_BLOCK_LINES,
             max_blocks: int | None = None) -> LlShape:
    """The grid of a oneshot-ll launch of ``count`` elements of ``itemsize`` bytes: about
    ``block_lines`` lines (8 payload bytes each) per block, so a larger message spreads over
    more SMs, but never more than ``max_blocks`` blocks (the SM budget) nor more than
    :data:`LL_BLOCK_LINES` lines per block; whole warps, and no block without a line.

    Raises ValueError where ``max_blocks`` blocks cannot hold the message (the launcher's size
    limit keeps calls below that)."""
    if not 1 <= block_lines <= LL_BLOCK_LINES:
        raise ValueError(f"block_lines must be from 1 to {LL_BLOCK_LINES}, got {block_lines}")
    lines = max(1, -(-count * itemsize // 8))
    fewest = -(-lines // LL_BLOCK_LINES)
    wanted = -(-lines // block_lines)
    if max_blocks is not None:
        if fewest > max_blocks:
            raise ValueError(f"{lines} lines need {fewest} blocks of oneshot-ll, over the budget "
                             f"of {max_blocks}")
        wanted = min(wanted, max_blocks)
    per_block = -(-lines // max(wanted, fewest))
    per_thread = -(-per_block // LL_THREADS)  # at most LL_LINES, as per_block <= LL_BLOCK_LINES
    busy = -(-per_block // per_thread)  # threads with a line
    threads = min(LL_THREADS, -(-busy // WARP) * WARP)  # whole warps
    return LlShape(-(-lines // (threads * per_thread)), threads, per_thread)


@functools.cache
def _module(source: str, kernel: str):
    """The module of one kernel of ``csrc/<source>`` (a name of
    :func:`~mpiring.cuda.sources.name_expressions`), compiled for that kernel alone.

    NVRTC took 1.2 s for one instantiation of ``direct.cu`` and 38 s for all 48 together on a
    2-core machine (CuPy >= 14.1 then keeps the result in its disk cache). A rank's first call
    of a row waits for the compile, and its peers wait for that rank: the call compiles only
    what it launches (``tests/test_cuda_sources.py`` compiles each kind alone)."""
    import cupy

    if kernel not in sources.name_expressions(source):  # what tests/test_cuda_sources.py compiles
        raise KeyError(f"{source} has no kernel {kernel!r}")
    return cupy.RawModule(code=sources.source(source), options=sources.OPTIONS,
                          name_expressions=[kernel])


class DirectKernels:
    """Launchers of the one-shot and two-shot kernels over one communicator's staging."""

    def __init__(self, staging, layout: StagingLayout, status: int, timeout: float,
                 sm_budget: int | None = None, ll_block_lines: int | None = None) -> None:
        """``status``: device address of the host status block; ``timeout``: seconds a barrier
        may wait for a peer before the kernel aborts the communicator; ``sm_budget``: the most
        blocks a oneshot-ll launch may have (its largest message shrinks to fit; the one-/two-shot
        grid is ``layout.blocks``, already within the budget); ``ll_block_lines``: about how many
        lines a oneshot-ll block moves (:func:`ll_shape`; default :data:`LL_BLOCK_LINES`)."""
        import cupy

        self.layout = layout
        self.blocks = layout.blocks
        # Two-shot cuts a call of several chunks into shards of a 16-byte word per thread of
        # the grid (csrc/direct.cu, "Staging words keep their owner"): a chunk must hold one
        # such shard per rank.
        grain = staging.size * WORD * THREADS * layout.blocks
        if grain > layout.twoshot_bytes:
            raise InvalidArgumentError(
                f"the direct kernels' grid of {layout.blocks} blocks is too large for "
                f"{staging.size} ranks: two-shot needs {staging.size} x {WORD} x {THREADS} x "
                f"{layout.blocks} = {grain} bytes of staging per chunk and has "
                f"{layout.twoshot_bytes}; use at most "
                f"{layout.twoshot_bytes // (staging.size * WORD * THREADS)} blocks "
                "(MPIRING_DIRECT_BLOCKS)")
        # The largest one-shot message, in bytes: every rank's row must fit one slot.
        self.oneshot_limit = layout.oneshot_bytes // staging.size // WORD * WORD
        self.ll_limit = layout.ll_limit  # the largest oneshot-ll message, in bytes
        if sm_budget is not None:  # ll_shape(ll_limit) must stay within the budget
            self.ll_limit = min(self.ll_limit, sm_budget * LL_BLOCK_LINES * 8)
        self._ll_block_lines = LL_BLOCK_LINES if ll_block_lines is None else ll_block_lines
        self._ll_max_blocks = sm_budget
        ctl = np.zeros((), dtype=CONTROL)
        for r in range(staging.size):
            ctl["flags"][r] = staging.addr(r, layout.direct_flags)
            ctl["oneshot"][r] = [staging.addr(r, layout.oneshot_slot(k)) for k in range(2)]
            ctl["twoshot_in"][r] = staging.addr(r, layout.twoshot_in)
            ctl["twoshot_out"][r] = staging.addr(r, layout.twoshot_out)
            ctl["aborts"][r] = staging.addr(r, layout.abort)
            ctl["ll"][r] = [staging.addr(r, layout.ll_slot(k)) for k in range(2)]
            ctl["ll_headers"][r] = staging.addr(r, layout.ll_header(0, 0))
        ctl["ll_state"] = staging.addr(staging.rank, layout.ll_state)
        ctl["ll_row_bytes"] = layout.ll_row_bytes
        ctl["status"] = status
        ctl["twoshot_bytes"] = layout.twoshot_bytes
        ctl["timeout_ns"] = min(int(timeout * 1e9), 1 << 62)
        ctl["rank"], ctl["size"], ctl["blocks"] = staging.rank, staging.size, layout.blocks
        table = np.frombuffer(ctl.tobytes(), dtype=np.uint8)
        if table.nbytes > layout.TABLE_BYTES:
            raise AssertionError("the direct kernels' table outgrew its place in the staging")
        self._ctl_ptr = staging.addr(staging.rank, layout.direct_table)
        rt = cupy.cuda.runtime
        rt.memcpy(self._ctl_ptr, table.ctypes.data, table.nbytes, rt.memcpyHostToDevice)
        rt.deviceSynchronize()  # set-up only: the table has landed before any stream reads it
        self._functions: dict[tuple[str, np.dtype, Op], int] = {}
        # (in, out, n, ctl, vec, d0, d1): the kernels' parameters, as csrc/direct.cu declares
        # them (d0, d1: the call's descriptor); csrc/oneshot_ll.cu's add per_thread (its shape).
        self._launch = PackedLaunch(("ptr", "ptr", "i64", "ptr", "i32", "i64", "i64"), THREADS)
        self._launch_ll = PackedLaunch(("ptr", "ptr", "i64", "ptr", "i32", "i64", "i64", "i32"), LL_THREADS)
        # (ctl, d0, d1): the notice's, as csrc/notice.cu declares them.
        self._launch_notice = PackedLaunch(("ptr", "i64", "i64"), LL_THREADS)
        self._ll_shapes: dict[tuple[int, np.dtype, Op], tuple[int, LlShape]] = {}
        self._notice: int | None = None

    def disable_timeout(self) -> None:
        """Set the kernels' timeout, in the control table on the device, to never (2**62 ns, the
        cap set-up applies): a barrier or line wait then waits for its peer for ever. A testing
        aid (``Communicator.disable_gpu_timeouts``); kernels launched after this see it."""
        import cupy

        fields = CONTROL.fields
        assert fields is not None  # a structured dtype
        never = np.array([1 << 62], dtype=np.int64)
        rt = cupy.cuda.runtime
        rt.memcpy(self._ctl_ptr + fields["timeout_ns"][1], never.ctypes.data, never.nbytes,
                  rt.memcpyHostToDevice)
        rt.deviceSynchronize()

    def _function(self, kind: str, dtype: np.dtype, op: Op) -> int:
        key = (kind, dtype, op)  # the dtype itself: its .name is built afresh at every access
        fn = self._functions.get(key)
        if fn is None:
            source = _LL_SOURCE if kind == "oneshot_ll" else _SOURCE
            name = sources.kernel_name(kind, np.dtype(dtype).name, op)
            fn = function_handle(_module(source, name).get_function(name))
            self._functions[key] = fn
        return fn

    def _ll_shape(self, count: int, dtype: np.dtype, op: Op) -> tuple[int, LlShape]:
        """(function, grid) of a oneshot-ll launch of ``count`` elements."""
        key = (count, dtype, op)  # hot path: one lookup per call shape (bounded)
        shape = self._ll_shapes.get(key)
        if shape is None:
            if len(self._ll_shapes) >= 4096:
                self._ll_shapes.clear()
            shape = self._ll_shapes[key] = (self._function("oneshot_ll", dtype, op),
                                            ll_shape(count, dtype.itemsize, self._ll_block_lines,
                                                     self._ll_max_blocks))
        return shape

    def launch_ll(self, src: int, out: int, count: int, dtype: np.dtype, op: Op, desc: Descriptor,
                  stream) -> None:
        """Enqueue one oneshot-ll allreduce of ``count`` elements carrying descriptor ``desc``."""
        function, shape = self._ll_shape(count, dtype, op)
        self._launch_ll(function, shape.blocks, stream.ptr, src, out, count, self._ctl_ptr,
                        int((src | out) % 8 == 0), desc[0], desc[1], shape.per_thread, threads=shape.threads)

    def launch(self, kind: str, src: int, out: int, count: int, dtype: np.dtype, op: Op, desc: Descriptor,
               stream) -> None:
        """Enqueue one ``kind`` ("oneshot" or "twoshot") allreduce of ``count`` elements carrying
        descriptor ``desc``."""
        vectorized = int((src | out) % 16 == 0)
        self._launch(self._function(kind, dtype, op), self.blocks, stream.ptr,
                     src, out, count, self._ctl_ptr, vectorized, desc[0], desc[1])

    def bind(self, kind: str, src: int, out: int, count: int, dtype: np.dtype, op: Op,
             desc: Descriptor) -> BoundLaunch:
        """The launch of ``kind`` ("oneshot", "twoshot" or "oneshot_ll") that :meth:`launch` or
        :meth:`launch_ll` would make for these arguments, with every argument fixed: calling it
        with a stream enqueues that very kernel there again (the eager fast path)."""
        if kind == "oneshot_ll":
            function, shape = self._ll_shape(count, dtype, op)
            return self._launch_ll.bind(function, shape.blocks, src, out, count, self._ctl_ptr,
                                        int((src | out) % 8 == 0), desc[0], desc[1], shape.per_thread,
                                        threads=shape.threads)
        return self._launch.bind(self._function(kind, dtype, op), self.blocks, src, out, count,
                                 self._ctl_ptr, int((src | out) % 16 == 0), desc[0], desc[1])

    def notice(self, desc: Descriptor, stream) -> None:
        """Enqueue a notice carrying ``desc`` (a kind of :mod:`mpiring.core.descriptor` other than
        ``CALL``): this rank's part in a GPU call it cannot run (``csrc/notice.cu``)."""
        if self._notice is None:
            self._notice = function_handle(_module(_NOTICE_SOURCE, "notice").get_function("notice"))
        self._launch_notice(self._notice, 1, stream.ptr, self._ctl_ptr, desc[0], desc[1])
