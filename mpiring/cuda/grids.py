"""How many thread blocks mpiring's kernels launch: the grid rules the launchers use, as pure
functions, and :class:`GridLimits`, the numbers one communicator's GPU context fixed at set-up
(its SM budget, its device's SMs) that those rules read.

The launchers (:class:`~mpiring.cuda.fold_kernel.FoldKernel`, the ce-twoshot fold's device,
:class:`~mpiring.cuda.direct_kernels.DirectKernels`) call these very functions, so what an
algorithm row states about its SMs (``Algorithm.sm_work``) is the grid that is launched.
A block runs on one SM; a grid of more blocks than the device has SMs holds every SM.
"""

from __future__ import annotations

from dataclasses import dataclass

from .direct_kernels import LL_BLOCK_LINES, ll_shape
from .layout import direct_blocks
from .sources import COPY_UNITS

FOLDS_PER_SM = 4  # without an SM budget, the fold and copy kernels' grid is at most 4 blocks per SM


def fold_block_cap(device_sms: int, sm_budget: int | None) -> int:
    """The most blocks a fold, copy or average kernel launches: the SM budget (at most the
    device's SMs), else :data:`FOLDS_PER_SM` per SM; the kernels loop over their grid."""
    return min(sm_budget, device_sms) if sm_budget else FOLDS_PER_SM * device_sms


def fold_blocks(count: int, itemsize: int, vectorized: bool, cap: int, threads: int) -> int:
    """Blocks of a fold of ``count`` elements: one element per thread, or one 16-byte word per
    thread where every pointer allows 16-byte accesses (``vectorized``), at most ``cap``."""
    per_thread = 16 // itemsize if vectorized else 1
    return min(cap, -(-count // (threads * per_thread)))


def copy_unit(out: int, src: int, nbytes: int) -> int:
    """The widest unit (bytes) of the copy kernel that both addresses and the length allow."""
    return next(u for u in COPY_UNITS if (out | src | nbytes) % u == 0)


def copy_blocks(nbytes: int, unit: int, cap: int, threads: int) -> int:
    """Blocks of a copy of ``nbytes`` in units of ``unit`` bytes, one unit per thread, at most ``cap``."""
    return min(cap, -(-(nbytes // unit) // threads))


@dataclass(frozen=True)
class GridLimits:
    """What bounds the grids of one communicator's kernels (made by :meth:`of` at set-up).

    Attributes:
        fold_cap: the most blocks of a fold or copy kernel (:func:`fold_block_cap`).
        direct_blocks: the one-shot and two-shot kernels' grid, fixed for every call
            (:func:`~mpiring.cuda.layout.direct_blocks`: ``MPIRING_DIRECT_BLOCKS``, at most
            the budget as asked, which every rank shares).
        ll_block_lines: about how many lines one oneshot-ll block moves.
        ll_max_blocks: the most blocks of a oneshot-ll launch (the budget; None: none).
        device_sms: the SMs of the communicator's GPU (None: not told).
    """

    fold_cap: int
    direct_blocks: int
    ll_block_lines: int = LL_BLOCK_LINES
    ll_max_blocks: int | None = None
    device_sms: int | None = None

    @classmethod
    def of(cls, device_sms: int, sm_budget: int | None, ll_block_lines: int | None = None) -> GridLimits:
        """The limits of a communicator on a device of ``device_sms`` SMs asked for ``sm_budget``
        (``Communicator(sm_budget=N)``; None: none)."""
        held = None if sm_budget is None else min(sm_budget, device_sms)
        return cls(fold_block_cap(device_sms, held), direct_blocks(sm_budget),
                   LL_BLOCK_LINES if ll_block_lines is None else ll_block_lines, held, device_sms)

    def ll_blocks(self, count: int, itemsize: int) -> int | None:
        """Blocks of a oneshot-ll launch of ``count`` elements (None: over its budget's limit,
        which the row refuses)."""
        try:
            return ll_shape(count, itemsize, self.ll_block_lines, self.ll_max_blocks).blocks
        except ValueError:
            return None
