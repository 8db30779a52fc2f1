"""mpiring.call.replay: the key of a call is its whole shape (every field that the full path decides
on), calls of other argument types have none, keys read off arrays never equal the dispatcher's
keys of described buffers (one cache holds both), and a call leaves a replay only when it needs
nothing but its launch and its check (the post, or the host check)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mpi4py import MPI

from mpiring import algorithms
from mpiring.algorithms import Collective
from mpiring.call.agreement import FIELDS, AgreementCheck
from mpiring.call.hot_replay import CallWords, Replayer
from mpiring.call.replay import CallKeys, replay_for
from mpiring.core.ops import Op


class FakeArray:
    """What the key reads off a CuPy array: ``data.ptr``, ``shape``, ``strides``, ``dtype``."""

    def __init__(self, ptr: int, shape=(8,), strides=(4,), dtype=np.float32) -> None:
        self.data = SimpleNamespace(ptr=ptr)
        self.shape, self.strides, self.dtype = shape, strides, np.dtype(dtype)


def key(replays: CallKeys, recv, send=None, op=MPI.SUM, algorithm=None, batches=None,
        collective=Collective.ALLREDUCE):
    return replays.key(collective, send, recv, op, algorithm, batches)


def test_the_same_shape_gives_the_same_key_and_in_place_is_one_shape() -> None:
    r = CallKeys(FakeArray)
    assert key(r, FakeArray(64)) == key(r, FakeArray(64))
    assert key(r, FakeArray(64), None) == key(r, FakeArray(64), MPI.IN_PLACE)
    assert key(r, FakeArray(64), FakeArray(128)) == key(r, FakeArray(64), FakeArray(128))
    assert key(r, FakeArray(64), op=MPI.MAX) == key(r, FakeArray(64), op=MPI.MAX)


VARIANTS = {
    "pointer": dict(recv=FakeArray(65)),
    "shape": dict(recv=FakeArray(64, shape=(16,))),  # the shape alone: pointer and strides equal
    "dimensions": dict(recv=FakeArray(64, shape=(2, 4), strides=(16, 4))),
    "strides": dict(recv=FakeArray(64, shape=(8,), strides=(8,))),
    "dtype": dict(recv=FakeArray(64, dtype=np.int32)),
    "sendbuf": dict(send=FakeArray(128)),
    "send pointer": dict(send=FakeArray(256)),
    "op": dict(op=MPI.PROD),
    "op by name": dict(op="sum"),
    "op enum": dict(op=Op.MAX),
    "algorithm": dict(algorithm="oneshot"),
    "batches": dict(batches=2),
    "collective": dict(collective=Collective.ALLGATHER),
}


@pytest.mark.parametrize("change", sorted(VARIANTS))
def test_every_field_of_the_shape_is_in_the_key(change) -> None:
    r = CallKeys(FakeArray)
    base = dict(recv=FakeArray(64), send=FakeArray(128) if change == "send pointer" else None)
    changed = {**base, **VARIANTS[change]}
    assert key(r, **base) is not None and key(r, **changed) is not None
    assert key(r, **base) != key(r, **changed)


def test_a_new_row_in_the_table_changes_every_key() -> None:
    r = CallKeys(FakeArray)
    before = key(r, FakeArray(64))
    row = algorithms.Algorithm("replay-test-row", 4242, algorithms.HOST, lambda b, c: None,
                               summary="-", best_for="-")
    algorithms.register(row)
    try:
        assert key(r, FakeArray(64)) != before
    finally:
        algorithms.unregister(row.name)


@pytest.mark.parametrize("args", [
    dict(recv=np.ones(8, np.float32)),  # a numpy array: the host path, never keyed
    dict(recv=FakeArray(64), send=np.ones(8, np.float32)),
    dict(recv=FakeArray(64), op=MPI.Op.Create(lambda a, b, t: None, commute=True)),
    dict(recv=FakeArray(64), op=object()),
    dict(recv=FakeArray(64), algorithm=["oneshot"]),
    dict(recv=FakeArray(64), batches=2.0),
    dict(recv=FakeArray(64), batches=np.int64(2)),
], ids=["numpy", "numpy send", "user op", "object op", "list algorithm", "float batches", "numpy batches"])
def test_arguments_of_other_types_have_no_key(args) -> None:
    """They take the full path (which also raises on the bad ones); a user-defined MPI op,
    unhashable in mpi4py, is no key either."""
    op = args.get("op")
    try:
        assert key(CallKeys(FakeArray), **args) is None
    finally:
        if isinstance(op, MPI.Op) and op not in (MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN):
            op.Free()


def test_without_an_array_type_nothing_is_keyed() -> None:
    assert key(CallKeys(None), FakeArray(64)) is None
    assert key(CallKeys(None), None) is None


@given(st.integers(0, 1 << 40))
def test_a_key_read_off_the_arrays_never_meets_a_described_one(pointer) -> None:
    """The dispatcher keeps plans under these keys and under keys of described buffers, which
    start with ``"described"``: a key read off the arrays starts with the collective."""
    k = key(CallKeys(FakeArray), FakeArray(pointer))
    assert k is not None and k[0] is Collective.ALLREDUCE and k[0] != "described"


def _prepared(bind=True, wrapped=False, count=8, capturing=False, row_name="oneshot"):
    row = algorithms.get(row_name)
    runs = []
    if not bind:
        row = algorithms.Algorithm("unbound", 4343, algorithms.GPU, row.run, summary="-", best_for="-")
    call = SimpleNamespace(recv=SimpleNamespace(count=count, address=0x2000, dtype="f4"),
                           send=None, source=SimpleNamespace(address=0x1000), op="sum", desc=(1, 2))
    direct = SimpleNamespace(bind=lambda kind, *args: lambda stream: runs.append((kind, args, stream)))
    backend = SimpleNamespace(capturing=lambda: capturing, direct=direct,
                              ordered_stream=lambda: SimpleNamespace(ptr=77))
    run = (lambda b, c: None) if wrapped else row.run
    values = {field: i + count for i, field in enumerate(FIELDS)}
    return SimpleNamespace(row=row, run=run, backend=backend, call=call, values=values,
                           ask_capture=False), runs


@pytest.mark.parametrize(("case", "kept"), [
    (dict(), True), (dict(bind=False), False), (dict(wrapped=True), False), (dict(count=0), False),
    (dict(capturing=True), False),
])
def test_only_calls_that_need_nothing_but_their_launch_are_kept(case, kept) -> None:
    """Not kept: a row without ``bind``, a run wrapped by the dispatcher (avg: sum then divide),
    zero elements, a call made while a graph is captured."""
    prepared, runs = _prepared(**case)
    replay = replay_for(Collective.ALLREDUCE, prepared, checked=False, host_checked=False)
    assert (replay is not None) is kept
    if replay is not None:
        replay.enqueue()
        # the row's bind, on the call it ran, enqueued on the caller's ordered stream
        assert runs == [("oneshot", (0x1000, 0x2000, prepared.call.recv.count, "f4", "sum", (1, 2)), 77)]


@pytest.mark.parametrize("row_name", ["oneshot", "twoshot", "oneshot-ll"])
def test_a_replay_keeps_the_check_as_a_post_or_as_the_host_check(row_name) -> None:
    prepared, _ = _prepared(row_name=row_name)
    posted = replay_for(Collective.ALLREDUCE, prepared, checked=True, host_checked=False)
    assert posted is not None and posted.line is not None and posted.host_check is None
    assert posted.line.tolist() == AgreementCheck.line(prepared.values).tolist()
    # the row checked on the host (GPU check off, several nodes): the replay waits as the full path
    waits = replay_for(Collective.ALLREDUCE, prepared, checked=True, host_checked=True, hot=NeverCompiled())
    assert waits is not None and waits.line is None and waits.host_check == prepared.values
    assert waits.hot is None  # the compiled replay only posts: a host check runs in Python
    unchecked = replay_for(Collective.ALLREDUCE, prepared, checked=False, host_checked=False)
    assert unchecked is not None and unchecked.line is None and unchecked.host_check is None


@pytest.mark.parametrize("ask_capture", [False, True])
def test_a_replay_asks_about_a_capture_only_where_its_row_could_change(ask_capture) -> None:
    """Where auto's answer depends on a capture (``ask_capture``), the replay keeps the
    backend's ``capturing``, so that a capture begun since sends the call to the full path;
    elsewhere it asks nothing."""
    prepared, _ = _prepared()
    prepared.ask_capture = ask_capture
    replay = replay_for(Collective.ALLREDUCE, prepared, checked=True, host_checked=False)
    assert replay is not None
    assert replay.capturing is (prepared.backend.capturing if ask_capture else None)


class RecordingCheck:
    """The agreement check as the Python replay calls it, recording each step into ``log``."""

    def __init__(self, log: list) -> None:
        self.log = log

    def host(self, rejected: bool, values: dict) -> None:
        self.log.append(("host check", rejected, values))

    def post(self, line) -> None:
        self.log.append(("post", line.tolist()))

    def after(self) -> None:
        self.log.append(("after",))


@pytest.mark.parametrize("host_checked", [False, True])
def test_the_python_replay_checks_then_launches(host_checked) -> None:
    """Replayer.python: the health check, then the agreement check (the post of the line, or
    the host check of the values, which waits for the peers), then the launch, then the count
    and the look at skipped calls; and nothing at all while a capture runs (the full path
    decides)."""
    prepared, _ = _prepared()
    prepared.ask_capture = True
    log: list = []
    replay = replay_for(Collective.ALLREDUCE, prepared, checked=True, host_checked=host_checked)
    replay = replay._replace(enqueue=lambda: log.append(("launch",)))
    words = CallWords()
    words.accept()
    replayer = Replayer(words, lambda: log.append(("usable",)), lambda err: log.append(("fail", err)),
                        RecordingCheck(log))  # type: ignore[arg-type]
    assert replayer.python(replay)
    check = (("host check", False, prepared.values) if host_checked
             else ("post", AgreementCheck.line(prepared.values).tolist()))
    assert log == [("usable",), check, ("launch",), ("after",)] and words.replayed[0] == 1
    log.clear()
    prepared.backend.capturing = lambda: True  # (the replay holds the backend's method: rebind it)
    replay = replay._replace(capturing=prepared.backend.capturing)
    assert not replayer.python(replay) and log == [] and words.replayed[0] == 1


class NeverCompiled:
    """A compiled path that must not be asked for a replay's compiled form."""

    def bind(self, replay):
        raise AssertionError("a host-checked replay was offered to the compiled path")


