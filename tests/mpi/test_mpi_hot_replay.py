"""The compiled replay (mpiring.call.hot_replay) on real ranks sharing a control board, against
the Python replay: posts that the host check of later calls reads as every rank's (so each
landed in its line, under its count), stragglers that make the faster ranks wait for the
slowest (the compiled replay hands those calls to Python), and a peer's failure raised alike;
each also through whole ``Communicator.Allreduce`` calls and the call table (the key, lookup
and replay in one C call; way "table"). No GPU: tools.replay_bench's stand-in GPU and
recording launch (tests/test_hot_replay.py, tests/test_call_table.py)."""

from __future__ import annotations

import time

import pytest
from mpi4py import MPI
from mpi_support import all_ok

from mpiring.call import hot_replay
from mpiring.call.agreement import AgreementCheck
from mpiring.core.errors import MpiringError
from mpiring.node.signals import AGREE, CALLS, COUNTER_STRIDE
from tools.replay_bench import HAVE_EXTENSION, MODES, VALUES, Harness, ReplayingCommunicator, cupy_like

world = MPI.COMM_WORLD
pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not HAVE_EXTENSION, reason="the extension is not built "
                                 "(python -m tools.build_hotpath)")]


WAYS = (*MODES, "table")  # the replay alone, compiled and in Python; whole calls through the table


class Caller:
    """One rank's replayed calls of one shape, made ``way``'s way: the replay as the
    communicator inlines it, or (``table``) ``Communicator.Allreduce`` itself, through the call
    table. ``handed``: calls the compiled path handed to Python after the first two (which
    always are: the first orders the stream, the second reports the GPU check's count)."""

    SETTLING = 2

    def __init__(self, way: str, h: Harness) -> None:
        self.h, self.handed, self.calls = h, 0, 0
        self.replay = h.replay()
        self.comm = None
        if way == "table":
            finish = h.replayer.finish

            def counted(replay, outcome) -> bool:
                self.handed += self.calls > self.SETTLING
                return finish(replay, outcome)
            h.replayer.finish = counted  # type: ignore[method-assign]  # (before the table takes it)
            self.comm = ReplayingCommunicator(h)
            self.x, self.out = cupy_like(2048, 0x7000), cupy_like(2048, 0x9000)
            self.comm.keep(self.replay, self.out, self.x)

    def call(self) -> str:
        """What the call did ("replayed", "full path"); raises what it raises."""
        self.calls += 1
        if self.comm is not None:
            before = self.comm.full_path
            self.comm.Allreduce(self.x, self.out)
            return "full path" if self.comm.full_path > before else "replayed"
        replay = self.replay
        outcome = replay.hot.run() if replay.hot is not None else hot_replay.FALLBACK
        handed = replay.hot is not None and outcome != hot_replay.REPLAYED
        self.handed += handed and self.calls > self.SETTLING
        done = outcome == hot_replay.REPLAYED or self.h.replayer.finish(replay, outcome)
        return "replayed" if done else "full path"

    def close(self) -> None:
        if self.comm is not None:
            self.comm.close()


EVERY = 37  # replayed calls per host-checked call: more than D (16)


@pytest.mark.parametrize("way", WAYS)
def test_posts_meet_the_host_check_and_the_slowest_rank(way) -> None:
    """600 replayed calls, every 37th followed by a host-checked call (which waits for every
    rank's descriptor of its number and compares them: a post under the wrong count fails it,
    or hangs until its timeout; and, a barrier of sorts, more often than every D calls it would
    keep the ranks too close to wait at a post); the last rank straggles 2 ms every 10 calls,
    so the others run D - 1 calls ahead and wait (the compiled replay hands those calls to
    Python). Every post here writes the same descriptor, so which line it lands in is checked
    where the board's words are compared with the Python replay's, call for call
    (tests/test_hot_replay.py, tests/test_call_table.py)."""
    problems = []
    h = Harness("python" if way == "python" else "compiled", world, timeout=60.0)
    caller = Caller(way, h)
    try:
        for i in range(600):
            if world.rank == world.size - 1 and i % 10 == 0:
                time.sleep(0.002)
            did = caller.call()
            if did != "replayed":
                problems.append(f"call {i}: {did}")
                break
            if i % EVERY == EVERY - 1:
                h.agreement.run(False, VALUES)  # raises if any rank's line of this call differs
        k = h.agreement.calls
        if k != 600 + 600 // EVERY or h.words.replayed[0] != 600 or len(h.launches.log) != 600:
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
        every = world.allreduce(caller.handed)
        if way != "python" and world.size > 1 and every == 0:
            problems.append("no rank ever waited for the straggler: the test lost its point")
    finally:
        caller.close()
        h.close()
    all_ok(problems)


def peer_failure(way: str) -> str:
    """Five calls, then the last rank fails; what every rank's next call does (or raises), rank
    after rank (a rank that raises marks the board too: later ranks name it as relaying)."""
    h = Harness("python" if way == "python" else "compiled", world, timeout=60.0)
    caller = Caller(way, h)
    try:
        for _ in range(5):
            caller.call()
        world.Barrier()
        if world.rank == world.size - 1:
            h.fail(MpiringError("rank failed on purpose"))
        world.Barrier()
        done = ""
        for turn in range(world.size):  # one rank at a time: each sees the same marks both ways
            if turn == world.rank:
                try:
                    done = caller.call()
                except MpiringError as err:
                    done = f"{type(err).__name__}: {err}"
            world.Barrier()
        return done
    finally:
        world.Barrier()  # nobody abandons the board before every rank read it
        caller.close()
        h.close()


def test_a_peers_failure_ends_every_call_alike() -> None:
    if world.size == 1:
        pytest.skip("needs a peer")
    compiled, python, table = peer_failure("compiled"), peer_failure("python"), peer_failure("table")
    problems = [] if compiled == python == table else [f"compiled: {compiled!r}; python: {python!r}; "
                                                       f"table: {table!r}"]
    last = world.rank == world.size - 1
    if last and compiled != "full path":
        problems.append(f"the failed rank's call: {compiled}")
    if not last and not (compiled.startswith("PeerFailedError: ") and "failed on purpose" in compiled):
        problems.append(f"a peer's call: {compiled}")
    all_ok(problems)
