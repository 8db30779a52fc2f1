"""The direct rows (issue 28): ``nccl-direct`` and ``mpi-direct``, the library calls of the table's
``nccl`` and ``mpi`` rows made as their users make them, without mpiring on the path; the
default baseline (the direct row, else the row it wraps) and its fallbacks; the banner's words
on what each baseline row's time includes; the agreement check on in mpiring's timed calls by
default (``--no-time-agreement``: off). Without a GPU: ``nccl-direct``'s runtime runs on a fake
CuPy over host arrays (tests/bench_rival_fakes.py), ``mpi-direct`` for real."""

from __future__ import annotations

import csv
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from bench_rival_fakes import (
    EVENTS,
    STREAM,
    FakeNcclCommunicator,
    fake_cupy,
    nccl_direct_on_host,
    registered,
)
from mpi4py import MPI

import mpiring
from mpiring import algorithms
from mpiring.bench import baseline, plot_style, rivals, summary
from mpiring.bench.algorithms import default_sweep, graph_capturable, runnable
from mpiring.bench.cli import build_parser, parse_args
from mpiring.bench.command import BenchError
from mpiring.bench.data import resolve_dtype
from mpiring.bench.measure import PointMeasurer, TimingPolicy
from mpiring.bench.rivals.base import RivalContext
from mpiring.bench.rivals.direct_calls import MpiDirect, NcclDirect, nccl_codes, nccl_version
from mpiring.bench.rivals.runtime import RivalSet
from mpiring.core.errors import InvalidArgumentError

serial = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")
AR, RS, AG = "allreduce", "reduce_scatter", "allgather"


def ctx(op: str = "sum", dtype: str = "float32") -> RivalContext:
    return RivalContext(max_count=64, dtype=resolve_dtype(dtype), op=op, rank=0, size=1, nodes=1,
                        timeout=30.0)


def bufs(count: int = 16, dtype: str = "float32", value: float = 3.0) -> SimpleNamespace:
    send = np.full(count, value, dtype=dtype)
    return SimpleNamespace(send=send, recv=np.zeros(count, dtype=dtype), count=count)


# -- the registry --------------------------------------------------------------------------------


def test_the_direct_rows_make_the_tables_nccl_and_mpi_calls():
    nccl, mpi = rivals.get("nccl-direct"), rivals.get("mpi-direct")
    assert (nccl.wraps, nccl.memory, nccl.graph_capturable, nccl.dtypes) == ("nccl", rivals.GPU, True,
                                                                             None)
    assert (mpi.wraps, mpi.memory, mpi.graph_capturable) == ("mpi", rivals.HOST, False)
    assert nccl.ops == mpi.ops == ("sum", "prod", "max", "min") and not nccl.node_only
    assert rivals.wrapped("nccl-direct") == "nccl" and rivals.wrapped("mpi-direct") == "mpi"
    assert rivals.wrapped("torch") == "" and rivals.wrapped("ring") == ""
    assert all(algorithms.get(rivals.wrapped(n)).baseline for n in ("nccl-direct", "mpi-direct"))
    assert "nccl-direct" in runnable(True) and "nccl-direct" not in runnable(False)
    assert "mpi-direct" in runnable(False) and "mpi-direct" not in runnable(True)
    assert graph_capturable("nccl-direct") and not graph_capturable("mpi-direct")
    for collective in (RS, AG):  # allreduce only
        assert not {"nccl-direct", "mpi-direct"} & set(default_sweep(True, collective)
                                                        + default_sweep(False, collective))


def test_the_summaries_say_nothing_else_is_timed():
    assert rivals.get("nccl-direct").summary.startswith("ncclAllReduce on CuPy's NCCL communicator")
    assert rivals.get("mpi-direct").summary.startswith("mpi4py's Comm.Allreduce(send, recv, op)")
    for name in ("nccl-direct", "mpi-direct"):
        assert "nothing else" in rivals.get(name).summary
    assert plot_style.style_of("nccl-direct")[0] != plot_style.style_of("nccl")[0]