@pytest.mark.parametrize("collective", [Collective.REDUCE_SCATTER, Collective.ALLGATHER])
def test_only_allreduce_is_replayed(collective) -> None:
    """``Algorithm.bind`` binds an allreduce: the nccl row, which also runs the other two
    collectives, replays none of them."""
    prepared, _ = _prepared(row_name="nccl")
    prepared.run = prepared.row.runner(collective)
    assert replay_for(collective, prepared, checked=False, host_checked=False) is None


def test_the_nccl_rows_replay_is_its_allreduce_on_the_callers_stream() -> None:
    runs = []
    prepared, _ = _prepared(row_name="nccl")

    def bind_allreduce(*args):
        *fixed, stream = args
        return lambda: runs.append((*fixed, stream().ptr))
    prepared.backend.nccl_baselines = lambda: SimpleNamespace(bind_allreduce=bind_allreduce)
    replay = replay_for(Collective.ALLREDUCE, prepared, checked=True, host_checked=True)
    assert replay is not None and replay.host_check == prepared.values
    replay.enqueue()
    # in place (send None): ncclAllReduce(recv, recv, ...), on the ordered stream of the call
    assert runs == [(0x2000, 0x2000, prepared.call.recv.count, "f4", "sum", 77)]


def test_the_rows_that_bind_are_the_one_launch_rows() -> None:
    """The table's bindable rows, as docs/design.md says: the one-launch kernels and NCCL."""
    bound = sorted(a.name for a in algorithms.rows() if a.bind is not None)
    assert bound == ["nccl", "oneshot", "oneshot-ll", "twoshot"]


