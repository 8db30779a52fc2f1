"""The collectives the benchmark measures (``--collective``) and what one point of each holds.

What "size" means, as in nccl-tests: the whole buffer. For ``allreduce`` the vector every rank
reduces; for ``reduce_scatter`` (``Reduce_scatter_block``) the send buffer, of which each rank
receives one block; for ``allgather`` the receive buffer, of which each rank sends one block.
The block holds ``m = size / nranks / itemsize`` elements, and a size that is not a whole
number of blocks is **rounded down** to one (as nccl-tests does; sizes under one element per
rank are dropped). The ``count`` of a row is nccl-tests' count column: the vector's elements
for allreduce, the elements of one rank's block (``m``) for reduce_scatter and allgather.

Inputs: rank q's input is conceptually the full vector ``values(q, 0 .. N)`` of
:class:`~mpiring.bench.data.InputGenerator` (N = nranks * m). allreduce and reduce_scatter send
all of it; allgather sends block q of it. So the exact results are

    allreduce       recv[i] = total(i)                 i < N   (total: the allreduce of all inputs)
    reduce_scatter  recv[i] = total(r * m + i)         i < m   (on rank r)
    allgather       recv[i] = values(i // m, i)        i < N

and every rank computes them on its own. In place (``MPI.IN_PLACE``): reduce_scatter's
``recv`` holds the N inputs and gets its block in its first m elements; allgather's ``recv``
holds the rank's block at ``r * m`` (the rest poisoned) and gets all N.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..algorithms import Collective
from .arrays import Mismatch
from .data import CHUNK, InputGenerator, pieces
from .stats import bus_factor

ALLREDUCE, REDUCE_SCATTER, ALLGATHER = "allreduce", "reduce_scatter", "allgather"
NAMES = (ALLREDUCE, REDUCE_SCATTER, ALLGATHER)
ALL = "all"
KINDS = {ALLREDUCE: Collective.ALLREDUCE, REDUCE_SCATTER: Collective.REDUCE_SCATTER,
         ALLGATHER: Collective.ALLGATHER}
MPI_NAMES = {ALLREDUCE: "Allreduce", REDUCE_SCATTER: "Reduce_scatter_block", ALLGATHER: "Allgather"}


def kind(name: str) -> Collective:
    """The library's :class:`~mpiring.algorithms.Collective` of a bench name."""
    return KINDS[name]


def factor_text(collective: str) -> str:
    """The bus-bandwidth factor as printed in the banner and plots."""
    return "2(n-1)/n" if collective == ALLREDUCE else "(n-1)/n"


def element_counts(sizes: list[int], itemsize: int, nranks: int,
                   collective: str = ALLREDUCE) -> list[tuple[int, int]]:
    """``(bytes, elements of the whole buffer)`` per size. allreduce: the count rounds down to
    whole elements; reduce_scatter / allgather: to whole blocks of ``nranks`` elements. Sizes
    that round to nothing are dropped, sizes that round alike kept once."""
    unit = 1 if collective == ALLREDUCE else max(1, nranks)
    out, seen = [], set()
    for size in sizes:
        count = size // itemsize // unit * unit
        if count < 1 or count in seen:
            continue
        seen.add(count)
        out.append((count * itemsize, count))
    return out


def reported_count(collective: str, total: int, nranks: int) -> int:
    """nccl-tests' count column: the vector for allreduce, one rank's block otherwise."""
    return total if collective == ALLREDUCE else total // nranks


def size_line(collective: str) -> str:
    """What a size is, for the banner."""
    if collective == ALLREDUCE:
        return "allreduce: size = the vector; busbw = algbw * 2(n-1)/n"
    whole = "send" if collective == REDUCE_SCATTER else "receive"
    return (f"{collective} ({MPI_NAMES[collective]}): size = the whole {whole} buffer, rounded "
            f"down to whole blocks of n elements; count = size / n / itemsize per rank; "
            f"busbw = algbw * (n-1)/n")


def odd_count_near(count: int) -> int | None:
    """An odd element count a little under ``count`` (``count - 7`` or ``- 8``, or ``count - 1``
    for tiny vectors), for the check of a call whose count is no power of two; None below 2.
    The timed sizes are mostly powers of two, which hid a two-shot bug of other counts."""
    near = count - 7 if count > 8 else count - 1
    if near % 2 == 0:
        near -= 1
    return near if near >= 1 else None


