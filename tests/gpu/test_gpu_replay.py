"""The eager fast path on the GPU (mpiring.call.replay): once a call of oneshot, twoshot,
oneshot-ll or nccl has run, later calls of the same shape are replayed (one launch with pre-packed
arguments, and the agreement check: the post for the kernels, the host check for nccl) instead
of planned afresh. Thousands of replayed
calls on changing data, with GPU stragglers, are exact on every element; a replay launches on
the caller's current stream; a replay captured into a CUDA graph sees new data at every
graph launch; a call of another shape takes the full path once. Every test runs twice: with
the compiled replay (mpiring.call.hot_replay; skipped where it is not built:
``python -m tools.build_hotpath``) and with the Python replay (``MPIRING_HOTPATH=0``).

Run under mpirun on 1+ GPUs, or on one shared GPU (``MPIRING_SHARE_GPU=1``: jobs/gpu-shared.sh).
"""

from __future__ import annotations

import random

import cupy
import numpy as np
import pytest
from gpu_helpers import WORLD, agree, fit, gpu_nap, poison, rank_input, reference, runnable
from mpi4py import MPI

import mpiring
from mpiring.algorithms import Collective
from mpiring.call import hot_replay

RANK, SIZE = WORLD.rank, WORLD.size
ROWS = runnable(("oneshot-ll", "oneshot", "twoshot", "nccl"))  # nccl: not where ranks share a GPU
pytestmark = pytest.mark.mpi
BUILT = hot_replay.compiled() is not None  # the same answer on every rank (one checkout)


@pytest.fixture(autouse=True, params=["compiled", "python"])
def replay_path(request, monkeypatch):
    """The communicators of each test replay compiled, then in Python (MPIRING_HOTPATH)."""
    if request.param == "compiled" and not BUILT:
        pytest.skip("the compiled replay is not built (python -m tools.build_hotpath)")
    monkeypatch.setenv("MPIRING_HOTPATH", "1" if request.param == "compiled" else "0")
    return request.param


def test_the_communicator_says_which_replay_it_runs(replay_path):
    with mpiring.Communicator(WORLD, gpu=True) as c:
        agree(c.compiled_replay == (replay_path == "compiled"), f"compiled_replay {c.compiled_replay}")
        # The call table (key, lookup and replay in one C call) comes with the compiled replay.
        agree((c.call_keys.compiled is not None) == c.compiled_replay, f"table {c.call_keys.compiled}")


def test_replayed_calls_go_through_the_call_table(replay_path):
    """Calls of one shape: the second is replayed by _collective, which hands it to the call
    table; from then on the table finds them (it holds one entry)."""
    if replay_path != "compiled":
        pytest.skip("the call table comes with the compiled replay")
    x, out = cupy.ones(1024, cupy.float32), cupy.empty(1024, cupy.float32)
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot") as c:
        table = c.call_keys.compiled
        for _ in range(50):
            c.Allreduce(x, out)
        c.synchronize()
        stats = c.stats()
        agree(len(table) == 1 and stats.planned == 1 and stats.replayed == 49,
              f"{len(table)} entries, {stats}")
        agree(table.find(Collective.ALLREDUCE, x, out, MPI.SUM, None, None) is not None,
              "the table finds the call")
        agree(bool(cupy.all(out == SIZE)), "the replayed calls' result")
    agree(len(table) == 0, "close() empties the table")


class FullPath:
    """The calls of ``comm`` since this was made that took the full path (each planned its
    call afresh: ``comm.stats().planned``); ``len()``: how many."""

    def __init__(self, comm: mpiring.Communicator) -> None:
        self.comm, self.start = comm, comm.stats().planned

    def __len__(self) -> int:
        return self.comm.stats().planned - self.start


def counting_full_path(comm: mpiring.Communicator) -> FullPath:
    """Count the calls that take the full path (each plans its call: Dispatcher.prepare)."""
    return FullPath(comm)


