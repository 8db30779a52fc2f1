"""The compiled replay (mpiring.call.hot_replay) on real ranks sharing a control board, against
the Python replay: posts that the host check of later calls reads as every rank's (so each
landed in its line, under its count), stragglers that make the faster ranks wait for the
slowest (the compiled replay hands those calls to Python), and a peer's failure raised alike.
No GPU: tools.replay_bench's stand-in GPU and recording launch (tests/test_hot_replay.py)."""

from __future__ import annotations

import time

import pytest
from mpi4py import MPI
from mpi_support import all_ok

from mpiring.call import hot_replay
from mpiring.call.agreement import AgreementCheck
from mpiring.core.errors import MpiringError
from mpiring.node.signals import AGREE, CALLS, COUNTER_STRIDE
from tools.replay_bench import HAVE_EXTENSION, MODES, VALUES, Harness

world = MPI.COMM_WORLD
pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not HAVE_EXTENSION, reason="the extension is not built "
                                 "(python -m tools.build_hotpath)")]


def one_call(h: Harness, replay) -> tuple[str, bool]:
    """A replayed call as the communicator makes it; what it did, and whether the compiled
    replay handed it to Python."""
    outcome = replay.hot.run() if replay.hot is not None else hot_replay.FALLBACK
    done = outcome == hot_replay.REPLAYED or h.replayer.finish(replay, outcome)
    return ("replayed" if done else "full path"), replay.hot is not None and outcome != hot_replay.REPLAYED


@pytest.mark.parametrize("mode", MODES)
def test_posts_meet_the_host_check_and_the_slowest_rank(mode) -> None:
    """600 replayed calls, every 7th followed by a host-checked call (which waits for every
    rank's descriptor of its number and compares them: a post in the wrong line or under the
    wrong count fails it, or hangs until its timeout); the last rank straggles every 10 calls,
    so the others run D - 1 calls ahead and wait."""
    problems = []
    h = Harness(mode, world, timeout=60.0)
    try:
        replay = h.replay()
        handed = 0
        for i in range(600):
            if world.rank == world.size - 1 and i % 10 == 0:
                time.sleep(0.002)
            did, fell_back = one_call(h, replay)
            handed += fell_back
            if did != "replayed":
                problems.append(f"call {i}: {did}")
                break
            if i % 7 == 6:
                h.agreement.run(False, VALUES)  # raises if any rank's line of this call differs
        k = h.agreement.calls
        if k != 600 + 600 // 7 or h.words.replayed[0] != 600 or len(h.launches.log) != 600:
            problems.append(f"{k} checks, {h.words.replayed[0]} replayed, {len(h.launches.log)} launches")
        world.Barrier()
        shared = h.board.shared
        want = AgreementCheck.line(VALUES).tolist()
        for r in range(world.size):
            if shared.read(r, CALLS) != k:
                problems.append(f"rank {r}'s count is {shared.read(r, CALLS)}, not {k}")
            for call in range(k - len(AGREE) + 1, k + 1):  # the last D calls' lines
                first = AGREE[call % len(AGREE)] * COUNTER_STRIDE
                line = shared.lines[r].reshape(-1)[first:first + len(want)].tolist()
                if line != want:
                    problems.append(f"rank {r}'s line of call {call}: {line}")
        every = world.allreduce(handed)
        if mode == "compiled" and world.size > 1 and every == 0:
            problems.append("no rank ever waited for the straggler: the test lost its point")
    finally:
        h.close()
    all_ok(problems)


def peer_failure(mode: str) -> str:
    """Five calls, then the last rank fails; what every rank's next call does (or raises), rank
    after rank (a rank that raises marks the board too: later ranks name it as relaying)."""
    h = Harness(mode, world, timeout=60.0)
    try:
        replay = h.replay()
        for _ in range(5):
            one_call(h, replay)
        world.Barrier()
        if world.rank == world.size - 1:
            h.fail(MpiringError("rank failed on purpose"))
        world.Barrier()
        done = ""
        for turn in range(world.size):  # one rank at a time: each sees the same marks both ways
            if turn == world.rank:
                try:
                    done = one_call(h, replay)[0]
                except MpiringError as err:
                    done = f"{type(err).__name__}: {err}"
            world.Barrier()
        return done
    finally:
        world.Barrier()  # nobody abandons the board before every rank read it
        h.close()


def test_a_peers_failure_ends_every_call_alike() -> None:
    if world.size == 1:
        pytest.skip("needs a peer")
    compiled, python = peer_failure("compiled"), peer_failure("python")
    problems = [] if compiled == python else [f"compiled: {compiled!r}; python: {python!r}"]
    last = world.rank == world.size - 1
    if last and compiled != "full path":
        problems.append(f"the failed rank's call: {compiled}")
    if not last and not (compiled.startswith("PeerFailedError: ") and "failed on purpose" in compiled):
        problems.append(f"a peer's call: {compiled}")
    all_ok(problems)
