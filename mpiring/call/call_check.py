"""Where each call of a communicator is checked against its peers' calls, and what a failed
check does: the glue between :class:`mpiring.Communicator`, the host check
(:class:`mpiring.call.agreement.AgreementCheck`) and the GPU-side check (``csrc/agree.cuh``).

Modes (``check=``, ``MPIRING_CHECK``):

* ``"gpu"`` (default): a call of a row whose kernels check on the GPU (``Algorithm.gpu_check``)
  is only announced in the node's board (:meth:`AgreementCheck.post`, no wait); its kernels
  compare descriptors and skip the call on every rank if they differ. What they skipped is
  raised after a later call is enqueued, or by ``synchronize()``: raising before the call
  would leave the peers' kernels of that call without this rank. Every other call is checked
  on the host, which launches a notice for a peer's kernel that waits for this rank.
  On several nodes no row checks on the GPU: every call is checked on the host.
* ``"host"``: every call on the host, before anything is enqueued (errors at the very call).
* off: no check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .. import algorithms
from ..algorithms import Collective
from ..core.errors import PeerArgumentError, RankMismatchError
from ..core.fields import FIELDS, describe_field
from .agreement import AgreementCheck
from .options import GPU_CHECK

if TYPE_CHECKING:
    from ..context.gpu import GpuBackend


class CallCheck:
    """One communicator's agreement check of each call.

    Args:
        agreement: the host check (its board, timeout and counts).
        fail: marks the communicator failed (a timeout of the check, a peer gone).
    """

    def __init__(self, agreement: AgreementCheck, fail: Callable[[BaseException], None]) -> None:
        self.agreement, self._fail = agreement, fail
        self._gpu: GpuBackend | None = None

    def use_gpu(self, gpu: GpuBackend, mode: str) -> None:
        """Check on the GPU where ``mode`` asks for it and this communicator can (one node)."""
        if mode == GPU_CHECK and self.agreement.posts:
            self._gpu = gpu
            self.agreement.gpu_codes = frozenset(a.code for a in algorithms.rows() if a.gpu_check)
            self.agreement.notify = gpu.notice

    def before(self, rejected: bool, values: dict[str, int], gpu_check: bool) -> None:
        """The check of one call, before it is enqueued: raises on every rank if a rank rejected
        its arguments or the ranks disagree (unless the call's kernels check it on the GPU)."""
        if gpu_check and not rejected and self._gpu is not None:
            self.post(self.agreement.line(values))  # no wait: the kernels compare the calls on the GPU
            return
        self.host(rejected, values)

    def post(self, line: np.ndarray) -> None:
        """Announce a call whose kernels check it on the GPU (its descriptor ``line``:
        :meth:`AgreementCheck.line`; a replay packs it once); a timeout fails the communicator."""
        try:
            self.agreement.post(line)
        except BaseException as err:
            self._fail(err)
            raise

    def posts(self, gpu_check: bool) -> bool:
        """Whether :meth:`before` only posts a call (no wait) whose row checks on the GPU as
        ``gpu_check`` says: what a replayed call may do (:mod:`mpiring.call.replay`)."""
        return gpu_check and self._gpu is not None

    def host(self, rejected: bool, values: dict[str, int]) -> None:
        """The host check; a timeout fails the communicator (its allreduce stays pending)."""
        try:
            self.agreement.run(rejected, values, algorithms.name_of_code(values["algorithm"]))
        except (PeerArgumentError, RankMismatchError):  # every rank raises alike: still usable
            raise
        except BaseException as err:  # a timeout, a failed peer, Ctrl-C: its allreduce stays pending
            self._fail(err)
            raise

    def reject(self) -> None:
        """This rank rejected a call before it could describe it: tell the peers (host check)."""
        self.host(True, dict.fromkeys(FIELDS, 0))

    @property
    def reports_skipped(self) -> bool:
        """Whether :meth:`after` has anything to report: the kernels check calls on the GPU."""
        return self._gpu is not None

    def after(self) -> None:
        """Raise what the GPU-side check reported since the last time: calls it skipped because
        the ranks disagreed (every rank skipped them; the communicator stays usable)."""
        if self._gpu is not None:
            err = self._gpu.skipped(describe)
            if err is not None:
                raise err


def describe(field: str, code: int) -> str:
    """How a descriptor field reads in an error of the GPU-side check ("float32", "oneshot")."""
    if field == "algorithm":
        return algorithms.name_of_code(code)
    if field == "collective":
        return Collective(code).label if code in Collective._value2member_map_ else f"collective code {code}"
    return describe_field(field, code)
