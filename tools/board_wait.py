"""``python -m tools.board_wait``: what one barrier through the node's control board costs the
host, the way the agreement check (mpiring.call.agreement) waits, and the ways it could.

Every rank, for ``--calls`` iterations: post counter ``k`` (``SharedBoard.post``: a ``Win.Sync``
then the store), then wait until every rank's counter reaches ``k``. The waits compared:

  waiter      ``Waiter.until`` as the agreement check calls it (``sched_yield`` between polls);
  spin        the same predicate polled with no system call;
  spin+sync   ``spin``, then a ``Win.Sync`` (the check's fence before it reads descriptors);
  yield-only  a loop of ``os.sched_yield`` alone (no peers: the cost of one yield);
  sync-only   a loop of ``Win.Sync`` alone (no peers);
  mpi         ``MPI_Barrier`` on the node communicator, for scale.

Per case the median over ``--rounds`` rounds of µs per iteration, per rank. No GPU is used.

    mpirun -n 4 python -m tools.board_wait [--calls 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import cast

from mpi4py import MPI

from mpiring.node.signals import CALLS, SharedBoard


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tools.board_wait", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    world = MPI.COMM_WORLD
    node = cast(MPI.Intracomm, world.Split_type(MPI.COMM_TYPE_SHARED))
    board = SharedBoard(node, timeout=60.0)
    counts = [board.counters[r] for r in range(board.size)]
    waiter = board.waiter
    state = {"k": 0}

    def posted(k: int) -> Callable[[], bool]:
        return lambda: all(row[CALLS] >= k for row in counts)

    def waiter_case() -> None:
        state["k"] += 1
        k = state["k"]
        board.post(board.rank, CALLS, k)
        waiter.until(posted(k), lambda: "peers")

    def spin_case(sync: bool) -> Callable[[], None]:
        def run() -> None:
            state["k"] += 1
            k = state["k"]
            board.post(board.rank, CALLS, k)
            ready = posted(k)
            while not ready():
                pass
            if sync:
                board.fence()
        return run

    cases: dict[str, Callable[[], None]] = {
        "waiter": waiter_case, "spin": spin_case(False), "spin+sync": spin_case(True),
        "yield-only": os.sched_yield, "sync-only": board.fence, "mpi": node.Barrier,
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, case in cases.items():
            node.Barrier()
            t = time.perf_counter()
            for _ in range(args.calls):
                case()
            times[name].append((time.perf_counter() - t) / args.calls * 1e6)
    mine = {name: statistics.median(v) for name, v in times.items()}
    every = node.gather(mine)
    if node.rank == 0:
        assert every is not None
        print(f"# board barrier, {node.size} ranks, {args.calls} iterations x {args.rounds} rounds; "
              "us per iteration, median round, per rank")
        for name in cases:
            print(f"  {name:<11} " + " ".join(f"{e[name]:7.2f}" for e in every))
    node.Barrier()
    board.close()


if __name__ == "__main__":
    main()
