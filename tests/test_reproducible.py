"""mpiring.core.reproducible and reproducible=True's choices: the reference rule on cases where rank
order and one rounding decide the bits, the docs' code equal to the library's, which rows auto
picks and which refuse (mpiring.call.dispatch), and the option's parsing."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_dispatch import FakeGpu

from mpiring import algorithms
from mpiring.algorithms import Collective
from mpiring.auto import table as auto_table
from mpiring.call.dispatch import Dispatcher
from mpiring.call.options import Options
from mpiring.core import reproducible
from mpiring.core.buffers import Memory
from mpiring.core.errors import InvalidArgumentError, UnavailableError
from mpiring.core.ops import Op
from mpiring.core.topology import from_node_keys

ROOT = Path(__file__).resolve().parents[1]
BF16 = np.dtype(ml_dtypes.bfloat16)


def test_half_types_accumulate_in_float32_and_round_once() -> None:
    # float16 holds only even integers at 2048: summed pairwise in float16, 2048 + 1 + 1 stays
    # 2048; accumulated in float32 it is 2050, which float16 holds.
    xs = [np.array([2048.0], np.float16), np.array([1.0], np.float16), np.array([1.0], np.float16)]
    assert reproducible.reference(xs)[0] == 2050
    # bfloat16 holds 256, 258, not 257: 256 + 1 + 1 is 258 (one rounding), not 256.
    xs = [np.array([v], BF16) for v in (256.0, 1.0, 1.0)]
    assert float(reproducible.reference(xs)[0]) == 258
    assert reproducible.reference(xs).dtype == BF16


def test_the_order_is_rank_order() -> None:
    # float32: (1e8 + 1) - 1e8 is 0 (1 is lost against 1e8); (1e8 - 1e8) + 1 would be 1.
    xs = [np.array([1e8], np.float32), np.array([1.0], np.float32), np.array([-1e8], np.float32)]
    assert reproducible.reference(xs)[0] == 0
    assert reproducible.reference([xs[0], xs[2], xs[1]])[0] == 1


def test_average_divides_the_rounded_sum() -> None:
    xs = [np.array([1.0, 3.0], np.float16), np.array([2.0, 4.0], np.float16)]
    assert reproducible.reference(xs, "avg").tolist() == [1.5, 3.5]
    assert reproducible.reference(xs, Op.MAX).tolist() == [2.0, 4.0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(-2**20, 2**20), min_size=3, max_size=3), min_size=1, max_size=5),
       st.sampled_from(["float16", "bfloat16", "float32", "float64", "int32", "int64"]),
       st.sampled_from(["sum", "prod", "max", "min"]))
def test_the_reference_is_an_elementwise_left_fold(values: list[list[int]], name: str, op: str) -> None:
    """Each element alone, folded left to right in Python on the accumulation type's scalars:
    the same bits as the vectorized reference (so a prefix of a message reduces alike)."""
    dtype = BF16 if name == "bfloat16" else np.dtype(name)
    with np.errstate(over="ignore"):  # float16 holds up to 65504: larger values become inf
        xs = [np.array(v, dtype=np.float64).astype(dtype) for v in values]
    got = reproducible.reference(xs, op)
    wide = reproducible.accumulation_dtype(dtype)
    fold = Op[op.upper()].ufunc
    for k in range(3):
        with np.errstate(all="ignore"):
            acc = wide.type(xs[0][k])
            for x in xs[1:]:
                acc = fold(acc, wide.type(x[k]))
            want = np.array([acc], dtype=wide).astype(dtype)
        assert got[k:k + 1].tobytes() == want.tobytes()


def test_the_docs_show_the_librarys_code() -> None:
    """docs/reproducible.md states the semantics as the very function the tests compare with."""
    page = (ROOT / "docs" / "reproducible.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    source = inspect.getsource(reproducible.accumulation_dtype) + "\n\n" + inspect.getsource(
        reproducible.reference)
    assert source in blocks, "paste mpiring.core.reproducible's two functions into docs/reproducible.md"


def dispatcher(nodes: int = 1, ranks: int = 2, gpu: bool = True, forced: str | None = None) -> Dispatcher:
    topo = from_node_keys([n for n in range(nodes) for _ in range(ranks)])
    return Dispatcher("auto", None, forced, auto_table.load(), topo, host=HostStub(),
                      gpu=FakeGpu() if gpu else None, reproducible=True)


class HostStub:
    memory = Memory.HOST

    def nccl_unavailable(self) -> str | None:
        return None

    def capturing(self) -> bool:
        return False


SIZES = [1, 4096, 60 << 10, 1 << 20, 3 << 20, 64 << 20, 1 << 30, 8 << 30]


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_auto_picks_only_rank_ordered_rows(ranks: int) -> None:
    d = dispatcher(ranks=ranks)
    plain = Dispatcher("auto", None, None, auto_table.load(), d.topology, host=HostStub(), gpu=FakeGpu())
    for nbytes in SIZES:
        row = d.row(nbytes, Memory.CUDA, None)
        assert row.rank_ordered, (nbytes, row.name)
        usual = plain.row(nbytes, Memory.CUDA, None)
        if usual.rank_ordered:  # where the table's choice keeps rank order, it stays
            assert row is usual
        d.gpu.capture = True
        assert d.row(nbytes, Memory.CUDA, None).rank_ordered
        d.gpu.capture = False
    assert d.row(1 << 20, Memory.HOST, None).name == "mpi-twoshot"
    assert d.row(1 << 20, Memory.HOST, None, Collective.REDUCE_SCATTER).name == "mpi-twoshot"


def test_rows_that_do_not_keep_rank_order_refuse_by_name() -> None:
    d = dispatcher()
    for name in ("nccl", "ring", "ring-events", "nccl-ring"):
        with pytest.raises(InvalidArgumentError, match=f"'{name}' does not reduce in rank order"):
            d.row(1 << 20, Memory.CUDA, name)
    for name in ("mpi", "ring"):
        with pytest.raises(InvalidArgumentError, match="'mpi-twoshot'"):
            d.row(1 << 20, Memory.HOST, name)
    assert d.row(1 << 20, Memory.CUDA, "nccl", Collective.ALLGATHER).name == "nccl"  # no arithmetic


def test_mpiring_algo_gives_way_where_it_would_break_rank_order() -> None:
    assert dispatcher(forced="nccl").row(1 << 20, Memory.CUDA, None).rank_ordered
    assert dispatcher(forced="oneshot").row(4096, Memory.CUDA, None).name == "oneshot"


def test_where_no_row_keeps_rank_order_the_error_says_what_to_do() -> None:
    with pytest.raises(UnavailableError, match="across|2 nodes|host arrays"):
        dispatcher(nodes=2).row(1 << 20, Memory.CUDA, None)
    with pytest.raises(UnavailableError, match="Allreduce and keep this rank's block"):
        dispatcher().row(1 << 20, Memory.CUDA, None, Collective.REDUCE_SCATTER)
    assert dispatcher(nodes=2).row(1 << 20, Memory.HOST, None).name == "mpi-twoshot"


def test_every_rank_ordered_row_is_listed() -> None:
    assert algorithms.rank_ordered(Memory.CUDA) == ("oneshot", "twoshot", "oneshot-ll")
    assert algorithms.rank_ordered(Memory.HOST) == ("mpi-twoshot",)


def test_the_option_and_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MPIRING_REPRODUCIBLE", raising=False)
    assert Options.resolve("auto", None, None, None).reproducible is False
    assert Options.resolve("auto", None, None, None, reproducible=True).reproducible is True
    monkeypatch.setenv("MPIRING_REPRODUCIBLE", "1")
    opts = Options.resolve("auto", None, None, None)
    assert opts.reproducible is True and opts.setup_values("auto")["reproducible"] is True
    assert Options.resolve("auto", None, None, None, reproducible=False).reproducible is False
    with pytest.raises(InvalidArgumentError, match="reproducible='yes'"):
        Options.resolve("auto", None, None, None, reproducible="yes")
    monkeypatch.setenv("MPIRING_REPRODUCIBLE", "maybe")
    with pytest.raises(InvalidArgumentError, match="MPIRING_REPRODUCIBLE"):
        Options.resolve("auto", None, None, None)