STRIDED, SPARSE = "torch.strided", "torch.sparse_coo"  # stand-ins for torch's layouts


class FakeTensor:
    """What the key reads off a torch tensor: ``data_ptr()``, ``shape``, ``stride()``,
    ``dtype``, ``is_cuda``, ``layout``, ``is_neg()``."""

    def __init__(self, ptr: int, shape=(8,), stride=(1,), dtype="float32", is_cuda=True,
                 layout=STRIDED, neg=False) -> None:
        self.ptr, self.shape, self._stride, self.dtype, self.is_cuda = ptr, shape, stride, dtype, is_cuda
        self.layout, self.neg = layout, neg

    def data_ptr(self) -> int:
        if self.layout != STRIDED:
            raise RuntimeError("Cannot access data pointer of Tensor that doesn't have storage")
        return self.ptr

    def is_neg(self) -> bool:
        return self.neg

    def stride(self) -> tuple[int, ...]:
        return self._stride


@pytest.fixture
def torch_imported(monkeypatch):
    """A program that imported torch (here a stand-in whose Tensor is FakeTensor)."""
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(Tensor=FakeTensor, strided=STRIDED))


TENSOR_VARIANTS = {
    "pointer": dict(recv=FakeTensor(65)),
    "shape": dict(recv=FakeTensor(64, shape=(16,))),  # the shape alone: pointer and stride equal
    "dimensions": dict(recv=FakeTensor(64, shape=(2, 4), stride=(4, 1))),
    "stride": dict(recv=FakeTensor(64, stride=(2,))),
    "dtype": dict(recv=FakeTensor(64, dtype="bfloat16")),
    "sendbuf": dict(send=FakeTensor(128)),
}


