"""mpiring.call.dispatch: which row a call runs, the plan kept per call shape, and the block rules."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI

from mpiring import algorithms
from mpiring.algorithms import Collective
from mpiring.auto import table as auto_table
from mpiring.call.dispatch import Dispatcher
from mpiring.core.buffers import Memory
from mpiring.core.errors import InvalidArgumentError
from mpiring.core.ops import Op
from mpiring.core.topology import from_node_keys


class FakeGpu:
    memory = Memory.CUDA
    direct = SimpleNamespace(oneshot_limit=1 << 20, ll_limit=64 << 10)  # the kernels' limits

    def __init__(self) -> None:
        self.capture, self.asked = False, 0

    def nccl_unavailable(self) -> str | None:
        return None

    def capturing(self) -> bool:
        self.asked += 1
        return self.capture


def dispatcher(gpu: FakeGpu, nodes: int = 1) -> Dispatcher:
    topo = from_node_keys([n for n in range(nodes) for _ in range(2)])
    return Dispatcher("auto", None, None, auto_table.load(), topo, host=None, gpu=gpu)


@pytest.mark.parametrize("nodes", [1, 2])
def test_answers_are_the_same_at_every_ask(nodes: int) -> None:
    d = dispatcher(FakeGpu(), nodes)
    for size in (1 << 10, 1 << 20, 64 << 20, 1 << 30):
        for algo in ("auto", "nccl", None):
            for collective in Collective:
                first = d.row(size, Memory.CUDA, algo, collective)
                assert d.row(size, Memory.CUDA, algo, collective) is first


def test_graph_capture_is_asked_afresh_for_rows_that_cannot_be_captured() -> None:
    gpu = FakeGpu()
    d = dispatcher(gpu)
    assert d.row(1 << 30, Memory.CUDA, "ring").name == "ring"
    gpu.capture = True
    with pytest.raises(InvalidArgumentError, match="captured"):
        d.row(1 << 30, Memory.CUDA, "ring")  # a capture begun since is seen
    asked = gpu.asked
    assert d.row(4096, Memory.CUDA, "oneshot").name == "oneshot"
    assert d.row(4096, Memory.CUDA, "oneshot").name == "oneshot"
    assert gpu.asked == asked  # a capturable row asks nothing


def test_errors_repeat_and_a_new_row_is_seen() -> None:
    d = dispatcher(FakeGpu())
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="at most"):
            d.row(2 << 20, Memory.CUDA, "oneshot")
    with pytest.raises(InvalidArgumentError, match="unknown algorithm"):
        d.row(4096, Memory.CUDA, "shiny")
    shiny = replace(algorithms.get("nccl"), name="shiny", code=4242, auto=False, baseline=False)
    algorithms.register(shiny)
    try:
        assert d.row(4096, Memory.CUDA, "shiny") is shiny
    finally:
        algorithms.unregister("shiny")
    with pytest.raises(InvalidArgumentError, match="unknown algorithm"):
        d.row(4096, Memory.CUDA, "shiny")


class FakeHost:
    """Records what the rows and the dispatcher ask of a host backend."""

    memory = Memory.HOST

    def __init__(self) -> None:
        self.log: list[tuple] = []

    def check_buffer(self, buf, role) -> None:
        pass

    def nccl_unavailable(self) -> str | None:
        return None

    def capturing(self) -> bool:
        return False

    def run_ring(self, call, collective, events=False) -> None:
        self.log.append(("ring", call.op, collective))

    def average(self, buf, ranks) -> None:
        self.log.append(("average", buf.address, buf.count, ranks))


@pytest.mark.parametrize(("collective", "in_place"), [(Collective.ALLREDUCE, False),
                                                      (Collective.ALLREDUCE, True),
                                                      (Collective.REDUCE_SCATTER, False),
                                                      (Collective.REDUCE_SCATTER, True)])
def test_avg_runs_the_sum_then_divides_this_ranks_result(collective: Collective, in_place: bool) -> None:
    """On a row without its own average the call sums, then divides exactly the elements this
    rank receives (Reduce_scatter_block: its block; in place, the start of recvbuf) by the rank
    count; the agreement check still sees op avg, so a rank summing instead is a mismatch."""
    host = FakeHost()
    topo = from_node_keys([0, 0, 0])
    d = Dispatcher("auto", None, None, auto_table.load(), topo, host=host, gpu=None)
    m = 5
    whole = np.ones(3 * m, np.float32)
    if collective is Collective.ALLREDUCE:
        send, recv = (MPI.IN_PLACE, whole) if in_place else (whole, np.zeros_like(whole))
    else:
        send, recv = (MPI.IN_PLACE, whole) if in_place else (whole, np.zeros(m, np.float32))
    prepared = d.prepare(collective, send, recv, "avg", "ring", None)
    assert prepared.call.op is Op.SUM and prepared.values["op"] == int(Op.AVG)
    prepared.run(host, prepared.call)
    count = recv.size if collective is Collective.ALLREDUCE else m
    address = recv.__array_interface__["data"][0]
    assert host.log == [("ring", Op.SUM, collective), ("average", address, count, 3)]


@pytest.mark.parametrize("op, want", [("sum", Op.SUM), (MPI.SUM, Op.SUM), ("max", Op.MAX),
                                      (MPI.PROD, Op.PROD)])
@pytest.mark.parametrize("collective", [Collective.ALLREDUCE, Collective.REDUCE_SCATTER])
def test_other_ops_run_as_they_are_and_divide_nothing(op, want: Op, collective: Collective) -> None:
    """Only avg divides: any other op runs the row with that op, and nothing after it."""
    host = FakeHost()
    d = Dispatcher("auto", None, None, auto_table.load(), from_node_keys([0, 0, 0]), host=host, gpu=None)
    whole = np.ones(15, np.float32)
    recv = np.zeros_like(whole) if collective is Collective.ALLREDUCE else np.zeros(5, np.float32)
    prepared = d.prepare(collective, whole, recv, op, "ring", None)
    assert prepared.call.op is want and prepared.values["op"] == int(want)
    prepared.run(host, prepared.call)
    assert host.log == [("ring", want, collective)]


def test_avg_refuses_integers_and_ignores_allgather() -> None:
    d = Dispatcher("auto", None, None, auto_table.load(), from_node_keys([0, 0]), host=FakeHost(), gpu=None)
    with pytest.raises(InvalidArgumentError, match="op 'avg' averages floating-point arrays, not int64"):
        d.prepare(Collective.ALLREDUCE, np.ones(4, np.int64), np.zeros(4, np.int64), "avg", "ring", None)
    ints = np.ones(2, np.int64), np.zeros(4, np.int64)
    prepared = d.prepare(Collective.ALLGATHER, *ints, "sum", "ring", None)
    assert prepared.run is prepared.row.allgather


@pytest.mark.parametrize("collective", [Collective.REDUCE_SCATTER, Collective.ALLGATHER])
def test_a_choice_made_while_capturing_is_not_kept_for_eager_calls(collective: Collective) -> None:
    """auto while capturing picks a capturable row (one rank, the block collectives: nccl); the
    eager calls before and after get the eager choice (the ring), memo or not."""
    gpu = FakeGpu()
    topo = from_node_keys([0])
    d = Dispatcher("auto", None, None, auto_table.load(), topo, host=None, gpu=gpu)
    size = 64 << 20
    assert d.row(size, Memory.CUDA, None, collective).name == "ring"
    gpu.capture = True
    assert d.row(size, Memory.CUDA, None, collective).name == "nccl"
    assert d.row(size + 4, Memory.CUDA, None, collective).name == "nccl"  # a miss while capturing
    gpu.capture = False
    assert d.row(size, Memory.CUDA, None, collective).name == "ring"
    assert d.row(size + 4, Memory.CUDA, None, collective).name == "ring"


def test_one_rank_allreduce_is_a_kernel_copy_then_nccls() -> None:
    """One rank on a GPU: auto runs two-shot (one launch) up to 4 MiB and NCCL above, eager or
    while capturing (both can be captured); the ring is no longer auto's pick there."""
    from mpiring.auto.fallbacks import ONE_RANK_BYTES as ONE_RANK_KERNEL_BYTES

    gpu = FakeGpu()
    d = Dispatcher("auto", None, None, auto_table.load(), from_node_keys([0]), host=None, gpu=gpu)
    for capture in (False, True):
        gpu.capture = capture
        assert d.row(1024, Memory.CUDA, None).name == "twoshot"
        assert d.row(ONE_RANK_KERNEL_BYTES, Memory.CUDA, None).name == "twoshot"
        assert d.row(ONE_RANK_KERNEL_BYTES + 4, Memory.CUDA, None).name == "nccl"
        assert d.row(1 << 30, Memory.CUDA, None).name == "nccl"


