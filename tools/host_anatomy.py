"""``python -m tools.host_anatomy``: where the host time of one replayed GPU call goes.

    mpirun -n 2 python -m tools.host_anatomy                  # oneshot, 8 KiB float32
    mpirun -n 4 python -m tools.host_anatomy -b 1K --algo oneshot-ll
    (from the repository root: the tools are not part of the installed package)

:mod:`tools.enqueue` times a replayed ``comm.Allreduce`` beside the same kernel launched alone
(its "kernel alone" floor); this tool takes the difference apart. Each piece below is timed
alone, in the same interleaved rounds (median of ``--rounds``; every rank's median), on this
rank's GPU arrays, the rounds that launch held behind :class:`tools.enqueue.Gate`:

* ``empty``: the loop calling an empty Python function (what every case below also pays);
* ``stream``: ``cupy.cuda.get_current_stream()``, which every replay calls (the stream order);
* ``key``: the key's attribute reads in Python (``data.ptr``, ``shape``, ``strides``, ``dtype``
  of both arrays), which the call table makes in C (CuPy's getters build the tuples either way);
* ``alone``: the call's kernel launched alone (:mod:`tools.launch_floor`);
* ``key+alone``: the key's reads, then the kernel alone (does the launch slow down beside them?);
* ``table``: the call table's ``run()`` called directly (the call without the frame of
  ``Communicator.Allreduce``), agreement check off;
* ``call``: ``comm.Allreduce(x, out, algorithm=ALGO)``, check off;
* ``call, check gpu``: the same on a communicator checking as by default (the post).

Then, per rank: ``table - alone`` (the call table's whole work beside the launch),
``call - table`` (the Python frames), ``check gpu - call`` (the agreement check's post, and the
wait for the slowest rank it brings), ``key - empty`` and ``stream - empty`` (those pieces alone,
in Python), and ``key+alone - key - alone + empty`` (how much slower the launch runs after the
key's reads than alone: caches the reads evict).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
from collections.abc import Callable, Sequence

from mpi4py import MPI

from mpiring import algorithms
from mpiring.algorithms import Collective
from mpiring.bench.argtypes import RankZeroParser, int_at_least, size_arg
from mpiring.bench.mode import GPU, ModeError, choose
from mpiring.bench.sizes import format_size
from mpiring.communicator import Communicator
from mpiring.core.errors import MpiringError

from . import launch_floor
from .enqueue import Gate, KernelAlone, first_refusal, per_call_us

CASES = ("empty", "stream", "key", "alone", "key+alone", "table", "call", "call, check gpu")
LAUNCHES = {"alone", "key+alone", "table", "call", "call, check gpu"}  # held behind the gate
DIFFERENCES = (  # (label, [(sign, case), ...])
    ("table - alone: the call table's work beside the launch", [(1, "table"), (-1, "alone")]),
    ("call - table: Communicator.Allreduce's frame", [(1, "call"), (-1, "table")]),
    ("check gpu - call: the agreement check's post", [(1, "call, check gpu"), (-1, "call")]),
    ("key - empty: the key's reads, in Python", [(1, "key"), (-1, "empty")]),
    ("stream - empty: get_current_stream()", [(1, "stream"), (-1, "empty")]),
    ("key+alone - key - alone + empty: the launch's slow-down after the reads",
     [(1, "key+alone"), (-1, "key"), (-1, "alone"), (1, "empty")]),
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = RankZeroParser(prog="python -m tools.host_anatomy", description=__doc__.split("\n\n")[2],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-b", "--size", type=size_arg, default=8192, help="message size (default 8K)")
    p.add_argument("--algo", default="oneshot",
                   help="a row replayed through one bound launch (default oneshot)")
    p.add_argument("--calls", type=int_at_least(1), default=500, help="calls per round (default 500)")
    p.add_argument("--rounds", type=int_at_least(1), default=9, help="interleaved rounds (default 9)")
    return p.parse_args(argv)


def report(medians: Sequence[dict[str, float]]) -> list[str]:
    """Rank 0's lines from every rank's medians (ns per call, by case): each case, then each
    difference of :data:`DIFFERENCES`, one column per rank."""
    width = max(len(label) for label, _ in DIFFERENCES)
    lines = [f"  {case:{width}s}" + "".join(f"{m[case]:9.0f}" for m in medians) for case in CASES]
    lines.append("# differences (ns), per rank")
    for label, terms in DIFFERENCES:
        values = [sum(sign * m[case] for sign, case in terms) for m in medians]
        lines.append(f"  {label:{width}s}" + "".join(f"{v:+9.0f}" for v in values))
    return lines


def main(argv: Sequence[str] | None = None, world: MPI.Intracomm | None = None) -> int:
    args = parse_args(argv)
    world = world if world is not None else MPI.COMM_WORLD
    try:
        choose(GPU, world)
        algorithms.check_name(args.algo)
    except (ModeError, MpiringError) as err:  # the same verdict on every rank
        print(f"error: {err}", file=sys.stderr)
        return 2
    alone = KernelAlone.make(world)  # (None: rank 0 printed why)
    if alone is None:
        print("error: the launch floor cannot be built here", file=sys.stderr)
        return 2
    off = Communicator(world, check=False)
    checked = Communicator(world)
    try:
        return _measure(args, world, off, checked, alone)
    finally:
        off.close()
        checked.close()


def _measure(args: argparse.Namespace, world: MPI.Intracomm, off: Communicator, checked: Communicator,
             alone: KernelAlone) -> int:
    import cupy

    cupy.cuda.Device(off.device).use()  # after the communicators, which chose this rank's GPU
    count = max(1, args.size // 4)
    x, out = cupy.ones(count, dtype=cupy.float32), cupy.empty(count, dtype=cupy.float32)
    name = args.algo
    before = off.bound_launches()
    for comm in (off, checked):
        refusal = first_refusal(world, comm, functools.partial(comm.Allreduce, x, out, algorithm=name))
        if refusal is not None:
            if world.rank == 0:
                print(f"error: {name} refused the call: {refusal}", file=sys.stderr)
            return 2
    launch = alone.launch_since(off, before)
    table = off.call_keys.compiled
    replayed = launch is not None and table is not None
    if replayed:
        off.Allreduce(x, out, algorithm=name)  # learned: the table replays it from now on
        replayed = table.run(Collective.ALLREDUCE, x, out, MPI.SUM, name, None) is not None
        off.synchronize()
    if not all(world.allgather(replayed)):
        if world.rank == 0:
            print(f"error: {name}'s calls are not replayed through one bound launch by the call "
                  "table here (a row such as oneshot, twoshot or oneshot-ll, with the compiled "
                  "replay built)", file=sys.stderr)
        return 2
    stream = cupy.cuda.get_current_stream()
    assert launch is not None
    floor = launch_floor.floor(alone.module, launch, stream.ptr, alone.address).run
    run, op, allreduce = table.run, MPI.SUM, Collective.ALLREDUCE

    def empty() -> None:
        pass

    def key() -> tuple:  # what CallKeys.key reads off both arrays
        return (x.data.ptr, x.shape, x.strides, x.dtype), (out.data.ptr, out.shape, out.strides, out.dtype)

    def key_alone() -> None:
        key()
        floor()

    pieces: dict[str, Callable[[], object]] = {
        "empty": empty, "stream": cupy.cuda.get_current_stream, "key": key, "alone": floor,
        "key+alone": key_alone, "table": lambda: run(allreduce, x, out, op, name, None),
        "call": lambda: off.Allreduce(x, out, algorithm=name),
        "call, check gpu": lambda: checked.Allreduce(x, out, algorithm=name),
    }
    assert tuple(pieces) == CASES
    times = per_call_us(args.rounds, args.calls, list(pieces.values()), cupy.cuda.Device().synchronize,
                        world, Gate(), [case in LAUNCHES for case in CASES])
    mine = {case: statistics.median(t) * 1000 for case, t in zip(CASES, times, strict=True)}
    medians = world.gather(mine)
    if medians is not None:  # rank 0
        print(f"# where a replayed call's host time goes: {name}, {format_size(count * 4)} float32 sum, "
              f"{world.size} rank(s); ns per call, median of {args.rounds} rounds of {args.calls} calls, "
              "one column per rank")
        for line in report(medians):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
