"""The bench's rivals without a GPU: the registry, the reasons a rival is skipped (torch and nccl4py
missing for real), multicast kept off, the choices each rival makes, the rival set's agreement,
--baseline (parsing, checks, ratios, order), the banner's lines, and a whole host run with a
fake rival (MPI.Allreduce as a rival): sweep order, CSV columns, ratios, the skip message."""

from __future__ import annotations

import csv
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from bench_rival_fakes import EVENTS, registered, spec
from mpi4py import MPI

from mpiring.bench import baseline, rivals, rowmaker, summary
from mpiring.bench.algorithms import all_names, baseline_first, default_sweep, is_batched
from mpiring.bench.cli import parse_args
from mpiring.bench.command import BenchError
from mpiring.bench.measure import Outcome, Point
from mpiring.bench.rivals import env
from mpiring.bench.rivals.base import RivalContext, missing
from mpiring.bench.rivals.direct_calls import NcclDirect
from mpiring.bench.rivals.nccl_symm import NcclSymm, nccl_too_old
from mpiring.bench.rivals.runtime import RivalSet
from mpiring.bench.rivals.torch_nccl import TorchAllReduce
from mpiring.bench.rivals.torch_session import store_address
from mpiring.bench.rivals.torch_symm import PLANS, TorchSymm, plan
from mpiring.bench.stats import Stats
from mpiring.core.install import pip_install

REAL = ("torch", "torch-symm-1shot", "torch-symm-2shot", "nccl-symm", "nccl-lib")
DIRECT = ("nccl-direct", "mpi-direct")  # the table's nccl and mpi calls, made directly
serial = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")


def ctx(op: str = "sum", dtype: str = "float32", nodes: int = 1) -> RivalContext:
    return RivalContext(max_count=1024, dtype=np.dtype(dtype), op=op, rank=0, size=1, nodes=nodes,
                       timeout=30.0)


# -- the registry ----------------------------------------------------------------------------


def test_the_rivals_are_gpu_bench_rows_not_algorithms_of_the_library():
    from mpiring import algorithms

    assert rivals.names() == DIRECT + REAL and rivals.names(rivals.GPU) == ("nccl-direct", *REAL)
    assert rivals.names(rivals.HOST) == ("mpi-direct",)
    assert not any(n in algorithms.names() for n in DIRECT + REAL)  # not Communicator(algorithm=...)
    assert all(n in all_names() for n in DIRECT + REAL)
    assert not any(is_batched(n) for n in DIRECT + REAL)
    assert all(rivals.get(n).graph_capturable for n in REAL)
    with pytest.raises(ValueError, match="unknown rival 'nope'"):
        rivals.get("nope")


def test_rivals_come_after_the_reference_before_mpirings_rows_allreduce_only():
    gpu = default_sweep(True)
    assert gpu.index("nccl-direct") < gpu.index("nccl") < min(gpu.index(n) for n in REAL)
    assert max(gpu.index(n) for n in REAL) < gpu.index("ring")
    assert not set(REAL) & set(default_sweep(False))  # the host runs one rival: mpi-direct
    assert default_sweep(False)[:2] == ("mpi-direct", "mpi")
    for collective in ("reduce_scatter", "allgather"):
        assert not set(REAL) & set(default_sweep(True, collective))
    assert "torch" in default_sweep(True, nodes=2)  # torch runs across nodes, the others not
    assert not {"torch-symm-1shot", "torch-symm-2shot", "nccl-symm"} & set(default_sweep(True, nodes=2))


@pytest.mark.parametrize(("name", "op", "dtype", "nodes", "why"), [
    ("torch", "max", "int64", 2, None),
    ("nccl-symm", "prod", "float16", 1, None),
    ("torch-symm-1shot", "sum", "bfloat16", 1, None),
    ("torch-symm-1shot", "max", "float32", 1, "reduces with sum only, not -o max: torch.ops.symm_mem"),
    ("torch-symm-2shot", "sum", "float16", 1, "takes float32/bfloat16 only, not -d float16"),
    ("torch-symm-2shot", "sum", "float32", 2, "runs only where every rank is on one node"),
    ("nccl-symm", "sum", "float32", 3, "communicator spans 3"),
])
def test_what_each_rival_refuses_from_the_options(name, op, dtype, nodes, why):
    got = rivals.refusal(name, op, dtype, nodes)
    assert got is None if why is None else why in got


