"""``python -m tools.enqueue``: the host time of one eager call, algorithm by algorithm.

    mpirun -n 1 python -m tools.enqueue              # 1 KiB float32, every algorithm
    mpirun -n 2 python -m tools.enqueue -b 64K --profile oneshot
    mpirun -n 2 python -m tools.enqueue --no-gate    # the GPU may hold the host back
    mpirun -n 1 python -m tools.enqueue --torch      # the same calls on torch tensors
    (from the repository root: the tools are not part of the installed package)

What the calling thread spends to issue one ``comm.Allreduce`` (GPU calls return once
enqueued; the GPU is not waited for inside a round), with the agreement check as by default
(``gpu``: on the GPU for oneshot, twoshot and oneshot-ll, on the host for the others), on the
host for every call (``host``, shown for the rows that would check on the GPU) and off (and,
for the rows that replay calls of a shape seen before, off on the full path: ``mpiring.call.replay``;
where replays run compiled, ``mpiring.call.hot_replay``, also the same replays in Python, and,
where the call table keys and looks calls up in C too, the compiled replays after Python's key
and lookup: the rows "Python key"; and, for the rows that replay, the same call as a persistent
request's ``Start()``, ``Communicator.Allreduce_init``, which reads no key: "persistent Start"),
next to the cheapest thing the same thread can enqueue on the same array (``cupy.copyto``
for GPU arrays, ``np.copyto`` for host arrays) and an empty kernel launch (an empty kernel
launched through CuPy's binding: about the driver's own cost). Each case whose call was
replayed through a bound launch (oneshot, twoshot, oneshot-ll, and auto where it picks one of
them) is followed by "<case> kernel alone": the very launch that call makes, the same kernel,
grid and parameters, on the same stream, with one C call and nothing of mpiring around it
(``tools.launch_floor``: built at run time; where it cannot be, one "# (no launch floor: why)"
line says so). After the table, "above its launch" gives each such case's median minus its
kernel alone's: on rank 0 and on each rank, and (several ranks) the case's median minus the
largest rank's kernel alone, the host cost of the replayed call above the driver's launch
when the agreement check couples the ranks (the target: at most 1 us). With GPU arrays each
round is enqueued behind a *gate*, a kernel that holds the stream until the round is
enqueued, so the GPU never holds the host back (``--no-gate``: it may, once the queue of launches fills; keep
``--calls`` under about 1000 with the gate). Only rows that can be captured in a CUDA graph
are gated (they never wait on the host for their GPU work; the ring does): the others are
marked "not gated". Every (algorithm, check) case is measured
in each of ``--rounds`` interleaved rounds of ``--calls`` calls, after warm-up calls, and the
median round is reported with the range: machine noise moves all cases alike. With more
than one rank each call also waits for the slowest rank (the agreement check, the host
ring), so the figures are the slowest rank's pace, not only this rank's host work.
``--profile ALGO`` prints a cProfile of that algorithm's calls on rank 0 (check off;
``--profile-check gpu`` as by default).

This is the host-side microbenchmark of issue 13's per-call work; the benchmark proper
(``python -m mpiring.bench``) measures call times, GPU included.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from types import ModuleType

import numpy as np
from mpi4py import MPI

from mpiring import algorithms
from mpiring.bench.argtypes import RankZeroParser, int_at_least, size_arg
from mpiring.bench.mode import AUTO, GPU, HOST, ModeError, choose
from mpiring.bench.sizes import format_size
from mpiring.communicator import Communicator
from mpiring.core.buffers import Memory
from mpiring.core.errors import MpiringError, PeerArgumentError
from mpiring.cuda.launcher import BoundLaunch

from . import kernels, launch_floor

PROFILE_CHECKS: dict[str, str | bool] = {"gpu": "gpu", "host": "host", "off": False}  # --profile-check


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = RankZeroParser(prog="python -m tools.enqueue", description=__doc__.split("\n\n")[2],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", "--size", type=size_arg, default=1024, help="message size (default 1K)")
    p.add_argument("--calls", type=int_at_least(1), default=500, help="calls per round (default 500)")
    p.add_argument("--no-gate", dest="gate", action="store_false",
                   help="enqueue without holding the stream (GPU backpressure counts)")
    p.add_argument("--torch", action="store_true",
                   help="also time the capturable rows on torch tensors (GPU arrays only)")
    p.add_argument("--rounds", type=int_at_least(1), default=9, help="interleaved rounds (default 9)")
    p.add_argument("--algo", default=None,
                   help="comma-separated algorithms (default: every one that serves the memory)")
    p.add_argument("--profile", default=None, metavar="ALGO", help="cProfile this algorithm's calls")
    p.add_argument("--profile-check", default="off", choices=tuple(PROFILE_CHECKS),
                   help="the agreement check of the profiled calls (default off; gpu: as by default)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--gpu", dest="mode", action="store_const", const=GPU, default=AUTO)
    where.add_argument("--host", dest="mode", action="store_const", const=HOST)
    return p.parse_args(argv)


def per_call_us(rounds: int, calls: int, cases: Sequence[Callable[[], object]], sync: Callable[[], None],
                world: MPI.Intracomm, gate: Gate | None = None,
                gated: Sequence[bool] | None = None) -> list[list[float]]:
    """Microseconds per call of each case, one list entry per round; rounds interleave the cases.
    ``gate``: the rounds of the cases that ``gated`` marks (default: all) are enqueued behind
    it (the GPU runs none of such a round until all of it is in)."""
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(rounds):
        for i, case in enumerate(cases):
            for _ in range(max(1, calls // 20)):  # warm: caches, pools, first-shape plans
                case()
            sync()
            world.Barrier()
            held = gate if gate is not None and (gated is None or gated[i]) else None
            if held is not None:
                held.close()
            start = time.perf_counter()
            for _ in range(calls):
                case()
            times[i].append((time.perf_counter() - start) / calls * 1e6)
            if held is not None:
                held.open()
            sync()
    return times


class Gate:
    """Holds the current CuPy stream until the host opens it: a one-thread kernel that spins on
    a word of pinned host memory (bounded by ``limit`` seconds: a round whose launches fill the
    queue before the gate opens waits that long and its time is void)."""

    def __init__(self, limit: float = 2.0) -> None:
        import ctypes

        import cupy

        self._cupy, self._limit = cupy, np.uint64(limit * 1e9)
        self._kernel = cupy.RawKernel(kernels.source("enqueue.cu"), "gate")
        self._pinned = cupy.cuda.alloc_pinned_memory(4)  # mapped into the GPU at the same address
        self._word = (ctypes.c_int32 * 1).from_address(self._pinned.ptr)

    def close(self) -> None:
        self._word[0] = 0
        self._kernel((1,), (1,), (np.intp(self._pinned.ptr), self._limit))

    def open(self) -> None:
        self._word[0] = 1


def main(argv: Sequence[str] | None = None, world: MPI.Intracomm | None = None) -> int:
    args = parse_args(argv)
    world = world if world is not None else MPI.COMM_WORLD
    try:
        gpu = choose(args.mode, world).gpu
    except ModeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    memory = Memory.CUDA if gpu else Memory.HOST
    names = [n.strip() for n in args.algo.split(",")] if args.algo else list(algorithms.names(memory))
    try:
        for name in names + ([args.profile] if args.profile else []):
            algorithms.check_name(name)
    except MpiringError as err:  # the same arguments, so the same verdict, on every rank
        print(f"error: {err}", file=sys.stderr)
        return 2
    count = max(1, args.size // 4)
    # The check as it runs by default (on the GPU for the rows whose kernels check there, on the
    # host for the others), every call on the host (check="host"), and off.
    comms = {check: Communicator(world, gpu=gpu, check=check) for check in ("gpu", "host", False)}
    # The full path, for comparison: a communicator that never replays (mpiring.call.replay).
    full = Communicator(world, gpu=gpu, check=False, replay=False)
    # Where replays run compiled (mpiring.call.hot_replay), the same replays in Python beside them.
    python_replays = {check: _python_replays(world, gpu, check) for check in ("gpu", False)
                      if comms["gpu"].compiled_replay}
    # Where the call table runs (key, lookup and replay in one C call), the same compiled replays
    # after Python's key and lookup beside them (their table keys no array type).
    python_keys = {check: _python_keys(world, gpu, check) for check in ("gpu", False)
                   if comms["gpu"].call_keys.compiled is not None}
    try:
        if gpu:
            import cupy

            # After the communicators, which chose this rank's GPU: the arrays must live there.
            cupy.cuda.Device(comms["gpu"].device).use()
            x, out = cupy.ones(count, dtype=cupy.float32), cupy.empty(count, dtype=cupy.float32)
            sync: Callable[[], None] = cupy.cuda.Device().synchronize
            copy = ("cupy.copyto", lambda: cupy.copyto(out, x))
            floor = ("empty kernel launch", _empty_launch(cupy))
        else:
            x, out = np.ones(count, dtype=np.float32), np.empty(count, dtype=np.float32)
            sync = lambda: None  # noqa: E731 - host calls complete before they return
            copy = ("np.copyto", lambda: np.copyto(out, x))
            floor = None
        labels, cases, gated = [copy[0]], [copy[1]], [True]
        if floor is not None:
            labels.append(floor[0])
            cases.append(floor[1])
            gated.append(True)
        # The "kernel alone" cases: each row case's bound launch (kept by its first call), alone.
        alone = KernelAlone.make(world) if gpu else None
        # Whether a row runs here is decided once, on the checked communicator, where a refusal
        # on one rank reaches every rank (the agreement check); a call with the check off that
        # one rank refused would leave the others waiting inside the collective.
        runs: dict[str, bool] = {}
        first_launches: dict[str, BoundLaunch | None] = {}  # comms["gpu"]'s, by name
        for name in dict.fromkeys(names + ([args.profile] if args.profile else [])):
            before = comms["gpu"].bound_launches()
            refusal = first_refusal(world, comms["gpu"], _call(comms["gpu"], name, x, out))
            runs[name] = refusal is None
            first_launches[name] = alone.launch_since(comms["gpu"], before) if alone is not None else None
            if refusal is not None and world.rank == 0:
                print(f"# {name}: n/a ({refusal})")
        for check, comm in comms.items():
            for name in names:
                if not runs[name]:
                    continue  # refused
                # auto is no row: its pick for this size says how its calls are checked and kept.
                row = algorithms.get(comms["gpu"].resolve(count, np.float32, name))
                if check == "host" and not row.gpu_check:
                    continue  # checked on the host anyway, as by default
                shown = name if row.name == name else f"{name}={row.name}"
                launch = first_launches[name] if check == "gpu" else None
                if check != "gpu":
                    before = comm.bound_launches()
                    comm.Allreduce(x, out, algorithm=name)  # its first call plans (timed: replays)
                    launch = alone.launch_since(comm, before) if alone is not None else None
                note = "" if row.graph_capturable or not (gpu and args.gate) else ", not gated"
                labels.append(f"{shown} (check {check or 'off'})" + note)
                cases.append(_call(comm, name, x, out))
                gated.append(row.graph_capturable)
                if alone is not None and launch is not None:
                    alone.add(labels, cases, gated, launch)
                if gpu and check != "host" and row.bind is not None:  # the same call, persistent
                    request = comm.Allreduce_init(x, out, algorithm=name)
                    request.Start()  # keeps the replay the case above planned
                    labels.append(f"{shown} (check {check or 'off'}, persistent Start)" + note)
                    cases.append(request.Start)
                    gated.append(row.graph_capturable)
                    if alone is not None and launch is not None:
                        alone.add(labels, cases, gated, launch)
                for variants, how in ((python_keys, "Python key"), (python_replays, "Python replay")):
                    if check in variants and row.bind is not None:
                        variant = variants[check]
                        before = variant.bound_launches()
                        variant.Allreduce(x, out, algorithm=name)  # its first call plans
                        labels.append(f"{shown} (check {check or 'off'}, {how})" + note)
                        cases.append(_call(variant, name, x, out))
                        gated.append(row.graph_capturable)
                        launch = alone.launch_since(variant, before) if alone is not None else None
                        if alone is not None and launch is not None:
                            alone.add(labels, cases, gated, launch)
                if check is False and gpu and row.bind is not None:
                    full.Allreduce(x, out, algorithm=name)
                    labels.append(f"{shown} (check off, full path)")
                    cases.append(_call(full, name, x, out))
                    gated.append(row.graph_capturable)
        if gpu and args.torch:  # the same calls on torch views of the same memory
            _add_torch_cases(world, comms["gpu"], names, x, out, labels, cases, gated, alone)
        gate = Gate() if gpu and args.gate else None
        times = per_call_us(args.rounds, args.calls, cases, sync, world, gate, gated)
        # Every rank's medians too: the calls couple the ranks, so rank 0's pace is the slowest
        # rank's, and only the other ranks' own figures say which one that is.
        medians = world.gather([statistics.median(t) for t in times]) or []  # (None off rank 0)
        if world.rank == 0:
            how = ", gated" if gate is not None else (", not gated" if gpu else "")
            print(f"# host time per eager call: {format_size(count * 4)} float32 sum, {world.size} "
                  f"rank(s), {'GPU' if gpu else 'host'} arrays{how}, median of {args.rounds} rounds "
                  f"of {args.calls} calls (range)" + ("; then each rank's median" if world.size > 1 else "")
                  + f"; replays {_replays(comms['gpu'])}")
            width = max(40, *map(len, labels))
            for i, (label, t) in enumerate(zip(labels, times, strict=True)):
                ranks = "  ranks " + " ".join(f"{m[i]:.1f}" for m in medians) if world.size > 1 else ""
                median = statistics.median(t)
                print(f"  {label:{width}s} {median:8.1f} us  ({min(t):.1f}-{max(t):.1f}){ranks}")
            if alone is not None:
                for line in alone.report(labels, medians, width):
                    print(line)
        if args.profile and runs[args.profile]:
            profiled = comms[PROFILE_CHECKS[args.profile_check]]
            profile(profiled, args.profile, x, out, args.calls, sync, world, args.profile_check)
    finally:
        for comm in (*comms.values(), full, *python_replays.values(), *python_keys.values()):
            comm.close()
    return 0


def _python_keys(world: MPI.Intracomm, gpu: bool, check: str | bool) -> Communicator:
    """A communicator whose compiled replays run after Python's key and lookup: its call table
    (``call_keys.compiled``) keys no array type, so it holds nothing and every call reaches
    ``_collective`` (as before the table)."""
    comm = Communicator(world, gpu=gpu, check=check)
    comm.call_keys.compiled.array_type = None
    return comm


def _python_replays(world: MPI.Intracomm, gpu: bool, check: str | bool) -> Communicator:
    """A communicator whose replays run in Python (``MPIRING_HOTPATH=0`` while it is made)."""
    before = os.environ.get("MPIRING_HOTPATH")
    os.environ["MPIRING_HOTPATH"] = "0"
    try:
        return Communicator(world, gpu=gpu, check=check)
    finally:
        if before is None:
            del os.environ["MPIRING_HOTPATH"]
        else:
            os.environ["MPIRING_HOTPATH"] = before


def _replays(comm: Communicator) -> str:
    """How ``comm``'s eager replays run: in Python; compiled; or compiled with the call's key
    and lookup in C too (its call table, mpiring.call.hot_replay)."""
    if not comm.compiled_replay:
        return "in Python"
    if comm.call_keys.compiled is None:
        return "compiled (key and lookup in Python)"
    return "compiled, key and lookup in C (call table)"


def _add_torch_cases(world: MPI.Intracomm, comm: Communicator, names: Sequence[str], x, out,
                     labels: list[str], cases: list[Callable[[], None]], gated: list[bool],
                     alone: KernelAlone | None = None) -> None:
    """``--torch``: torch's own copy, then each capturable row's call (default check) on torch
    tensors sharing ``x`` and ``out``'s memory (DLPack); they run on torch's current stream,
    which is CuPy's current one here (both the default stream), so the gate holds them too.
    With ``alone``, a call replayed through a bound launch is followed by that launch alone."""
    import torch

    tx, tout = torch.from_dlpack(x), torch.from_dlpack(out)
    labels.append("torch copy_")
    cases.append(lambda: tout.copy_(tx))
    gated.append(True)
    for name in names:
        row = algorithms.get(name)
        if not row.graph_capturable:
            continue
        before = comm.bound_launches()
        if first_refusal(world, comm, _call(comm, name, tx, tout)) is not None:
            continue  # refused for CuPy arrays alike: reported there
        labels.append(f"{name} (torch tensors, check gpu)")
        cases.append(_call(comm, name, tx, tout))
        gated.append(True)
        launch = alone.launch_since(comm, before) if alone is not None else None
        if alone is not None and launch is not None:
            alone.add(labels, cases, gated, launch)


class KernelAlone:
    """The "kernel alone" cases: after a row case whose call was replayed through a bound launch
    (:meth:`Communicator.bound_launches`: oneshot, twoshot, oneshot-ll), the same kernel with the
    same grid and parameters launched on the current CuPy stream with one C call and nothing of
    mpiring around it (:mod:`tools.launch_floor`): the floor of that replayed call. Every rank
    adds the same cases (each decision is agreed: the rounds meet at barriers)."""

    def __init__(self, world: MPI.Intracomm, module: ModuleType, address: int) -> None:
        self.world, self.module, self.address = world, module, address
        self.of: dict[int, int] = {}  # row case -> its kernel alone case (indices into the cases)

    @classmethod
    def make(cls, world: MPI.Intracomm) -> KernelAlone | None:
        """The cases' maker, or None where a rank cannot build the extension or find the driver
        (rank 0 prints one "# (no launch floor: ...)" line)."""
        module, why = launch_floor.load()
        address = 0
        if module is not None:
            try:
                address = launch_floor.driver_launch_address()
            except OSError as err:
                why = str(err)
        whys = world.allgather(why)
        if any(whys):
            if world.rank == 0:
                rank, why = next((r, w) for r, w in enumerate(whys) if w)
                print(f"# (no launch floor: {why}" + (f", on rank {rank}" if world.size > 1 else "") + ")")
            return None
        assert module is not None
        return cls(world, module, address)

    def launch_since(self, comm: Communicator, before: list[BoundLaunch]) -> BoundLaunch | None:
        """The one bound launch ``comm`` keeps now that ``before`` (its launches before a call)
        did not hold; None if not exactly one, or if that is so on another rank."""
        new = [b for b in comm.bound_launches() if not any(b is old for old in before)]
        found = new[0] if len(new) == 1 else None
        return found if all(self.world.allgather(found is not None)) else None

    def add(self, labels: list[str], cases: list[Callable[[], None]], gated: list[bool],
            launch: BoundLaunch) -> None:
        """``launch`` alone, as the case after the row case just added (the last one): on the
        current CuPy stream, which the gate holds."""
        import cupy

        floor = launch_floor.floor(self.module, launch, cupy.cuda.get_current_stream().ptr, self.address)
        self.of[len(cases) - 1] = len(cases)
        labels.append(f"{labels[-1]} kernel alone")
        cases.append(floor.run)
        gated.append(True)

    def report(self, labels: Sequence[str], medians: Sequence[Sequence[float]], width: int) -> list[str]:
        """Rank 0's lines, one per row case with a floor: its median minus its kernel alone's,
        on rank 0 and on each rank, and (several ranks) minus the largest rank's kernel alone:
        the call's median is the slowest rank's pace, so this is its cost above the launch."""
        if not self.of:
            return []
        several = len(medians) > 1
        lines = ["# above its launch: the case's median minus its kernel alone's (rank 0"
                 + ("; then each rank's; then the case's median minus the largest rank's kernel "
                    "alone: the ranks are coupled, the case's median is the slowest rank's pace)"
                    if several else ")")]
        for case, floor in self.of.items():
            each = [m[case] - m[floor] for m in medians]
            text = f"  {labels[case]:{width}s} {each[0]:+8.1f} us"
            if several:
                coupled = medians[0][case] - max(m[floor] for m in medians)
                text += "  ranks " + " ".join(f"{e:+.1f}" for e in each)
                text += f"  above the slowest {coupled:+.1f} us"
            lines.append(text)
        return lines


def _empty_launch(cupy) -> Callable[[], None]:
    """One launch of an empty kernel with pre-packed arguments: the driver's cost alone."""
    from mpiring.cuda.launcher import PackedLaunch, function_handle

    kernel = cupy.RawKernel(kernels.source("enqueue.cu"), "empty")
    bound = PackedLaunch(("i64",), 32).bind(function_handle(kernel), 1, 0)
    return lambda: bound(cupy.cuda.get_current_stream().ptr)