class CountingHost(FakeHost):
    """A host backend that counts the per-shape checks the dispatcher asks of it."""

    def __init__(self) -> None:
        super().__init__()
        self.checked = 0

    def check_buffer(self, buf, role) -> None:
        self.checked += 1


def host_dispatcher(host: FakeHost, ranks: int = 2) -> Dispatcher:
    return Dispatcher("auto", None, None, auto_table.load(), from_node_keys([0] * ranks), host=host, gpu=None)


def test_a_shape_is_checked_once_and_each_call_gets_its_own_buffers() -> None:
    """The plan of a shape is reused (no second check), but the call it returns describes the
    arrays of this call, and the agreement values are those of the shape."""
    host = CountingHost()
    d = host_dispatcher(host)
    pool = np.zeros(64, np.float32)
    send, recv = pool[:16], pool[32:48]
    first = d.prepare(Collective.ALLREDUCE, send, recv, MPI.SUM, "ring", None)
    assert host.checked == 2
    again = d.prepare(Collective.ALLREDUCE, send.view(), recv.view(), "sum", "ring", None)
    assert host.checked == 2 and again.values == first.values and again.row is first.row
    assert again.call.recv.owner is not first.call.recv.owner  # this call's own description
    other = d.prepare(Collective.ALLREDUCE, pool[16:32], recv, MPI.SUM, "ring", None)  # a new address
    assert host.checked == 4 and other.call.send.address == send.__array_interface__["data"][0] + 64