@pytest.mark.parametrize(("name", "op", "dtype", "why"), [
    ("mpi-direct", "max", "float16", None),
    ("mpi-direct", "prod", "int64", None),
    ("mpi-direct", "sum", "bfloat16", "not -d bfloat16: MPI has no bfloat16 type"),
    ("nccl-direct", "min", "bfloat16", None),
    ("nccl-direct", "sum", "float64", None),
])
def test_what_the_direct_rows_refuse_from_the_options(name, op, dtype, why):
    got = rivals.refusal(name, op, dtype, nodes=4)
    assert got is None if why is None else why in got


# -- the default baseline ------------------------------------------------------------------------


def test_the_default_baseline_is_the_direct_call():
    assert baseline.choose(None, True, (AR,)) == "nccl-direct"
    assert baseline.choose(None, False, (AR,)) == "mpi-direct"
    # the direct rows have no reduce-scatter nor all-gather: one baseline serves the run
    assert baseline.choose(None, True, (AR, RS)) == "nccl"
    assert baseline.choose(None, False, (AG,)) == "mpi"
    assert baseline.choose("nccl", True, (AR,)) == "nccl"  # --baseline NAME still picks
    assert baseline.choose("nccl-direct", True, (AR,), nodes=2) == "nccl-direct"
    with pytest.raises(BenchError, match="--baseline nccl-direct: has no reduce_scatter.*e.g. nccl\\)"):
        baseline.choose("nccl-direct", True, (AR, RS))
    with pytest.raises(BenchError, match="--baseline mpi-direct: cannot reduce the GPU arrays"):
        baseline.choose("mpi-direct", True, (AR,))
    with pytest.raises(BenchError, match="--baseline nccl-direct: cannot reduce the host arrays"):
        baseline.choose("nccl-direct", False, (AR,))


def test_the_default_gives_way_to_the_row_it_wraps_where_the_sweep_lacks_it():
    algos, base = baseline.arrange({AR: ["nccl", "ring"]}, "nccl-direct", asked=False)
    assert (algos, base) == ({AR: ["nccl", "ring"]}, "nccl")  # --algo nccl,ring
    algos, base = baseline.arrange({AR: ["ring"]}, "mpi-direct", asked=False)
    assert (algos, base) == ({AR: ["ring"]}, "")  # neither: no speed-ups
    algos, base = baseline.arrange({AR: ["mpi-direct", "mpi", "ring"]}, "mpi-direct", asked=False)
    assert (algos, base) == ({AR: ["mpi-direct", "mpi", "ring"]}, "mpi-direct")
    algos, base = baseline.arrange({AR: ["ring"]}, "nccl-direct", asked=True)
    assert (algos, base) == ({AR: ["nccl-direct", "ring"]}, "nccl-direct")  # asked: added


def test_a_direct_baseline_that_cannot_run_falls_back_after_the_rivals_start():
    skipped = {"nccl-direct": "CuPy was built without NCCL"}
    sweep = {AR: ["nccl-direct", "nccl", "torch", "ring"]}
    assert baseline.fall_back("nccl-direct", False, skipped, sweep) == (sweep, "nccl")
    # the fallback moves right after the skipped row, before every other row
    algos, base = baseline.fall_back("nccl-direct", False, skipped,
                                     {AR: ["nccl-direct", "torch", "nccl", "ring"]})
    assert (algos, base) == ({AR: ["nccl-direct", "nccl", "torch", "ring"]}, "nccl")
    assert baseline.fall_back("nccl-direct", True, skipped, sweep) == (sweep, "nccl-direct")  # asked
    assert baseline.fall_back("nccl-direct", False, {}, sweep) == (sweep, "nccl-direct")  # it runs
    lacking = {AR: ["nccl-direct", "ring"]}
    assert baseline.fall_back("nccl-direct", False, skipped, lacking) == (lacking, "nccl-direct")
    assert baseline.fall_back("torch", False, {"torch": "x"}, sweep) == (sweep, "torch")


@pytest.mark.parametrize(("base", "asked", "gpu", "collectives", "skipped", "algos", "words"), [
    ("nccl-direct", False, True, (AR,), {}, ["nccl-direct", "nccl"], ""),
    ("nccl", False, True, (AR,), {"nccl-direct": "x"}, ["nccl-direct", "nccl"],
     "nccl-direct cannot run here"),
    ("nccl", False, True, (AR, RS), {}, ["nccl-direct", "nccl"], "nccl-direct has no reduce_scatter"),
    ("mpi", False, False, (AR,), {}, ["mpi", "ring"], "the sweep leaves out mpi-direct"),
    ("mpi", True, False, (AR,), {}, ["mpi", "ring"], ""),  # asked for: no excuse needed
    ("torch", False, True, (AR,), {}, ["torch"], ""),
])
def test_the_banner_says_why_the_baseline_is_not_the_direct_row(base, asked, gpu, collectives,
                                                                 skipped, algos, words):
    assert baseline.note(base, asked, gpu, collectives, skipped, algos) == words