def sum_case(count: int, dtype) -> tuple[cupy.ndarray, ...]:
    """What a test of a sum on changing data starts from: this rank's input, the sum of every
    rank's, an input and an output array of the shape, and a device counter of wrong elements."""
    base = rank_input(RANK, count, dtype)
    want = reference(mpiring.Op.SUM, SIZE, count).astype(dtype)
    return base, want, cupy.empty_like(base), cupy.empty_like(base), cupy.zeros((), dtype=cupy.int64)


@pytest.mark.parametrize("in_place", [False, True], ids=["out", "in_place"])
@pytest.mark.parametrize("dtype", [cupy.float32, cupy.int32], ids=["float32", "int32"])
@pytest.mark.parametrize("algo", ROWS)
def test_thousands_of_replayed_calls_on_changing_data_are_exact(algo, dtype, in_place):
    """3,000 calls of one shape, the input changed before each, the output poisoned before
    each, one rank late now and then: every call exact on every element (compared on the GPU);
    only the first planned its call."""
    count, calls = fit(algo, 12_345, dtype), 3000
    chance = random.Random(31)  # the same draws on every rank
    stream = cupy.cuda.get_current_stream()
    base, want, x, out, wrong = sum_case(count, dtype)
    with mpiring.Communicator(WORLD, gpu=True, algorithm=algo) as c:
        full = counting_full_path(c)
        for call in range(calls):
            shift = call % 7
            poison(out)
            if in_place:
                cupy.add(base, shift, out=out)
            else:
                cupy.add(base, shift, out=x)
            late, nap = chance.random() < 0.02, chance.uniform(0, 200e-6)  # drawn on every rank
            if late and RANK == call % SIZE:
                gpu_nap(stream, nap)
            c.Allreduce(MPI.IN_PLACE if in_place else x, out)
            wrong += cupy.count_nonzero(out != want + SIZE * shift)
        c.synchronize()
        replays = c.replays_kept
    agree(int(wrong) == 0, f"{int(wrong)} wrong elements over {calls} calls")
    agree(len(full) == 1 and replays == 1, f"{len(full)} calls took the full path, {replays} replays kept")


@pytest.mark.parametrize("algo", ROWS)
def test_thousands_of_persistent_starts_are_exact_and_replayed(algo):
    """Two persistent requests (two counts) and plain calls of the first shape, in an order drawn
    alike on every rank; inputs changed and outputs poisoned before each; one rank late now and
    then: every call exact on every element, each shape planned once, every other call replayed
    (mpiring.call.persistent: a Start runs the kept replay without reading a key)."""
    counts, calls = (fit(algo, 12_345, cupy.float32), fit(algo, 37, cupy.float32)), 2000
    chance = random.Random(17)  # the same draws on every rank
    stream = cupy.cuda.get_current_stream()
    bases = [rank_input(RANK, n, cupy.float32) for n in counts]
    wants = [reference(mpiring.Op.SUM, SIZE, n).astype(cupy.float32) for n in counts]
    xs, outs = [cupy.empty_like(b) for b in bases], [cupy.empty_like(b) for b in bases]
    wrong = cupy.zeros((), dtype=cupy.int64)
    with mpiring.Communicator(WORLD, gpu=True, algorithm=algo) as c:
        full = counting_full_path(c)
        requests = [c.Allreduce_init(x, out) for x, out in zip(xs, outs, strict=True)]
        for call in range(calls):
            # Every draw on every rank (a draw made on one rank only would change the next
            # ones there: the ranks would call different shapes).
            which, late, nap = chance.randrange(3), chance.random() < 0.02, chance.uniform(0, 200e-6)
            shape, shift = which % 2, call % 7  # which 0, 1: a request's Start; 2: Allreduce of shape 0
            poison(outs[shape])
            cupy.add(bases[shape], shift, out=xs[shape])
            if late and RANK == call % SIZE:
                gpu_nap(stream, nap)
            if which < 2:
                requests[which].Start()
            else:
                c.Allreduce(xs[0], outs[0])
            wrong += cupy.count_nonzero(outs[shape] != wants[shape] + SIZE * shift)
        c.synchronize()
        stats = c.stats()
    agree(int(wrong) == 0, f"{int(wrong)} wrong elements over {calls} calls")
    agree(len(full) == 2 and stats.replayed == calls - 2, f"{len(full)} planned, {stats.replayed} replayed")