def first_refusal(world: MPI.Intracomm, comm: Communicator, call: Callable[[], None]) -> str | None:
    """Run ``call`` and wait for it on every rank; None if it succeeded everywhere, else, on
    every rank (the cases timed must be the same on all), the error of the lowest rank that
    refused it itself (one that only reports a peer's refusal comes after those)."""
    try:
        call()
        comm.synchronize()  # a GPU-checked call's verdict surfaces once it ran
        mine = None
    except MpiringError as err:
        mine = (isinstance(err, PeerArgumentError), world.rank, str(err))
    refusals = sorted(r for r in world.allgather(mine) if r is not None)
    return None if not refusals else refusals[0][2]


def _call(comm: Communicator, name: str, x, out) -> Callable[[], None]:
    return lambda: comm.Allreduce(x, out, algorithm=name)


def profile(comm: Communicator, name: str, x, out, calls: int, sync: Callable[[], None],
            world: MPI.Intracomm, check: str = "off") -> None:
    """cProfile of ``calls`` calls of ``name`` on ``comm`` (whose agreement check is ``check``),
    printed by rank 0."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        comm.Allreduce(x, out, algorithm=name)
    prof.disable()
    sync()
    if world.rank == 0:
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(20)
        print(f"# cProfile of {calls} calls of {name} (check {check}), by own time")
        print(text.getvalue().rstrip())


if __name__ == "__main__":
    sys.exit(main())