# -- the agreement check in timed calls ----------------------------------------------------------


def test_the_agreement_check_is_timed_by_default_and_off_on_request(capsys):
    assert parse_args([]).time_agreement is True
    assert parse_args(["--time-agreement"]).time_agreement is True
    assert parse_args(["--no-time-agreement"]).time_agreement is False
    with pytest.raises(SystemExit):
        parse_args(["--time-agreement", "--no-time-agreement"])
    assert "not allowed with argument" in capsys.readouterr().err
    assert "--no-time-agreement" in build_parser().format_help()
    from mpiring.bench.tune import parse_args as tune_args

    assert tune_args([]).bench.time_agreement is True  # the tuner times as users call: the check on


class CheckRecordingComm:
    """A communicator whose Allreduce copies send to recv and records ``check`` at each call."""

    def __init__(self, check: bool) -> None:
        self.check = check
        self.seen: list[bool] = []

    def stats(self) -> mpiring.CallStats:  # calls not counted: the bench's replayed share is None
        return mpiring.CallStats(0, 0, 0, False)

    def Allreduce(self, send, recv, op=None, *, algorithm=None, batches=None):  # noqa: N802
        self.seen.append(self.check)
        if send is not MPI.IN_PLACE:
            recv[...] = send[: recv.size]


@serial
@pytest.mark.parametrize(("default", "timed", "want"), [
    (True, True, True),     # the communicator's default, as a user gets it
    (True, False, False),   # --no-time-agreement
    (False, True, False),   # MPIRING_CHECK=0: the bench follows the communicator
])
def test_the_timed_calls_run_with_the_communicators_check(default, timed, want):
    from mpiring.bench.arrays import make_space
    from mpiring.bench.collectives import SizeBuffers
    from mpiring.bench.data import InputGenerator
    from mpiring.bench.measure import Point

    space = make_space(False, np.dtype(np.float32), 1)
    gen = InputGenerator(np, "sum", np.dtype(np.float32), 1, seed=1)
    sb = SizeBuffers(space, gen, 64, rank=0, cache=True)
    comm = CheckRecordingComm(default)
    m = PointMeasurer(MPI.COMM_SELF, comm, space, TimingPolicy(budget_s=0.002, reps=2), check=1,
                      time_agreement=timed, mpi_op=MPI.SUM, in_place=MPI.IN_PLACE)
    out = m.measure(Point(256, 64, "float32", "sum", "mpi", None, "out"), sb)
    assert out.status == "ok", out.note
    assert comm.seen[:2] == [True, True]  # the checked calls (and the odd count): always on
    assert set(comm.seen[2:]) == {want}  # the timed ones
    assert comm.check is default  # restored


# -- the banner ----------------------------------------------------------------------------------


def banner_sweep(algos, base="nccl-direct", mode="gpu", skipped=None, notes=None, time_agreement=True,
                 check=True, asked=None, collectives=(AR,)):
    opts = SimpleNamespace(time_agreement=time_agreement, baseline=asked)
    return SimpleNamespace(algos=list(algos), baseline=base, mode=mode, skipped=skipped or {},
                           rivals=SimpleNamespace(notes=notes or {}), opts=opts,
                           comm=SimpleNamespace(check=check), collectives=list(collectives))