@pytest.mark.parametrize("algo", ROWS)
def test_a_persistent_start_captured_in_a_graph_sees_new_data(algo):
    """Eager Starts (replayed), then a Start captured into a CUDA graph, launched 100 times on
    changing inputs; Starts after the capture are eager again and exact."""
    count = fit(algo, 3001, cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    base, want, x, out, wrong = sum_case(count, cupy.float32)
    with mpiring.Communicator(WORLD, gpu=True, algorithm=algo) as c, stream:
        request = c.Allreduce_init(x, out)
        for _ in range(3):
            cupy.copyto(x, base)
            request.Start()
        c.synchronize()
        stream.begin_capture()
        request.Start()
        graph = stream.end_capture()
        for k in range(100):
            cupy.add(base, k % 9, out=x)
            poison(out)
            if k % 2:
                graph.launch(stream)
            else:
                request.Start()
            wrong += cupy.count_nonzero(out != want + SIZE * (k % 9))
        c.synchronize()
        del graph  # before close (NCCL: see the test above)
    agree(int(wrong) == 0, f"{int(wrong)} wrong elements over 100 graph launches and Starts")


@pytest.mark.parametrize("algo", ROWS)
def test_a_replay_launches_on_the_current_stream(algo):
    """Calls alternate between two streams (the caller orders its own work on them); every
    replayed call runs on the stream current at the call, after what was queued there."""
    count = fit(algo, 4099, cupy.float32)
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
    base, want, x, out, wrong = sum_case(count, cupy.float32)
    problems = []
    with mpiring.Communicator(WORLD, gpu=True, algorithm=algo) as c:
        full = counting_full_path(c)
        previous = cupy.cuda.get_current_stream()
        for call in range(400):
            s = streams[call % 2]
            s.wait_event(previous.record())  # the caller's order: the last check before this call
            with s:
                gpu_nap(s, 20e-6)  # the call must wait for this
                cupy.add(base, call % 5, out=x)
                c.Allreduce(x, out)
                ran_on = c.last_stream.ptr
                if ran_on != s.ptr:
                    problems.append(f"call {call} ran on stream {ran_on:#x}, not {s.ptr:#x}")
                wrong += cupy.count_nonzero(out != want + SIZE * (call % 5))
            previous = s
        c.synchronize()
    agree(not problems and int(wrong) == 0, f"{problems[:3]}, {int(wrong)} wrong elements")
    agree(len(full) == 1, f"{len(full)} calls took the full path")


@pytest.mark.parametrize("algo", ROWS)
def test_a_replay_captured_in_a_graph_sees_new_data(algo):
    """Eager calls of a shape (replayed), then the same call captured into a CUDA graph (the
    replay is what gets captured), launched 100 times on changing inputs."""
    count = fit(algo, 5000, cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    base, want, x, out, wrong = sum_case(count, cupy.float32)
    with mpiring.Communicator(WORLD, gpu=True, algorithm=algo) as c, stream:
        full = counting_full_path(c)
        for _ in range(3):
            cupy.copyto(x, base)
            c.Allreduce(x, out)
        c.synchronize()
        stream.begin_capture()
        c.Allreduce(x, out)
        graph = stream.end_capture()
        for k in range(100):
            cupy.add(base, k % 9, out=x)
            poison(out)
            graph.launch(stream)
            wrong += cupy.count_nonzero(out != want + SIZE * (k % 9))
        c.synchronize()
        # Before close: NCCL's communicator cannot be destroyed while a graph that captured
        # its calls lives (ncclCommDestroy waits for the graph), so the graph goes first.
        del graph
    agree(int(wrong) == 0, f"{int(wrong)} wrong elements over 100 graph launches")
    agree(len(full) == 1, f"{len(full)} calls took the full path")


def test_other_shapes_ops_and_arrays_take_the_full_path_once():
    """A new count, op or algorithm is planned once, then replayed; views of the same memory
    with the same shape share a replay; a call whose sum is then averaged (avg) is not
    replayed (two launches)."""
    a = cupy.ones(4096, dtype=cupy.float32)
    b = cupy.ones(1024, dtype=cupy.float32)
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot") as c:
        full = counting_full_path(c)
        for _ in range(3):
            for buf, kwargs in ((a, {}), (b, {}), (a[:1024], {}), (a, {"op": MPI.MAX}),
                                (a, {"algorithm": "twoshot"}), (a, {"op": "avg"})):
                buf.fill(1)
                c.Allreduce(MPI.IN_PLACE, buf, **kwargs)
                want = 1 if kwargs.get("op") in (MPI.MAX, "avg") else SIZE
                agree(bool((buf == want).all()), f"{kwargs}: {buf[:3]} != {want}")
        c.synchronize()
        replays = c.replays_kept
    # Planned: a, b, a[:1024], a MAX, a twoshot once each; avg at every call (on one rank an
    # average is the sum: replayed like the others).
    avg_full = 1 if SIZE == 1 else 3
    agree(len(full) == 5 + avg_full, f"{len(full)} calls took the full path, expected {5 + avg_full}")
    agree(replays == 5 + (SIZE == 1), f"{replays} replays kept")


@pytest.mark.skipif(SIZE < 2, reason="one rank has no one to check against")
@pytest.mark.parametrize("algo", ROWS)
def test_setting_check_rebinds_the_replays(algo):
    """A replay carries the agreement check (the post, or nccl's host check) as it was bound.
    Setting ``check`` drops the kept plans: after on -> off the calls are replayed without it
    (the check's count stays), after off -> on every call, replayed or not, is checked again;
    one full-path call per change, every result exact."""
    a = cupy.empty(fit(algo, 3000, cupy.float32), dtype=cupy.float32)
    with mpiring.Communicator(WORLD, gpu=True, algorithm=algo) as c:
        def calls() -> tuple[int, int, int]:
            before = c.stats()
            for call in range(4):
                a.fill(call)
                c.Allreduce(MPI.IN_PLACE, a)
                agree(bool((a == SIZE * call).all()), f"call {call}: {a[:3]} != {SIZE * call}")
            after = c.stats()
            return (after.planned - before.planned, after.replayed - before.replayed,
                    after.checked - before.checked)

        first = calls()  # check on (the default): planned once, then replays that post
        c.check = False
        off = calls()
        c.check = True
        on = calls()
        c.synchronize()
    agree(first == (1, 3, 4) and off == (1, 3, 0) and on == (1, 3, 4),
          f"(planned, replayed, checked): first {first}, off {off}, on {on}")


def test_replay_false_takes_the_full_path_at_every_call():
    """Communicator(replay=False): nothing kept, every call planned afresh, and exact."""
    a = cupy.empty(4096, dtype=cupy.float32)
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot", replay=False) as c:
        full = counting_full_path(c)
        for call in range(20):
            a.fill(call)
            c.Allreduce(MPI.IN_PLACE, a)
            agree(bool((a == SIZE * call).all()), f"call {call}: {a[:3]} != {SIZE * call}")
        c.synchronize()
        agree(len(full) == 20 and c.replays_kept == 0,
              f"{len(full)} calls took the full path, {c.replays_kept} replays kept")


def test_arguments_without_a_key_take_the_full_path():
    """Arguments of a type that has no key (a numpy integer as batches) take the full path at
    every call, and work."""
    a = cupy.ones(256, dtype=cupy.float32)
    with mpiring.Communicator(WORLD, gpu=True, algorithm="oneshot") as c:
        full = counting_full_path(c)
        for _ in range(3):
            a.fill(1)
            c.Allreduce(MPI.IN_PLACE, a, batches=np.int64(1))
        c.synchronize()
        agree(bool((a == SIZE).all()) and len(full) == 3, f"{len(full)} full-path calls")


@pytest.mark.parametrize("algo", ROWS)
def test_torch_tensors_are_replayed_on_torchs_current_stream(algo):
    """2,000 calls on CUDA torch tensors under a torch side stream (which does not wait for
    CuPy's stream): each input written there just before the call, each result checked there
    just after, nothing synchronised in between; every call exact, only the first planned."""
    torch = pytest.importorskip("torch")
    count, calls = fit(algo, 7_777, cupy.float32), 2000
    with mpiring.Communicator(WORLD, gpu=True, algorithm=algo) as c:
        device = torch.device("cuda", c.device)
        base = torch.as_tensor(cupy.asnumpy(rank_input(RANK, count, cupy.float32)), device=device)
        want = torch.as_tensor(cupy.asnumpy(reference(mpiring.Op.SUM, SIZE, count)),
                               device=device).float()
        x, out = torch.empty_like(base), torch.empty_like(base)
        wrong = torch.zeros((), dtype=torch.int64, device=device)
        full = counting_full_path(c)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for call in range(calls):
                if call % 97 == RANK:
                    torch.cuda._sleep(200_000)  # a late writer now and then (~0.1 ms)
                torch.add(base, call % 5, out=x)
                out.fill_(float("nan"))
                c.Allreduce(x, out)
                wrong += (out != want + SIZE * (call % 5)).sum()
        side.synchronize()
        c.synchronize()
        replays = c.replays_kept
    agree(int(wrong) == 0, f"{int(wrong)} wrong elements over {calls} calls")
    agree(len(full) == 1 and replays == 1, f"{len(full)} calls took the full path, {replays} replays kept")


@pytest.mark.skipif(SIZE < 2, reason="one rank has no one to disagree with")
@pytest.mark.skipif("nccl" not in ROWS, reason="NCCL refuses ranks that share a GPU")
def test_a_mismatch_on_a_replayed_nccl_shape_raises_on_every_rank():
    """nccl's replays keep the host check: after replays of one shape, the last rank passes half
    the count (a new shape: its full path) while its peers replay; every rank raises before
    NCCL is called (nothing hangs, the buffers are untouched), and the next matching call is
    replayed and exact."""
    a = cupy.empty(8192, dtype=cupy.float32)
    with mpiring.Communicator(WORLD, gpu=True, algorithm="nccl") as c:
        for call in range(3):
            a.fill(call)
            c.Allreduce(MPI.IN_PLACE, a)
        before = c.stats()
        mine = a[:4096] if RANK == SIZE - 1 else a
        a.fill(7)
        try:
            c.Allreduce(MPI.IN_PLACE, mine)
            raised = "no error"
        except mpiring.RankMismatchError as err:
            raised = "" if "count (this rank" in str(err) else f"an error without the count: {err}"
        c.synchronize()
        agree(not raised and bool((a == 7).all()), raised or f"the buffer changed: {a[:3]}")
        a.fill(1)
        c.Allreduce(MPI.IN_PLACE, a)
        c.synchronize()
        after = c.stats()
        replayed = after.replayed - before.replayed
        agree(bool((a == SIZE).all()), f"after the mismatch: {a[:3]} != {SIZE}")
        # Counted as replayed: the matching call only (a replay stopped by its check launches
        # nothing and is not counted; the culprit's mismatched call took the full path).
        agree(replayed == 1, f"{replayed} calls replayed, expected 1")