@pytest.mark.parametrize("change", sorted(TENSOR_VARIANTS))
def test_a_cuda_tensors_shape_is_its_key(torch_imported, change) -> None:
    r = CallKeys(FakeArray, tensors=True)
    base = dict(recv=FakeTensor(64))
    assert key(r, **base) == key(r, FakeTensor(64)) is not None
    assert key(r, **base) != key(r, **{**base, **TENSOR_VARIANTS[change]})
    assert key(r, FakeTensor(64)) != key(r, FakeArray(64))  # a CuPy array at the same address


def test_tensors_not_keyed(torch_imported) -> None:
    """A CPU tensor (the host path), a subclass of Tensor (its data may mean something else),
    a communicator that keys no tensors, a CPU tensor as sendbuf."""
    class Sub(FakeTensor):
        pass

    r = CallKeys(FakeArray, tensors=True)
    assert key(r, FakeTensor(64, is_cuda=False)) is None
    assert key(r, Sub(64)) is None
    assert key(CallKeys(FakeArray), FakeTensor(64)) is None
    assert key(r, FakeArray(64), FakeTensor(8, is_cuda=False)) is None
    assert key(r, FakeArray(64), FakeTensor(8)) is not None  # a CuPy recv, a CUDA tensor send


def test_lazy_negations_and_sparse_tensors_take_the_full_path(torch_imported) -> None:
    """A negative-bit view shares its base's pointer, shape, strides and dtype, so a replay of
    the base would reduce the un-negated memory; a sparse tensor has no pointer. Neither is keyed:
    the full path's description refuses them by name (tests/test_buffers.py)."""
    r = CallKeys(FakeArray, tensors=True)
    assert key(r, FakeTensor(64)) is not None
    assert key(r, FakeTensor(64, neg=True)) is None
    assert key(r, FakeTensor(64, layout=SPARSE)) is None
    assert key(r, FakeArray(64), FakeTensor(8, neg=True)) is None


def test_without_torch_imported_no_tensor_is_keyed(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert key(CallKeys(FakeArray, tensors=True), FakeTensor(64)) is None