def test_each_baseline_row_says_what_its_time_includes():
    sw = banner_sweep(["nccl-direct", "nccl", "nccl-ring", "ring"],
                      notes={"nccl-direct": "CuPy 13.6.0, libnccl 2.27.3"})
    lines = summary._through_lines(sw) + summary._rival_lines(sw)
    assert lines == [
        ("row", "nccl: ncclAllReduce through mpiring.Communicator; its time includes mpiring's "
                "per-call work (argument checks, dispatch, the agreement check)"),
        ("row", "nccl-ring: the paper's baseline: ring of ncclSend/ncclRecv in groups + a fold "
                "kernel, one stream through mpiring.Communicator; its time includes mpiring's "
                "per-call work (argument checks, dispatch, the agreement check)"),
        ("rival", f"nccl-direct: {rivals.get('nccl-direct').summary} [CuPy 13.6.0, libnccl 2.27.3]")]
    assert "nothing else" in lines[-1][1]
    sw = banner_sweep(["mpi-direct", "mpi"], base="mpi-direct", mode="host", time_agreement=False)
    assert summary._through_lines(sw) == [
        ("row", "mpi: MPI.Allreduce through mpiring.Communicator; its time includes mpiring's "
                "per-call work (argument checks, dispatch; agreement check off)")]


def test_the_banner_names_the_baseline_and_why_it_is_the_fallback():
    sw = banner_sweep(["nccl-direct", "nccl", "ring"])
    assert summary._baseline_text(sw) == " (speed-up vs nccl-direct)"
    sw = banner_sweep(["nccl-direct", "nccl", "ring"], base="nccl",
                      skipped={"nccl-direct": "CuPy was built without NCCL"})
    assert summary._baseline_text(sw) == " (speed-up vs nccl; nccl-direct cannot run here)"
    sw = banner_sweep(["nccl-direct", "ring"], asked="nccl-direct",
                      skipped={"nccl-direct": "CuPy was built without NCCL"})
    assert "which cannot run here: no speed-ups" in summary._baseline_text(sw)


@pytest.mark.parametrize(("time_agreement", "check", "words"), [
    (True, True, "mpiring's rows timed as the communicator runs them: per-call agreement check on "
                 "(--no-time-agreement: off)"),
    (False, True, "mpiring's per-call agreement check off in timed loops (the checked calls keep it)"),
    (True, False, "off in timed loops (the communicator's: MPIRING_CHECK)"),
])
def test_the_reported_line_says_whether_the_check_is_timed(time_agreement, check, words):
    sw = banner_sweep(["mpi"], time_agreement=time_agreement, check=check)
    assert summary.agreement_timed(sw) is (time_agreement and check)
    assert words in summary._agreement_text(sw)


# -- nccl-direct's runtime, on a fake CuPy ---------------------------------------------------------


def test_nccl_version_codes():
    assert nccl_version(22703) == (2, 27, 3) and nccl_version(21005) == (2, 10, 5)
    assert nccl_version(2804) == (2, 8, 4)


def test_nccl_type_and_op_codes():
    with fake_cupy(bfloat16=False) as nccl:
        assert nccl_codes(nccl, "float16", "sum", (2, 27, 3)) == (6, 0)
        assert nccl_codes(nccl, "float32", "prod", None) == (7, 1)
        assert nccl_codes(nccl, "float64", "max", None) == (8, 2)
        assert nccl_codes(nccl, "int32", "min", None) == (2, 3)
        assert nccl_codes(nccl, "int64", "sum", None) == (4, 0)
        assert nccl_codes(nccl, "bfloat16", "sum", (2, 10, 0)) == (9, 0)  # libnccl has it
        with pytest.raises(InvalidArgumentError, match="no NCCL_BFLOAT16 and libnccl 2.9.9"):
            nccl_codes(nccl, "bfloat16", "sum", (2, 9, 9))
        with pytest.raises(InvalidArgumentError, match="no type for uint8"):
            nccl_codes(nccl, "uint8", "sum", None)
    with fake_cupy() as nccl:
        assert nccl_codes(nccl, "bfloat16", "max", None) == (9, 2)  # CuPy's enum


def test_without_cupy_nccl_direct_says_so(monkeypatch):
    import importlib.util

    if importlib.util.find_spec("cupy") is None:
        why = NcclDirect().available()  # for real: no CuPy on this machine
        assert why is not None and why.startswith("cupy is not installed") and "nvidia-nccl" in why
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cupy" else real(name, *a))
    assert NcclDirect().available().startswith("cupy is not installed (install the extra")


