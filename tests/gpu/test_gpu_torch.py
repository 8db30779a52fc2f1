"""torch tensors are ordered on ``torch.cuda.current_stream()`` (``mpiring.cuda.streams``): on a
torch side stream the call reads inputs written late on that stream and later work there sees
its result; inside ``torch.cuda.graph`` capture the call is captured on torch's capture stream
and every replay on changing data is exact. Both fail when calls run on CuPy's stream instead
(torch's side streams do not wait for CuPy's default stream; capture would see a launch on a
stream it does not own and fail).
"""

from __future__ import annotations

import cupy
import pytest
from gpu_helpers import WORLD, agree, rank_input, reference
from mpi4py import MPI

import mpiring

torch = pytest.importorskip("torch")
RANK = WORLD.rank
CAPTURABLE = ["oneshot", "twoshot", "nccl", "auto"]


@pytest.fixture(scope="module")
def comm():
    c = mpiring.Communicator(WORLD, gpu=True)
    yield c
    c.close()


def exact(count: int, salt: int, device) -> torch.Tensor:
    ref = reference(mpiring.Op.SUM, WORLD.size, count, salt)
    return torch.as_tensor(cupy.asnumpy(ref), device=device)


def inputs(count: int, calls: int, device) -> list[torch.Tensor]:
    """This rank's input of each call, made on the device beforehand."""
    return [torch.as_tensor(cupy.asnumpy(rank_input(RANK, count, cupy.float32, i)), device=device)
            for i in range(calls)]


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("algo", ["ring", "ring-events", "oneshot", "twoshot", "nccl", "auto"])
def test_side_stream_orders_the_call(comm, algo):
    """40 calls on a torch side stream, each input written late on it and each result consumed
    on it, with nothing synchronised in between: every result exact."""
    device = torch.device("cuda", comm.device)
    side = torch.cuda.Stream(device)  # torch's streams do not wait for the legacy default stream
    count, calls = 100_003, 40
    sources = inputs(count, calls, device)
    x, out = torch.zeros(count, device=device), torch.empty(count, device=device)
    torch.cuda.synchronize()
    errors, results = [], []
    with torch.cuda.stream(side):
        for i in range(calls):
            torch.cuda._sleep(1_000_000)  # ~0.5 ms of GPU time before this call's input is written
            x.copy_(sources[i])
            out.fill_(float("nan"))
            comm.Allreduce(x, out, algorithm=algo)
            results.append(out * 1)  # consumed on the side stream right after the call
    side.synchronize()
    for i, got in enumerate(results):
        wrong = int((got.double() != exact(count, i, device)).sum())
        if wrong:
            errors.append(f"{algo} call {i}: {wrong} wrong")
    agree(not errors, "; ".join(errors[:5]))


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("op", ["sum", "avg"])
@pytest.mark.parametrize("algo", CAPTURABLE)
def test_torch_cuda_graph_replays(comm, algo, op):
    """One call captured by torch.cuda.graph, replayed 30 times on changing data."""
    device = torch.device("cuda", comm.device)
    count = 65_537
    capture = torch.cuda.Stream(device)
    x = torch.zeros(count, device=device)
    out = torch.empty_like(x)
    with torch.cuda.stream(capture):  # the first call on the capture stream runs eagerly
        comm.Allreduce(x, out, op, algorithm=algo)
    capture.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=capture):
        comm.Allreduce(x, out, op, algorithm=algo)
    errors = []
    for replay in range(30):
        x.copy_(torch.as_tensor(cupy.asnumpy(rank_input(RANK, count, cupy.float32, replay)), device=device))
        out.fill_(float("nan"))
        graph.replay()
        want = exact(count, replay, device)
        if op == "avg":
            want = want / WORLD.size
        wrong = int((~torch.isclose(out.double(), want, rtol=2e-7, atol=0)).sum())
        if wrong:
            errors.append(f"{algo} {op} replay {replay}: {wrong} wrong")
    torch.cuda.synchronize()
    agree(not errors, "; ".join(errors[:5]))


@pytest.mark.mpi(min_size=1)
def test_in_place_and_allreduce_return_torch(comm):
    device = torch.device("cuda", comm.device)
    x = torch.ones(1000, device=device, dtype=torch.bfloat16)
    comm.Allreduce(MPI.IN_PLACE, x, "avg")
    y = comm.allreduce(torch.full((1000,), 2.0, device=device), op="avg")
    ok = isinstance(y, torch.Tensor) and bool((x == 1).all()) and bool((y == 2).all())
    agree(ok, f"avg of ones {x[:3]}, of twos {y[:3] if isinstance(y, torch.Tensor) else type(y)}")


def test_a_tensors_cupy_view_is_made_when_read_over_the_same_memory(comm) -> None:
    """describe() leaves CuPy's view of a tensor unmade (mpiring.core.buffers.LazyView); read, it is
    a flat CuPy array over the tensor's memory, and a part's view the matching slice."""
    from mpiring.core.buffers import LazyView, describe

    t = torch.arange(12, dtype=torch.float32, device=f"cuda:{comm.device}").reshape(3, 4)
    buf = describe(t, "recvbuf")
    view, part = buf.array, buf.part(5, 4).array
    ok = (type(buf.view) is LazyView and isinstance(view, cupy.ndarray) and view.shape == (12,)
          and view.data.ptr == t.data_ptr() and part.data.ptr == t.data_ptr() + 20
          and cupy.asnumpy(part).tolist() == [5.0, 6.0, 7.0, 8.0])
    agree(ok, f"view {type(view).__name__} {getattr(view, 'shape', None)}, part {part}")