def test_the_summaries_say_what_is_timed():
    assert "copy send -> recv" in rivals.get("torch").summary
    for name in ("torch-symm-1shot", "torch-symm-2shot", "nccl-symm"):
        assert "timed" in rivals.get(name).summary and "copy" in rivals.get(name).summary
    assert "multicast off" in rivals.get("torch-symm-1shot").summary


# -- missing packages, for real ------------------------------------------------------------


def test_without_torch_the_torch_rivals_say_so():
    if "torch" in sys.modules or __import__("importlib").util.find_spec("torch"):
        pytest.skip("torch is installed here")
    for rival in (TorchAllReduce(), TorchSymm("1shot"), TorchSymm("2shot")):
        why = rival.available()
        assert why is not None and why.startswith("torch is not installed") and "CUDA build" in why


def test_without_nccl4py_or_libnccl_nccl_symm_says_so(monkeypatch):
    why = NcclSymm().available()  # here: nccl4py without libnccl, or no nccl4py at all (CI)
    assert why is not None and ("nccl4py" in why) and pip_install("peers") in why
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "nccl" else real(name, *a))
    assert NcclSymm().available().startswith(f"nccl4py is not installed ({pip_install('peers')}")


def test_a_broken_package_quotes_its_error(monkeypatch, tmp_path):
    (tmp_path / "brokenpkg.py").write_text("raise ImportError('libfoo.so: cannot open')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    why = missing("brokenpkg", "reinstall it")
    assert why == "cannot import brokenpkg: ImportError: libfoo.so: cannot open (reinstall it)"
    assert missing("json", "x") is None


def test_nccl_too_old_for_symmetric_windows():
    assert nccl_too_old((2, 26, 5)) == ("libnccl 2.26.5 has no symmetric windows (NCCL >= 2.27): "
                                        "upgrade the nvidia-nccl wheel")
    assert nccl_too_old((2, 27, 3)) is None and nccl_too_old(None) is None


# -- multicast stays off ----------------------------------------------------------------------


def test_multicast_is_turned_off_and_never_on():
    environ: dict[str, str] = {}
    assert env.multicast_off(environ) == []
    assert environ == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    environ = {"NCCL_NVLS_ENABLE": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    notes = env.multicast_off(environ)
    assert environ["NCCL_NVLS_ENABLE"] == "0"
    assert notes == ["NCCL_NVLS_ENABLE=1 overridden to 0: NVLink multicast stays off"]


def test_the_rivals_turn_multicast_off_before_looking_for_their_package(monkeypatch):
    monkeypatch.delenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", raising=False)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    TorchSymm("1shot").available()
    NcclSymm().available()
    NcclDirect().available()
    import os

    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"


# -- each rival's choices ------------------------------------------------------------------------


def test_torch_symm_plans_by_what_torch_has():
    everything = lambda name: True  # noqa: E731
    bare = lambda name: False  # noqa: E731
    assert plan("1shot", everything, 3) == "1shot-fused"
    assert plan("1shot", bare, 4) == "1shot"
    assert plan("2shot", everything, 4) == "2shot-out"
    assert plan("2shot", everything, 3) == "2shot-inplace"  # _out has kernels for 2, 4, 8 only
    assert plan("2shot", bare, 8) == "2shot-inplace"
    assert "recv.copy_(symm)" in PLANS["2shot-inplace"] and "fused" in PLANS["1shot-fused"]
    with pytest.raises(ValueError, match="variant"):
        TorchSymm("3shot")


def test_the_store_is_reached_on_loopback_on_one_host():
    assert store_address(["a", "a", "a"]) == "127.0.0.1"
    assert store_address(["n0", "n0", "n1"]) == "n0"


# -- the rival set -------------------------------------------------------------------------------


@serial
def test_the_real_rivals_are_skipped_with_reasons_here():
    """No GPU, no torch: every real GPU rival is skipped with its one-line reason, nothing set up."""
    ps = RivalSet()
    skipped = ps.start(MPI.COMM_SELF, ("nccl-direct", *REAL), ctx())
    assert set(skipped) == {"nccl-direct", *REAL} and not ps.rivals
    assert all("\n" not in why and why for why in skipped.values())
    if not __import__("importlib").util.find_spec("torch"):
        assert skipped["torch"].startswith("torch is not installed")


@serial
def test_the_rival_set_refuses_starts_and_closes():
    with registered(spec("fake-a"), spec("fake-b", ops=("sum",)), spec("fake-c", setup_fails_on=(0,)),
                    spec("fake-d", missing_on=(0,))):
        ps = RivalSet()
        skipped = ps.start(MPI.COMM_SELF, ["fake-a", "fake-b", "fake-c", "fake-d"], ctx(op="max"))
        assert list(ps.rivals) == ["fake-a"] and ps.notes == {"fake-a": "fakelib 1.0"}
        assert skipped == {"fake-b": "reduces with sum only, not -o max",
                           "fake-c": "set-up failed: no fake fabric here",
                           "fake-d": "fakelib is not installed (pip install fakelib)"}
        assert ps.capture("fake-a") is None  # the bench's own CuPy capture
        ps.close()
        assert ("fake-c", "close") in EVENTS  # a failed set-up releases what it made
        assert EVENTS[-1] == ("fake-a", "close") and not ps.rivals


def test_a_factory_must_make_a_rival():
    with registered(rivals.RivalSpec("fake-x", "x", lambda: object(), memory=rivals.HOST)):
        ps = RivalSet()
        skipped = ps.start(MPI.COMM_SELF, ["fake-x"], ctx())
        assert "its factory made a object, not a Rival" in skipped["fake-x"]
        ps.abandon("fake-x")


def test_torch_rivals_capture_their_own_graphs():
    ps = RivalSet()
    ps.rivals["torch"] = TorchAllReduce()
    ps.rivals["nccl-symm"] = NcclSymm()
    assert ps.capture("torch") is not None and ps.capture("nccl-symm") is None


# -- --baseline -----------------------------------------------------------------------------------


def test_baseline_option():
    assert parse_args([]).baseline is None
    assert parse_args(["--baseline", "Torch-Symm-1shot"]).baseline == "torch-symm-1shot"
    assert "--baseline NAME" in __import__("mpiring.bench.cli", fromlist=["x"]).build_parser().format_help()


@pytest.mark.parametrize("bad", ["auto", "cuda", ""])
def test_bad_baselines_exit_2(bad, capsys):
    with pytest.raises(SystemExit) as err:
        parse_args(["--baseline", bad])
    assert err.value.code == 2 and "unknown baseline" in capsys.readouterr().err


def test_baseline_checks():
    assert baseline.choose(None, True, ("allreduce",)) == "nccl-direct"
    assert baseline.choose(None, False, ("allreduce",)) == "mpi-direct"
    assert baseline.choose("torch", True, ("allreduce",)) == "torch"
    with pytest.raises(BenchError, match="--baseline torch: cannot reduce the host arrays"):
        baseline.choose("torch", False, ("allreduce",))
    with pytest.raises(BenchError, match="--baseline nccl-symm: has no reduce_scatter"):
        baseline.choose("nccl-symm", True, ("allreduce", "reduce_scatter"))
    with pytest.raises(BenchError, match="spans 2 nodes"):
        baseline.choose("torch-symm-2shot", True, ("allreduce",), nodes=2)
    assert baseline.choose("torch", True, ("allreduce",), nodes=2) == "torch"


def test_the_baseline_runs_first_and_is_added_when_asked():
    assert baseline_first(["nccl", "torch", "ring"], "torch") == ["torch", "nccl", "ring"]
    assert baseline_first(["ring"], "") == ["ring"]
    algos, base = baseline.arrange({"allreduce": ["nccl", "ring"]}, "torch", asked=True)
    assert algos == {"allreduce": ["torch", "nccl", "ring"]} and base == "torch"
    algos, base = baseline.arrange({"allreduce": ["ring"]}, "nccl", asked=False)
    assert algos == {"allreduce": ["ring"]} and base == ""  # the default reference not asked for
    algos, base = baseline.arrange({"allreduce": ["nccl", "ring"]}, "nccl", asked=False)
    assert algos == {"allreduce": ["nccl", "ring"]} and base == "nccl"


def test_speedups_are_against_the_chosen_baseline():
    comm = SimpleNamespace(batches_for=lambda *a, **k: None)
    sw = SimpleNamespace(world=SimpleNamespace(size=2), comm=comm, mode="gpu", baseline="torch",
                         dtype=np.dtype(np.float32), rows=[])
    for algo, t in (("torch", 30.0), ("nccl", 20.0), ("torch-symm-1shot", 10.0)):
        p = Point(4096, 1024, "float32", "sum", algo, None, "out")
        stats = Stats(mean=t * 1e-6, std=0.0, min=t * 1e-6, max=t * 1e-6, median=t * 1e-6)
        row = rowmaker.make_row(sw, p, Outcome("ok", "OK", stats=stats, wrong=0))
        row.speedup = rowmaker.speedup(sw, row)
        sw.rows.append(row)
    assert [(r.algo, r.baseline, r.speedup) for r in sw.rows] == [
        ("torch", "torch", 1.0), ("nccl", "torch", pytest.approx(1.5)),
        ("torch-symm-1shot", "torch", pytest.approx(3.0))]
    assert sw.rows[2].batches_used is None  # a rival has no mini-batches
    lines = summary.summary_lines(sw.rows, "torch")
    assert any("best 3.00x vs torch" in line for line in lines)


# -- the banner -----------------------------------------------------------------------------------


def test_the_banner_names_what_each_rival_times_or_why_it_is_skipped():
    ps = SimpleNamespace(notes={"torch": "torch 2.9.0, its NCCL 2.27.3"})
    sw = SimpleNamespace(algos=["nccl", "torch", "nccl-symm", "ring"], rivals=ps, baseline="torch",
                         skipped={"nccl-symm": "nccl4py is not installed (pip install ...)"},
                         opts=SimpleNamespace(baseline="torch"), mode="gpu",
                         collectives=["allreduce"])
    assert summary._rival_lines(sw) == [
        ("rival", f"torch: {rivals.get('torch').summary} [torch 2.9.0, its NCCL 2.27.3]"),
        ("skipped", "nccl-symm: nccl4py is not installed (pip install ...)")]
    assert summary._baseline_text(sw) == " (speed-up vs torch)"
    sw.baseline = "nccl-symm"
    assert "cannot run here: no speed-ups" in summary._baseline_text(sw)


# -- a whole run, on the host, with a fake rival ---------------------------------------------------


def run_bench(tmp_path, *args):
    from mpiring.bench.__main__ import main

    return main(["--host", "-b", "1K", "-e", "4K", "--time-budget", "0.005", "--reps", "2",
                 "--no-plot", "--progress", "off", "--output-dir", str(tmp_path), *args])


@serial
def test_a_run_with_a_rival_as_baseline(tmp_path, capsys):
    with registered(spec("fake-mpi"), spec("fake-gone", missing_on=(0,))):
        status = run_bench(tmp_path, "--algo", "ring,fake-gone,mpi", "--baseline", "fake-mpi",
                           "--placement", "out,in", "--name", "rivals")
    out = capsys.readouterr().out
    assert status == 0, out
    assert "speed-up vs fake-mpi" in out and "vs fake-\u2026" not in out  # banner, whole header
    assert "# skipped     fake-gone: fakelib is not installed (pip install fakelib)" in out
    assert "# rival       fake-mpi: MPI.Allreduce as a rival (fake-mpi) [fakelib 1.0]" in out
    with next(tmp_path.glob("rivals_*.csv")).open() as f:
        rows = list(csv.DictReader(f))
    header = list(rows[0])
    assert header.index("speedup") < header.index("baseline")
    # the baseline first at every size (added: --algo left it out), then the mode's order
    order = [(int(r["size_bytes"]), r["algo"], r["placement"]) for r in rows]
    sizes = (1024, 2048, 4096)
    want = [(s, a, p) for s in sizes for a in ("fake-mpi", "mpi", "fake-gone", "ring")
            for p in ("out", "in")]
    assert order == want
    by = {(int(r["size_bytes"]), r["algo"], r["placement"]): r for r in rows}
    for (s, a, p), r in by.items():
        assert r["baseline"] == "fake-mpi"
        if a == "fake-gone":
            assert (r["status"], r["time_us"], r["note"]) == ("unavailable", "", "fakelib is not "
                                                              "installed (pip install fakelib)")
            continue
        assert (r["status"], r["check"], r["wrong"]) == ("ok", "OK", "0"), r
        base = float(by[(s, "fake-mpi", p)]["time_us"])
        assert float(r["speedup"]) == pytest.approx(base / float(r["time_us"]))
    meta = json.loads(next(tmp_path.glob("rivals_*.json")).read_text())["metadata"]
    assert meta["baseline"] == "fake-mpi"
    assert meta["rivals"] == {"fake-mpi": "fakelib 1.0",
                             "fake-gone": "skipped: fakelib is not installed (pip install fakelib)"}
    assert EVENTS[0] == ("fake-mpi", "setup max_count=1024 op=sum") and EVENTS[-1][1] == "close"


@serial
def test_a_rival_that_refuses_a_size_is_na_and_one_that_errs_is_dropped(tmp_path, capsys):
    with registered(spec("fake-small", refuse_below=512), spec("fake-bad", fail_from=512)):
        status = run_bench(tmp_path, "--algo", "mpi,fake-small,fake-bad", "--name", "faults")
    out = capsys.readouterr().out
    assert status == 2, out  # a point raised an error
    with next(tmp_path.glob("faults_*.csv")).open() as f:
        rows = {(int(r["size_bytes"]), r["algo"]): r for r in csv.DictReader(f)}
    assert rows[(1024, "fake-small")]["status"] == "inapplicable"  # 256 elements: refused
    assert rows[(2048, "fake-small")]["status"] == "ok"
    assert rows[(1024, "fake-bad")]["status"] == "ok"
    assert rows[(2048, "fake-bad")]["status"] == "error"  # 512 elements: it raises
    assert "injected rival failure" in rows[(2048, "fake-bad")]["note"]
    assert rows[(4096, "fake-bad")]["status"] == "unavailable"  # not tried again
    assert rows[(4096, "fake-bad")]["note"] == "stopped after an error at 2 KiB"
    assert all(rows[(s, "mpi")]["status"] == "ok" for s in (1024, 2048, 4096))
    assert "rebuilding the communicator" not in out  # mpiring's did not take part


@serial
def test_baseline_errors_end_the_run_cleanly(tmp_path, capsys):
    status = run_bench(tmp_path, "--baseline", "torch")
    assert status == 3 and "--baseline torch: cannot reduce the host arrays" in capsys.readouterr().err
    status = run_bench(tmp_path, "--algo", "torch")
    assert status == 3 and "--algo torch: reduces GPU arrays only" in capsys.readouterr().err


# -- graph capture: the bench's, or a rival's own -------------------------------------------------


class FakeStream:
    def __init__(self, log):
        self.log, self.ptr = log, 1234

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self):
        self.log.append("begin")

    def end_capture(self):
        self.log.append("end")
        return SimpleNamespace(launch=lambda stream: self.log.append("launch"))


def graph_measurer(log, launches=3):
    from mpiring.bench.measure import PointMeasurer, TimingPolicy

    cuda = SimpleNamespace(Stream=lambda non_blocking: FakeStream(log))
    timer = SimpleNamespace(start=lambda: None, stop=lambda: 6e-6)
    space = SimpleNamespace(cp=SimpleNamespace(cuda=cuda), timer=lambda: timer,
                            synchronize=lambda: None)
    world = SimpleNamespace(Barrier=lambda: None)
    return PointMeasurer(world, None, space, TimingPolicy(), check=0, time_agreement=False,
                         mpi_op=None, in_place=None, graph=True, graph_launches=launches)


def test_the_bench_captures_k_calls_after_one_outside():
    log: list[str] = []
    m = graph_measurer(log)
    assert m._timed(lambda: log.append("call"), 2) == pytest.approx(1e-6)  # 6 us / (2 x 3)
    assert log == ["call", "begin", "call", "call", "end", "launch", "launch", "launch", "launch"]


def test_a_rival_captures_its_own_graph_and_the_bench_replays_it():
    log: list[str] = []
    m = graph_measurer(log, launches=2)

    def capture(stream, call, k):
        log.append(f"rival capture of {k} on {stream.ptr}")
        return SimpleNamespace(launch=lambda s: log.append("replay"))

    m._capture = capture
    m._timed(lambda: None, 5)
    assert log == ["rival capture of 5 on 1234", "replay", "replay", "replay"]  # warm + 2 timed