def _spans(a: int, b: int, m: int) -> list[tuple[int, int]]:
    """``[a, b)`` cut at multiples of ``m`` (block edges) and of :data:`CHUNK`."""
    out, s = [], a
    while s < b:
        e = min(b, (s // CHUNK + 1) * CHUNK, (s // m + 1) * m if m else b)
        out.append((s, e))
        s = e
    return out


@dataclass(frozen=True)
class Expect:
    """The exact contents of one point's buffers on ``rank``, piece by piece (int32)."""

    gen: InputGenerator
    collective: str
    total: int  # N: the whole buffer, in elements
    rank: int

    @property
    def block(self) -> int:
        return self.total // self.gen.nranks

    @property
    def send_count(self) -> int:
        return self.block if self.collective == ALLGATHER else self.total

    @property
    def recv_count(self) -> int:
        """Elements of the result (the checked part of ``recv``)."""
        return self.block if self.collective == REDUCE_SCATTER else self.total

    def _cat(self, parts: list[Any]) -> Any:
        return parts[0] if len(parts) == 1 else self.gen.xp.concatenate(parts)

    def own(self, s: int, e: int) -> Any:
        """This rank's send buffer, elements ``s:e``."""
        off = self.rank * self.block if self.collective == ALLGATHER else 0
        return self._cat([self.gen.values(self.rank, a, b)
                          for a, b in _spans(off + s, off + e, self.total)])

    def want(self, s: int, e: int) -> Any:
        """The result, elements ``s:e``."""
        gen, m = self.gen, self.block
        if self.collective == ALLGATHER:
            return self._cat([gen.values(a // m, a, b) for a, b in _spans(s, e, m)])
        off = self.rank * m if self.collective == REDUCE_SCATTER else 0
        return self._cat([gen.expected(a, b) for a, b in _spans(off + s, off + e, self.total)])


class SizeBuffers:
    """The buffers of one message size: ``send`` holds this rank's input, ``recv`` the result
    (as large as the whole buffer: reduce_scatter's in-place input lives there).

    With ``cache`` (host runs), this rank's input and the expected result are kept as int32
    arrays, since regenerating them on a CPU costs more than the collective; on GPUs they are
    regenerated piece by piece for each check, in a few device passes, using no extra memory.
    """

    def __init__(self, space: Any, gen: InputGenerator, count: int, rank: int, cache: bool,
                 collective: str = ALLREDUCE):
        self.space, self.gen, self.rank, self.collective = space, gen, rank, collective
        self.expect = Expect(gen, collective, count, rank)
        self.count = self.expect.recv_count  # the checked elements of recv
        self.send = space.empty(self.expect.send_count, gen.dtype)
        self.recv = space.empty(count, gen.dtype)
        self._input: np.ndarray | None = None
        self._expected: np.ndarray | None = None
        if cache:
            self._input = self._fill(self.expect.send_count, self.expect.own)
            self._expected = self._fill(self.count, self.expect.want)
        self.load_input()

    @staticmethod
    def _fill(n: int, fn: Callable[[int, int], Any]) -> np.ndarray:
        out = np.empty(n, np.int32)
        for s, e in pieces(n):
            out[s:e] = fn(s, e)
        return out

    def _own(self, s: int, e: int) -> Any:
        return self._input[s:e] if self._input is not None else self.expect.own(s, e)

    def _want(self, s: int, e: int) -> Any:
        return self._expected[s:e] if self._expected is not None else self.expect.want(s, e)

    def load_input(self) -> None:
        for s, e in pieces(self.expect.send_count):
            self.space.store(self.send, s, self._own(s, e))
        self.space.synchronize()

    def recv_arg(self, in_place: bool) -> Any:
        """What the call receives into: reduce_scatter out of place gets one block."""
        return self.recv[:self.count] if self.collective == REDUCE_SCATTER and not in_place \
            else self.recv

    def prepare_in_place(self) -> None:
        """``recv`` as an in-place call wants it: the input (allreduce, reduce_scatter) or this
        rank's block at its place, the rest poisoned (allgather)."""
        if self.collective == ALLGATHER:
            m = self.expect.block
            self.space.poison(self.recv)
            self.space.copy(self.recv[self.rank * m:(self.rank + 1) * m], self.send)
        else:
            self.space.copy(self.recv, self.send)

    def _compare(self, buf: Any, n: int, want: Callable[[int, int], Any]) -> Mismatch | None:
        first: Mismatch | None = None
        total = 0
        for s, e in pieces(n):
            m = self.space.mismatches(buf, s, want(s, e))
            if m is not None:
                total += m.count
                first = first or m
        return None if first is None else Mismatch(total, first.index, first.got, first.expected)

    def check_output(self, count: int | None = None) -> Mismatch | None:
        """Compare every element of the result with the exact expected one (the first
        ``count`` elements: an allreduce of a shorter vector has the same leading results)."""
        return self._compare(self.recv, self.count if count is None else count, self._want)

    def check_untouched(self, start: int) -> Mismatch | None:
        """Compare ``recv[start:]`` (of the checked elements) with this rank's input there:
        :meth:`prepare_prefix` put it there, and a call on ``recv[:start]`` must leave it."""
        return self._compare(self.recv[start:], self.count - start,
                             lambda s, e: self._own(start + s, start + e))

    def prepare_prefix(self, count: int, in_place: bool) -> None:
        """``recv`` for an allreduce of the first ``count`` elements: this rank's input
        everywhere (the call's in-place input, and what must stay beyond ``count``), the
        result's place poisoned out of place."""
        self.space.copy(self.recv, self.send)
        if not in_place:
            self.space.poison(self.recv[:count])

    def check_input(self) -> Mismatch | None:
        """Compare every element of ``send`` with this rank's input (it must be unchanged)."""
        return self._compare(self.send, self.expect.send_count, self._own)


__all__ = ["ALL", "ALLGATHER", "ALLREDUCE", "MPI_NAMES", "NAMES", "REDUCE_SCATTER", "Expect",
           "SizeBuffers", "bus_factor", "element_counts", "factor_text", "kind", "odd_count_near",
           "reported_count", "size_line"]
