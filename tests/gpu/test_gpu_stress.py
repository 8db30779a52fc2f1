"""Stress: ten thousand allreduce calls on ONE communicator, with everything changing between
calls: size (1 element to ~4M, odd counts included), dtype, op, algorithm (ring, oneshot,
twoshot, auto), placement (out of place, in place, views into a pooled buffer with guard
regions), the caller's CuPy stream, and a random straggler rank delayed on the host or on its
GPU. Slots of 1 MiB make the ring reuse them thousands of times. Calls are enqueued in groups
of 16 without waiting, then every element of every output is checked exactly, as are the
guards and the send buffers. This is where races between consecutive calls (flags, slots,
stream switches) would show up.

``MPIRING_STRESS_CALLS`` sets the number of calls (default 10000)."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass

import cupy
import numpy as np
import pytest
from gpu_helpers import (
    WORLD,
    agree,
    gpu_nap,
    identical_on_all_ranks,
    poison,
    rank_input,
    reference,
    span_for,
)
from mpi4py import MPI

import mpiring

CALLS = int(os.environ.get("MPIRING_STRESS_CALLS", "10000"))
GROUP = 16  # calls enqueued before their outputs are checked
IDENTICAL_EVERY = 500  # every this many calls, one output is compared across ranks
STREAMS = 3
ALGOS = ("ring", "oneshot", "twoshot", "auto")
DTYPES = ("float16", "float32", "float64", "int32", "int64")
OPS = mpiring.core.ops.REDUCTIONS
PLACEMENTS = ("out", "in", "pooled", "pooled-in")
# One-shot takes messages up to a 4 MiB slot / ranks (1 MiB on up to 4 ranks).
ONESHOT_LIMIT = min(1 << 20, (4 << 20) // WORLD.size // 16 * 16)
RANK = WORLD.rank
GUARD = 600  # guard elements hold 600..850: exact in every dtype, never a result or the poison

_BITS = {2: cupy.uint16, 4: cupy.uint32, 8: cupy.uint64}

def bits(a: cupy.ndarray) -> cupy.ndarray:
    """The raw bits of ``a`` (so NaN and -0.0 compare exactly)."""
    return a.view(_BITS[a.dtype.itemsize])


def guard_pattern(n: int, dtype) -> cupy.ndarray:
    return (cupy.arange(n, dtype=cupy.int64) % 251 + GUARD).astype(dtype)


@dataclass(frozen=True)
class Plan:
    """One call, drawn identically on every rank."""

    index: int
    algo: str
    dtype: str
    op: mpiring.Op
    count: int
    placement: str
    stream: int
    batches: int | None
    lead: int  # guard elements before the send view (pooled placements)
    gap: int  # guard elements between the send and the recv view
    tail: int  # guard elements after the recv view
    straggler: int | None  # the rank that is late for this call, if any
    late_on_gpu: bool
    delay: float  # fraction of the largest delay (2 ms on the host, 1 ms on the GPU)

    def describe(self) -> str:
        late = ""
        if self.straggler is not None:
            late = f", rank {self.straggler} late on the {'GPU' if self.late_on_gpu else 'host'}"
        return (f"call {self.index} ({self.algo}, {self.dtype}, {self.op.name}, n={self.count}, "
                f"{self.placement}, stream {self.stream}, batches={self.batches}{late})")


def draw(rng: random.Random, index: int) -> Plan:
    """Every value is drawn on every call, in a fixed order, so all ranks stay in step."""
    roll = rng.random()
    if roll < 0.05:
        count = rng.randint(1, 16)  # fewer elements than ranks x batches, too
    elif roll < 0.85:
        count = rng.randint(1, 1 << 16)
    else:
        count = rng.randint((1 << 16) + 1, 4 << 20)
    algo = rng.choice(ALGOS)
    dtype = rng.choice(DTYPES)
    op = rng.choice(OPS)
    placement = rng.choice(PLACEMENTS)
    stream = rng.randrange(STREAMS)
    batches = rng.choice((None, None, None, 1, 2, 3, 5, 8))
    lead, gap, tail = rng.randint(1, 40), rng.randint(1, 40), rng.randint(1, 40)
    late = rng.random() < 0.05
    straggler = rng.randrange(WORLD.size)
    late_on_gpu = rng.random() < 0.5
    delay = rng.random()
    if algo == "oneshot":
        count = min(count, ONESHOT_LIMIT // np.dtype(dtype).itemsize)
    return Plan(index, algo, dtype, op, count, placement, stream,
                batches if algo == "ring" else None, lead, gap, tail,
                straggler if late else None, late_on_gpu, delay)


@dataclass
class Record:
    """An enqueued call and the arrays its check needs."""

    plan: Plan
    stream: cupy.cuda.Stream
    out: cupy.ndarray
    send: cupy.ndarray | None  # the sendbuf of an out-of-place call, which must stay untouched
    base: cupy.ndarray | None  # the pooled buffer of the pooled placements
    guards: tuple[tuple[int, int], ...]  # element ranges of ``base`` that must keep the pattern


def enqueue(c: mpiring.Communicator, plan: Plan, streams: list[cupy.cuda.Stream]) -> Record:
    """Build the inputs on the GPU and enqueue the call on the planned stream; no host sync."""
    stream = streams[plan.stream]
    n = plan.count
    send = base = None
    guards: tuple[tuple[int, int], ...] = ()
    with stream:
        x = rank_input(RANK, n, plan.dtype, plan.index, span_for(plan.op))
        if plan.placement == "out":
            out = cupy.empty_like(x)
            poison(out)
            send = x
        elif plan.placement == "in":
            out = x
        elif plan.placement == "pooled":  # [guard | send | guard | recv | guard]
            s0 = plan.lead
            r0 = s0 + n + plan.gap
            base = guard_pattern(r0 + n + plan.tail, plan.dtype)
            send = base[s0:s0 + n]
            send[...] = x
            out = base[r0:r0 + n]
            poison(out)
            guards = ((0, s0), (s0 + n, r0), (r0 + n, base.size))
        else:  # "pooled-in": [guard | recv | guard], in place
            r0 = plan.lead
            base = guard_pattern(r0 + n + plan.tail, plan.dtype)
            out = base[r0:r0 + n]
            out[...] = x
            guards = ((0, r0), (r0 + n, base.size))
        if plan.straggler == RANK:
            if plan.late_on_gpu:
                gpu_nap(stream, plan.delay * 1e-3)  # the call waits for it on the GPU
            else:
                time.sleep(plan.delay * 2e-3)
        c.Allreduce(MPI.IN_PLACE if send is None else send, out, plan.op, algorithm=plan.algo,
                    batches=plan.batches)
    return Record(plan, stream, out, send, base, guards)


def check(rec: Record) -> tuple[int, int, int]:
    """(wrong result elements, changed sendbuf elements, changed guard elements) of one call,
    computed on the call's stream after it; one host sync."""
    p = rec.plan
    with rec.stream:
        expect = reference(p.op, WORLD.size, p.count, p.index)
        counts = [cupy.count_nonzero(rec.out.astype(cupy.float64) != expect)]
        if rec.send is not None:
            sent = rank_input(RANK, p.count, p.dtype, p.index, span_for(p.op))
            counts.append(cupy.count_nonzero(bits(rec.send) != bits(sent)))
        if rec.base is not None:
            pattern = guard_pattern(rec.base.size, p.dtype)
            for lo, hi in rec.guards:
                counts.append(cupy.count_nonzero(bits(rec.base[lo:hi]) != bits(pattern[lo:hi])))
        got = [int(v) for v in cupy.stack(counts).get()]
    wrong = got[0]
    sent_changed = got[1] if rec.send is not None else 0
    guards_changed = sum(got[2:] if rec.send is not None else got[1:])
    return wrong, sent_changed, guards_changed


