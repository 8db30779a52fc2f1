"""Rivals that run on host arrays, for testing the bench's rival machinery without a GPU, torch or
nccl4py: ``MPI.Allreduce`` wrapped as a rival (a true allreduce, so the bench's check passes),
with faults to inject. Shared by tests/test_bench_rivals.py and tests/mpi/test_bench_rivals_mpi.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from mpi4py import MPI

from mpiring.bench import rivals
from mpiring.bench.measure import agree
from mpiring.bench.rivals.base import Rival, RivalContext

MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
EVENTS: list[tuple[str, str]] = []  # (rival, what happened), in order, on this rank


class MpiRival(Rival):
    """``MPI.Allreduce`` as a rival row. ``missing_on``: ranks whose ``available()`` gives a
    reason; ``setup_fails_on``: ranks whose set-up raises; ``fail_from``: from this element
    count on, the call raises on ``bad_rank`` (the others skip communicating, so nobody
    waits); ``refuse_below``: smaller counts are refused (n/a)."""

    def __init__(self, name: str = "fake-mpi", missing_on: tuple[int, ...] = (),
                 setup_fails_on: tuple[int, ...] = (), fail_from: int | None = None,
                 bad_rank: int = 0, refuse_below: int = 0) -> None:
        self.name = name
        self.missing_on, self.setup_fails_on = missing_on, setup_fails_on
        self.fail_from, self.bad_rank, self.refuse_below = fail_from, bad_rank, refuse_below
        self.world: Any = None
        self.ctx: RivalContext | None = None

    def available(self) -> str | None:
        if MPI.COMM_WORLD.rank in self.missing_on:
            return "fakelib is not installed (pip install fakelib)"
        return None

    def setup(self, world: Any, ctx: RivalContext) -> None:
        def stage() -> None:
            if world.rank in self.setup_fails_on:
                raise RuntimeError("no fake fabric here")
        agree(world, stage)
        self.world, self.ctx = world, ctx
        EVENTS.append((self.name, f"setup max_count={ctx.max_count} op={ctx.op}"))

    def describe(self) -> str:
        return "fakelib 1.0"

    def prepare(self, bufs: Any, in_place: bool) -> Any:
        from mpiring.errors import InvalidArgumentError

        count = int(bufs.count)
        if count < self.refuse_below:
            raise InvalidArgumentError(f"takes at least {self.refuse_below} elements")
        assert self.ctx is not None
        world, op = self.world, MPI_OPS[self.ctx.op]
        send = MPI.IN_PLACE if in_place else bufs.send
        recv = bufs.recv
        fail = self.fail_from is not None and count >= self.fail_from

        def call() -> None:
            if fail:
                if world.rank == self.bad_rank:
                    raise RuntimeError("injected rival failure")
                return
            world.Allreduce(send, recv, op=op)
        return call

    def close(self) -> None:
        EVENTS.append((self.name, "close"))


def spec(name: str = "fake-mpi", **kw: Any) -> rivals.RivalSpec:
    """A host rival spec of :class:`MpiRival` (``ops``/``node_only`` go to the spec)."""
    spec_kw = {k: kw.pop(k) for k in ("ops", "dtypes", "node_only") if k in kw}
    return rivals.RivalSpec(name, f"MPI.Allreduce as a rival ({name})",
                            lambda: MpiRival(name, **kw), memory=rivals.HOST, **spec_kw)


@contextlib.contextmanager
def registered(*specs: rivals.RivalSpec) -> Iterator[None]:
    """The host rivals ``specs`` in the registry for the duration (then removed)."""
    for s in specs:
        rivals.register(s)
    EVENTS.clear()
    try:
        yield
    finally:
        for s in specs:
            rivals.unregister(s.name)