def test_nccl_direct_says_why_it_cannot_run_with_this_cupy():
    with fake_cupy(available=False):
        assert NcclDirect().available().startswith("CuPy was built without NCCL, or found no libnccl")
    with fake_cupy(version=None):
        why = NcclDirect().available()
        assert why.startswith("CuPy cannot load libnccl: RuntimeError: libnccl.so.2")
    with fake_cupy():
        rival = NcclDirect()
        assert rival.available() is None and rival.version == (2, 27, 3)


@serial
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize(("op", "dtype"), [("sum", "float32"), ("max", "int64"), ("prod", "float16")])
def test_nccl_direct_calls_allreduce_on_raw_pointers_and_the_current_stream(in_place, op, dtype):
    with fake_cupy():
        rival = NcclDirect()
        assert rival.available() is None
        rival.setup(MPI.COMM_SELF, ctx(op, dtype))
        assert rival.describe() == "CuPy 0.0.0+fake, libnccl 2.27.3"
        b = bufs(16, dtype)
        call = rival.prepare(b, in_place)
        (comm,) = FakeNcclCommunicator.made
        if in_place:
            b.recv[...] = b.send
        call()
        send, recv, count, datatype, nccl_op, stream = comm.calls[-1]
        assert recv == b.recv.ctypes.data and count == 16 and stream == STREAM
        assert send == (recv if in_place else b.send.ctypes.data)
        assert (datatype, nccl_op) == nccl_codes(sys.modules["cupy.cuda.nccl"], dtype, op, None)
        assert (b.recv == b.send).all()  # one rank: the allreduce is the input
        rival.close()
        assert EVENTS == [("nccl-direct", "synchronize"), ("nccl-direct", "destroy")]
        rival.close()  # once only


@serial
def test_a_rival_set_starts_nccl_direct_or_skips_it_with_the_reason():
    spec = nccl_direct_on_host()
    with registered(spec), fake_cupy():
        ps = RivalSet()
        assert ps.start(MPI.COMM_SELF, [spec.name], ctx()) == {}
        assert ps.notes == {spec.name: "CuPy 0.0.0+fake, libnccl 2.27.3"}
        assert ps.capture(spec.name) is None  # captured by the bench's CuPy capture
        ps.close()
    with registered(spec), fake_cupy(bfloat16=False, version=20904):
        skipped = RivalSet().start(MPI.COMM_SELF, [spec.name], ctx(dtype="bfloat16"))
        assert "takes int32/int64/float16/float32/float64 only" in skipped[spec.name]
    with registered(rivals.RivalSpec("fake-bf16", "x", NcclDirect, memory=rivals.HOST)), \
            fake_cupy(bfloat16=False, version=20904):
        skipped = RivalSet().start(MPI.COMM_SELF, ["fake-bf16"], ctx(dtype="bfloat16"))
        assert skipped["fake-bf16"].startswith("set-up failed: CuPy's nccl module has no NCCL_BFLOAT16")


# -- mpi-direct's runtime --------------------------------------------------------------------------


@serial
@pytest.mark.parametrize("in_place", [False, True])
def test_mpi_direct_is_a_plain_allreduce_on_its_own_communicator(in_place):
    rival = MpiDirect()
    assert rival.available() is None
    rival.setup(MPI.COMM_SELF, ctx("max", "int32"))
    assert rival.comm is not MPI.COMM_SELF and rival.op is MPI.MAX
    assert rival.describe().startswith("mpi4py ")
    b = bufs(8, "int32", 5)
    if in_place:
        b.recv[...] = b.send
    rival.prepare(b, in_place)()
    assert (b.recv == 5).all()
    rival.close()
    assert rival.comm is None


def origin(value) -> str:
    """The module a value held by a call comes from (a bound method: its object's class's)."""
    owner = getattr(value, "__self__", None)
    if owner is not None and not isinstance(owner, type(sys)):
        return type(owner).__module__
    return getattr(value, "__module__", None) or type(value).__module__


@serial
def test_each_direct_call_holds_nothing_of_mpiring():
    """A call is one library call: its closure holds the library's bound method and plain
    values (pointers, counts, codes, arrays), nothing of mpiring (no Communicator, no buffer
    description)."""
    mpi = MpiDirect()
    mpi.setup(MPI.COMM_SELF, ctx())
    held = {origin(c.cell_contents) for c in mpi.prepare(bufs(), in_place=False).__closure__}
    mpi.close()
    with fake_cupy():
        nccl = NcclDirect()
        nccl.available()
        nccl.setup(MPI.COMM_SELF, ctx())
        held |= {origin(c.cell_contents) for c in nccl.prepare(bufs(), in_place=True).__closure__}
        nccl.close()
    assert held and not any(m.startswith("mpiring") for m in held), held
    assert {"mpi4py.MPI", "numpy", "bench_rival_fakes", "builtins"} >= held, held