@pytest.mark.mpi(min_size=2)
def test_ten_thousand_calls():
    rng = random.Random(20251121)  # the same sequence of calls on every rank
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
    bad_calls = wrong = sent_changed = guards_changed = 0
    first_bad = None
    differ: list[int] = []
    sync_error = None
    with mpiring.Communicator(WORLD, gpu=True, slot_bytes=1 << 20, timeout=120) as c:
        pending: list[Record] = []
        for index in range(CALLS):
            pending.append(enqueue(c, draw(rng, index), streams))
            if len(pending) < GROUP and index != CALLS - 1:
                continue
            for rec in pending:
                w, s, g = check(rec)
                if w or s or g:
                    bad_calls += 1
                    wrong, sent_changed, guards_changed = wrong + w, sent_changed + s, guards_changed + g
                    if first_bad is None:
                        first_bad = (f"{rec.plan.describe()}: {w} wrong elements, {s} sendbuf "
                                     f"elements changed, {g} guard elements changed")
                if rec.plan.index % IDENTICAL_EVERY == 0:  # collective: same records on every rank
                    with rec.stream:
                        if not identical_on_all_ranks(rec.out):
                            differ.append(rec.plan.index)
            pending.clear()
        try:
            c.synchronize()
        except Exception as err:  # any error is the verdict
            sync_error = f"synchronize() raised {type(err).__name__}: {err}"
    message = (f"{bad_calls} of {CALLS} calls wrong ({wrong} wrong elements, {sent_changed} sendbuf "
               f"elements changed, {guards_changed} guard elements changed); first: {first_bad}")
    if differ:
        message += f"; results differ between ranks at calls {differ}"
    if sync_error:
        message += f"; {sync_error}"
    agree(bad_calls == 0 and not differ and sync_error is None, message)