@pytest.mark.parametrize("collective", [Collective.ALLREDUCE, Collective.REDUCE_SCATTER])
def test_a_rows_size_limit_is_judged_on_the_whole_vectors_bytes(collective: Collective) -> None:
    """A call's size, for the row's limit and auto's table, is the whole vector in bytes: the
    element count times the element's size (so float64 halves the count a limit lets through),
    and for an out-of-place reduce-scatter the sendbuf's n blocks, not the recvbuf's one."""
    tiny = replace(algorithms.get("ring"), name="tiny", code=4243, auto=False, baseline=False,
                   limit=lambda backend: 64)
    algorithms.register(tiny)
    try:
        d = host_dispatcher(CountingHost())
        ranks = 2
        for dtype, count in ((np.float32, 16), (np.float64, 8), (np.float64, 10), (np.float32, 18)):
            vector = np.zeros(count, dtype)
            recv = vector.copy() if collective is Collective.ALLREDUCE else np.zeros(count // ranks, dtype)
            nbytes = count * np.dtype(dtype).itemsize
            if nbytes <= 64:
                assert d.prepare(collective, vector, recv, MPI.SUM, "tiny", None).row is tiny
            else:
                with pytest.raises(InvalidArgumentError, match=f"at most 64 bytes, got {nbytes}"):
                    d.prepare(collective, vector, recv, MPI.SUM, "tiny", None)
    finally:
        algorithms.unregister("tiny")


def test_bound_launches_are_the_kept_replays_single_launches() -> None:
    """``bound_launches()``: the BoundLaunch of each kept plan whose replay is a StreamLaunch,
    in the order the plans were made; plans without a replay, or whose replay is anything else
    (a ring's, NCCL's), give none; none once the plans are dropped."""
    from mpiring.call.dispatch import Replay
    from mpiring.cuda.launcher import BoundLaunch, StreamLaunch

    d = host_dispatcher(CountingHost())
    pool = np.zeros(64, np.float32)
    plans = [d.prepare(Collective.ALLREDUCE, MPI.IN_PLACE, pool[i * 8:i * 8 + 8], MPI.SUM, "ring", None).plan
             for i in range(4)]
    assert all(p is not None for p in plans) and d.bound_launches() == []
    launches = [BoundLaunch(("ptr",), 32, 0xF00D + i, 1, (i,), lambda *args: None) for i in range(2)]
    stream = SimpleNamespace(ptr=0)
    plans[3].replay = Replay(StreamLaunch(launches[0], lambda: stream), None, None)
    plans[1].replay = Replay(lambda: None, None, None)  # not one bound launch
    plans[0].replay = Replay(StreamLaunch(launches[1], lambda: stream), None, None)
    found = d.bound_launches()
    assert len(found) == 2 and found[0] is launches[1] and found[1] is launches[0]
    assert d.replays_kept() == 3
    d.clear()
    assert d.bound_launches() == []


@pytest.mark.parametrize("change", ["readonly", "overlap", "dtype", "count", "op", "batches"])
def test_every_part_of_a_shape_is_checked_afresh_when_it_changes(change: str) -> None:
    """A cached plan never lets through a call that differs from it in anything the checks
    look at: each variant of a good call raises (or is checked anew) as it would uncached."""
    d = host_dispatcher(CountingHost())
    pool = np.zeros(64, np.float32)
    send, recv = pool[:16], pool[32:48]
    d.prepare(Collective.ALLREDUCE, send, recv, MPI.SUM, "ring", None)
    if change == "readonly":
        frozen = recv.view()
        frozen.flags.writeable = False
        with pytest.raises(InvalidArgumentError, match="read-only"):
            d.prepare(Collective.ALLREDUCE, send, frozen, MPI.SUM, "ring", None)
    elif change == "overlap":
        with pytest.raises(InvalidArgumentError, match="partially overlap"):
            d.prepare(Collective.ALLREDUCE, pool[24:40], recv, MPI.SUM, "ring", None)
    elif change == "dtype":
        with pytest.raises(InvalidArgumentError, match="must match"):
            d.prepare(Collective.ALLREDUCE, send.view(np.int32), recv, MPI.SUM, "ring", None)
    elif change == "count":
        with pytest.raises(InvalidArgumentError, match="elements"):
            d.prepare(Collective.ALLREDUCE, pool[:15], recv, MPI.SUM, "ring", None)
    elif change == "op":
        ints = np.zeros(16, np.int64)
        d.prepare(Collective.ALLREDUCE, ints, np.zeros(16, np.int64), "sum", "ring", None)
        with pytest.raises(InvalidArgumentError, match="avg"):
            d.prepare(Collective.ALLREDUCE, ints, np.zeros(16, np.int64), "avg", "ring", None)
    else:
        with pytest.raises(InvalidArgumentError, match="batches"):
            d.prepare(Collective.ALLREDUCE, send, recv, MPI.SUM, "ring", 0)


def test_a_plan_keeps_no_reference_to_the_buffers() -> None:
    """Plans are kept per communicator: they must not keep a user's (possibly large) arrays alive."""
    import gc
    import weakref

    d = host_dispatcher(CountingHost())
    for algo in ("ring", "mpi"):
        for op in ("sum", "avg"):
            send, recv = np.ones(1 << 16, np.float32), np.zeros(1 << 16, np.float32)
            alive = weakref.ref(send), weakref.ref(recv)
            d.prepare(Collective.ALLREDUCE, send, recv, op, algo, None)
            del send, recv
            gc.collect()
            assert alive[0]() is None and alive[1]() is None
    assert d._plans


def test_plans_are_bounded_and_an_unhashable_algorithm_is_named() -> None:
    from mpiring.call.dispatch import PLAN_ENTRIES

    d = host_dispatcher(CountingHost())
    emptied = []  # the compiled index of the plans' replays (a CallTable) goes with them
    d.compiled = SimpleNamespace(clear=lambda: emptied.append(len(d._plans)))
    pool = np.zeros(PLAN_ENTRIES + 8, np.float32)
    for start in range(PLAN_ENTRIES + 8):
        d.prepare(Collective.ALLREDUCE, MPI.IN_PLACE, pool[start:start + 1], MPI.SUM, "ring", None)
    assert 0 < len(d._plans) <= PLAN_ENTRIES
    assert emptied == [0]  # once, when the plans were dropped
    d.clear()
    assert emptied == [0, 0] and not d._plans
    with pytest.raises(InvalidArgumentError, match=r"unknown algorithm \"\['ring'\]\""):
        d.prepare(Collective.ALLREDUCE, MPI.IN_PLACE, pool[:4], MPI.SUM, ["ring"], None)
    with pytest.raises(InvalidArgumentError, match="unknown algorithm"):
        d.row(4, Memory.HOST, {"ring"})


def test_a_cached_plan_still_refuses_a_ring_once_a_capture_began() -> None:
    """The plan of an uncapturable row is asked whether a graph is being captured at every call."""
    gpu = FakeGpu()
    d = dispatcher(gpu)
    buf = np.zeros(8, np.float32)
    # Describe a host array as if it were device memory: the dispatcher only reads the description.
    from mpiring.core import buffers

    desc = buffers.describe(buf, "recvbuf")
    fake = buffers.Buffer(Memory.CUDA, desc.address, desc.count, desc.dtype, False, None, buf)
    original = buffers.describe
    try:
        import mpiring.call.dispatch as dispatch_module

        dispatch_module.describe = lambda obj, role: fake
        gpu.check_buffer = lambda b, role: None
        gpu.run_ring = None
        assert d.prepare(Collective.ALLREDUCE, MPI.IN_PLACE, buf, MPI.SUM, "ring", None).row.name == "ring"
        gpu.capture = True
        with pytest.raises(InvalidArgumentError, match="captured"):
            d.prepare(Collective.ALLREDUCE, MPI.IN_PLACE, buf, MPI.SUM, "ring", None)
        # One rank, all-gather: auto captures nccl, and the eager calls after run the ring again.
        alone = Dispatcher("auto", None, None, auto_table.load(), from_node_keys([0]), host=None, gpu=gpu)
        assert alone.prepare(Collective.ALLGATHER, MPI.IN_PLACE, buf, MPI.SUM, None, None).row.name == "nccl"
        gpu.capture = False
        assert alone.prepare(Collective.ALLGATHER, MPI.IN_PLACE, buf, MPI.SUM, None, None).row.name == "ring"
    finally:
        dispatch_module.describe = original


# -- auto's graph entries (tuning table format 2) ------------------------------------------------

SPLIT = {"format": 2, "tables": {"2": {"eager": [[1 << 20, "nccl"], [None, "twoshot"]],
                                       "graph": [[4096, "oneshot"], [None, "nccl"]]}}}


def split_dispatcher(gpu: FakeGpu) -> Dispatcher:
    """Two ranks on one node, a table whose eager and graph entries differ: eager nccl up to
    1 MiB, twoshot above; in graphs oneshot up to 4 KiB, nccl above."""
    return Dispatcher("auto", None, None, auto_table.parse(SPLIT), from_node_keys([0, 0]), host=None,
                      gpu=gpu)


def test_auto_uses_the_graph_entries_while_capturing_and_the_memo_leaks_neither_way() -> None:
    gpu = FakeGpu()
    d = split_dispatcher(gpu)
    d._made.add("nccl")  # as if an eager call had run NCCL (see the lazy-row test below)
    for _ in range(2):  # the second round answers from the memo
        gpu.capture = False
        assert d.row(1024, Memory.CUDA, None).name == "nccl"
        assert d.row(1 << 30, Memory.CUDA, None).name == "twoshot"
        gpu.capture = True
        assert d.row(1024, Memory.CUDA, None).name == "oneshot"  # not the eager answer kept
        assert d.row(1 << 30, Memory.CUDA, None).name == "nccl"
    gpu.capture = False
    assert d.row(1024, Memory.CUDA, None).name == "nccl"  # nor the captured one
    assert d.row(1024, Memory.CUDA, "auto").name == "nccl"


def test_where_both_entries_agree_no_capture_query_is_made() -> None:
    """64 KiB is nccl in both ladders, so auto's choice never asks the GPU."""
    gpu = FakeGpu()
    d = split_dispatcher(gpu)
    for _ in range(3):
        assert d.row(64 << 10, Memory.CUDA, None).name == "nccl"
    assert gpu.asked == 0
    assert d._auto_choice(64 << 10, Memory.CUDA, Collective.ALLREDUCE) == "nccl"
    assert gpu.asked == 0
    d._auto_choice(1024, Memory.CUDA, Collective.ALLREDUCE)
    assert gpu.asked == 1  # where they differ, auto must know


def test_mpiring_algo_and_other_calls_ignore_the_graph_entries() -> None:
    gpu = FakeGpu()
    forced = Dispatcher("auto", None, "twoshot", auto_table.parse(SPLIT), from_node_keys([0, 0]),
                        host=None, gpu=gpu)
    gpu.capture = True
    assert forced.row(1024, Memory.CUDA, None).name == "twoshot"
    assert not forced._table_decides(Memory.CUDA, None, Collective.ALLREDUCE)
    d = split_dispatcher(gpu)
    assert not d._table_decides(Memory.CUDA, "nccl", Collective.ALLREDUCE)
    assert not d._table_decides(Memory.HOST, None, Collective.ALLREDUCE)
    assert not d._table_decides(Memory.CUDA, None, Collective.ALLGATHER)
    assert d._table_decides(Memory.CUDA, None, Collective.ALLREDUCE)


_SMALL = np.zeros(4, np.float32)


def prepare_on_gpu(d: Dispatcher, gpu: FakeGpu, nbytes: int, capture: bool,
                   monkeypatch: pytest.MonkeyPatch) -> str:
    """The row prepare() gives an in-place allreduce of ``nbytes`` of GPU memory (a host array
    described as device memory: the dispatcher only reads the description)."""
    import mpiring.call.dispatch as dispatch_module
    from mpiring.core import buffers

    buf = _SMALL  # one address for every call: a plan per size; the count says the size
    desc = buffers.describe(buf, "recvbuf")
    fake = buffers.Buffer(Memory.CUDA, desc.address, nbytes // 4, desc.dtype, False, None, buf)
    monkeypatch.setattr(dispatch_module, "describe", lambda obj, role: fake)
    gpu.check_buffer = lambda b, role: None
    gpu.capture = capture
    return d.prepare(Collective.ALLREDUCE, MPI.IN_PLACE, buf, MPI.SUM, None, None).row.name


def test_a_cached_eager_plan_is_not_replayed_into_a_graph_where_the_table_differs(monkeypatch) -> None:
    """prepare() keeps plans of eager calls; a call of the same shape while capturing gets the
    graph entry's row (and the eager call after it the eager row again)."""
    gpu = FakeGpu()
    d = split_dispatcher(gpu)
    picks = [prepare_on_gpu(d, gpu, 1024, capture, monkeypatch) for capture in (False, True, False, True)]
    assert picks == ["nccl", "oneshot", "nccl", "oneshot"]  # 1 KiB: eager nccl, graph oneshot
    assert len(d._plans) == 1  # only the eager plan is kept


def test_a_lazy_row_is_captured_only_after_it_ran_outside_a_capture(monkeypatch) -> None:
    """NCCL makes its communicator at its first call, which a capture cannot do: where the
    graph entry says nccl (1 GiB here) but NCCL never ran on this communicator, auto keeps the
    eager entry's row (twoshot); once an eager call ran NCCL (1 KiB), the graph entry counts."""
    assert algorithms.get("nccl").lazy and not algorithms.get("oneshot").lazy
    gpu = FakeGpu()
    d = split_dispatcher(gpu)
    assert prepare_on_gpu(d, gpu, 1 << 30, True, monkeypatch) == "twoshot"
    assert prepare_on_gpu(d, gpu, 1 << 30, False, monkeypatch) == "twoshot"
    assert prepare_on_gpu(d, gpu, 1 << 30, True, monkeypatch) == "twoshot" and not d._made
    assert prepare_on_gpu(d, gpu, 1024, False, monkeypatch) == "nccl" and d._made == {"nccl"}
    assert prepare_on_gpu(d, gpu, 1 << 30, True, monkeypatch) == "nccl"
    assert prepare_on_gpu(d, gpu, 1 << 30, False, monkeypatch) == "twoshot"


OVERLAP_TABLE = {"format": 2, "tables": {"2": {
    "eager": [[65536, "oneshot"], [None, "twoshot"]],
    "graph": [[None, "twoshot"]],
    "overlap": [[65536, "oneshot"], [None, "ring"]]}}}


@pytest.mark.parametrize("overlap", [False, True])
def test_overlap_picks_from_the_tables_overlap_entries(overlap: bool) -> None:
    """``Communicator(overlap=True)``: auto reads the overlap ladder (smallest makespan beside
    compute); while a graph is captured, a pick that cannot be captured gives way to the graph
    ladder's, and the eager answer comes back once the capture ends."""
    gpu = FakeGpu()
    topo = from_node_keys([0, 0])
    d = Dispatcher("auto", None, None, auto_table.parse(OVERLAP_TABLE), topo, host=None, gpu=gpu,
                   overlap=overlap)
    assert d.row(4096, Memory.CUDA, None).name == "oneshot"
    big = "ring" if overlap else "twoshot"
    assert d.row(1 << 20, Memory.CUDA, None).name == big
    gpu.capture = True
    assert d.row(1 << 20, Memory.CUDA, None).name == "twoshot"
    gpu.capture = False
    assert d.row(1 << 20, Memory.CUDA, None).name == big


def test_overlap_without_overlap_entries_keeps_the_usual_choice() -> None:
    plain = {"format": 2, "tables": {"2": {"eager": OVERLAP_TABLE["tables"]["2"]["eager"]}}}
    topo = from_node_keys([0, 0])
    d = Dispatcher("auto", None, None, auto_table.parse(plain), topo, host=None, gpu=FakeGpu(),
                   overlap=True)
    assert [d.row(n, Memory.CUDA, None).name for n in (4096, 1 << 20)] == ["oneshot", "twoshot"]