# -- whole host runs ---------------------------------------------------------------------------------


def run_bench(tmp_path, *args):
    from mpiring.bench.__main__ import main

    return main(["--host", "-b", "1K", "-e", "4K", "--time-budget", "0.005", "--reps", "2",
                 "--no-plot", "--progress", "off", "--output-dir", str(tmp_path), *args])


def rows_of(tmp_path, name):
    with next(tmp_path.glob(f"{name}_*.csv")).open() as f:
        rows = list(csv.DictReader(f))
    return rows, json.loads(next(tmp_path.glob(f"{name}_*.json")).read_text())["metadata"]


@serial
def test_a_default_host_run_is_against_mpi_direct(tmp_path, capsys):
    status = run_bench(tmp_path, "--placement", "out,in", "--name", "direct")
    out = capsys.readouterr().out
    assert status == 0, out
    rows, meta = rows_of(tmp_path, "direct")
    assert [r["algo"] for r in rows[:4]] == ["mpi-direct", "mpi-direct", "mpi", "mpi"]
    assert {r["baseline"] for r in rows} == {"mpi-direct"} and meta["baseline"] == "mpi-direct"
    for r in rows:
        assert (r["status"], r["check"], r["wrong"]) == ("ok", "OK", "0"), r
    assert meta["settings"]["time_agreement"] is True
    assert meta["rivals"]["mpi-direct"].startswith("mpi4py ")
    text = " ".join(out.split())
    assert "(speed-up vs mpi-direct)" in text
    assert "# row mpi: MPI.Allreduce through mpiring.Communicator; its time includes" in text
    assert "# rival mpi-direct: mpi4py's Comm.Allreduce(send, recv, op)" in text
    assert "per-call agreement check on (--no-time-agreement: off)" in text


@serial
def test_mpi_direct_that_cannot_run_gives_way_to_mpi(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(MpiDirect, "available", lambda self: "no plain MPI here")
    status = run_bench(tmp_path, "--algo", "ring,mpi-direct,mpi", "--name", "fallback",
                       "--no-time-agreement")
    out = capsys.readouterr().out
    assert status == 0, out
    rows, meta = rows_of(tmp_path, "fallback")
    assert [r["algo"] for r in rows[:3]] == ["mpi-direct", "mpi", "ring"]
    assert {r["baseline"] for r in rows} == {"mpi"} and meta["baseline"] == "mpi"
    gone = [r for r in rows if r["algo"] == "mpi-direct"]
    assert {(r["status"], r["note"]) for r in gone} == {("unavailable", "no plain MPI here")}
    assert all(float(r["speedup"]) == 1.0 for r in rows if r["algo"] == "mpi")
    text = " ".join(out.split())
    assert "(speed-up vs mpi; mpi-direct cannot run here)" in text
    assert "# skipped mpi-direct: no plain MPI here" in text
    assert "(argument checks, dispatch; agreement check off)" in text


@serial
def test_nccl_directs_runtime_in_a_whole_run_on_a_fake_cupy(tmp_path, capsys):
    spec = nccl_direct_on_host()
    with registered(spec), fake_cupy():
        status = run_bench(tmp_path, "--algo", f"mpi-direct,{spec.name}", "--baseline", spec.name,
                           "--placement", "out,in", "-o", "max", "-d", "int64", "--name", "fake")
    out = capsys.readouterr().out
    assert status == 0, out
    rows, meta = rows_of(tmp_path, "fake")
    mine = [r for r in rows if r["algo"] == spec.name]
    assert len(mine) == 6 and all((r["status"], r["wrong"]) == ("ok", "0") for r in mine), mine
    assert {r["baseline"] for r in rows} == {spec.name}
    assert meta["rivals"][spec.name] == "CuPy 0.0.0+fake, libnccl 2.27.3"
    assert ("nccl-direct", "destroy") in EVENTS
