"""GPU or host, decided on purpose: mpiring.cuda keeps CuPy's import error (a CuPy that is
installed but cannot load is simulated by an import hook that fails as a missing libcudart
does), the visible-GPU evidence, and mpiring.bench.mode's decision over ranks; then the bench
and tune commands on one rank with the probe's answer replaced."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mpi4py import MPI

import mpiring
from mpiring import cuda
from mpiring.bench import mode
from mpiring.bench.mode import Mode, ModeError, RankProbe, check_algorithms, decide
from mpiring.core.install import pip_install

LIBCUDART = "libcudart.so.12: cannot open shared object file: No such file or directory"
serial = pytest.mark.skipif(MPI.COMM_WORLD.size > 1, reason="serial run")


class BrokenCupy(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An installed ``cupy`` whose import fails the way a missing CUDA runtime makes it fail."""

    def find_spec(self, name, path=None, target=None):
        if name == "cupy":
            return importlib.machinery.ModuleSpec("cupy", self, origin="/fake/cupy/__init__.py")
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        raise ImportError(LIBCUDART)


@pytest.fixture
def broken_cupy(monkeypatch):
    """CuPy installed but failing to load, for this test only (the probe re-runs after)."""
    for name in [m for m in sys.modules if m == "cupy" or m.startswith("cupy.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [BrokenCupy(), *sys.meta_path])
    cuda.gpu_status.cache_clear()
    yield
    cuda.gpu_status.cache_clear()


def test_an_installed_cupy_that_fails_to_load_keeps_its_error(broken_cupy):
    with pytest.warns(RuntimeWarning, match="CuPy is installed but failed to load"):
        status = cuda.gpu_status()
    assert not status.usable and not cuda.available()
    assert status.load_error == f"ImportError: {LIBCUDART}"
    reason = cuda.unavailable_reason()
    assert reason.startswith(f"CuPy is installed but failed to load: ImportError: {LIBCUDART}")
    assert "install the extra of your CUDA major" in reason and pip_install("cuda12") in reason
    assert pip_install("cuda13") in reason


def test_the_probe_warns_once(broken_cupy, recwarn):
    cuda.available()
    cuda.available()
    cuda.unavailable_reason()
    assert len([w for w in recwarn if "failed to load" in str(w.message)]) == 1


def test_a_missing_cupy_is_no_warning(monkeypatch, recwarn):
    monkeypatch.setitem(sys.modules, "cupy", None)  # find_spec says: not installed
    cuda.gpu_status.cache_clear()
    try:
        assert not cuda.available()
        assert cuda.unavailable_reason().startswith("CuPy is not installed")
        assert not [w for w in recwarn if "mpiring" in str(w.message)]
    finally:
        cuda.gpu_status.cache_clear()


@serial
def test_gpu_true_shows_the_import_error(broken_cupy):
    """Communicator(gpu=True) raises, and the warning before it quotes CuPy's error."""
    with pytest.warns(RuntimeWarning, match="libcudart.so.12"), \
            pytest.raises(mpiring.UnavailableError, match="gpu=True"):
        mpiring.Communicator(MPI.COMM_WORLD, gpu=True, timeout=30)


@pytest.mark.parametrize(("value", "hidden"), [("", True), ("-1", True), ("-1,0", True),
                                               ("NoDevFiles", True), ("0", False)])
def test_cuda_visible_devices_can_hide_every_gpu(monkeypatch, value, hidden):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
    monkeypatch.setattr(cuda.glob, "glob", lambda pattern: ["/dev/nvidia0", "/dev/nvidiactl"])
    assert (cuda.visible_gpus() == "") is hidden
    if not hidden:
        assert cuda.visible_gpus() == "1 NVIDIA device file(s): /dev/nvidia0"


def test_visible_gpus_without_device_files_asks_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(cuda.glob, "glob", lambda pattern: ["/dev/nvidiactl"])
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-1)'\n"
                   "echo 'GPU 1: NVIDIA H200 (UUID: GPU-2)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert cuda.visible_gpus() == "nvidia-smi -L lists 2 GPU(s)"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed'\nexit 9\n")
    assert cuda.visible_gpus() == ""
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert cuda.visible_gpus() == ""


BROKEN = RankProbe(False, "CuPy is installed but failed to load: ImportError: x", "/dev/nvidia0")
NO_GPU = RankProbe(False, "CuPy is not installed", "")
GOOD = RankProbe(True)


def test_decisions():
    assert decide("auto", [GOOD, GOOD]) == Mode(True)
    assert decide("gpu", [GOOD]) == Mode(True)
    host = decide("auto", [NO_GPU, NO_GPU])
    assert not host.gpu and host.reason == "no GPU (CuPy is not installed)"
    assert host.note == "no GPU (CuPy is not installed): benchmarking the host transport " \
                        "against MPI.Allreduce"
    assert not decide("host", []).gpu and decide("host", []).reason == "--host was given"
    assert decide("auto", [GOOD]).note == ""
    with pytest.raises(ModeError, match=r"this machine has GPUs \(rank 1: /dev/nvidia0\) but "
                                        r"ranks 0, 1 cannot use them: rank 1: CuPy is installed"):
        decide("auto", [NO_GPU, BROKEN])
    with pytest.raises(ModeError, match="pass --host"):
        decide("auto", [BROKEN])
    with pytest.raises(ModeError, match="rank 1 cannot use them"):  # a rank without its GPU
        decide("auto", [GOOD, NO_GPU])
    with pytest.raises(ModeError, match="--gpu: rank 0 cannot use a GPU: CuPy is not installed"):
        decide("gpu", [NO_GPU, GOOD])
    with pytest.raises(ModeError, match="--gpu: ranks 0, 1 cannot use a GPU: rank 0: CuPy is not"):
        decide("gpu", [NO_GPU, NO_GPU])


probes = st.lists(st.sampled_from([BROKEN, NO_GPU, GOOD]), min_size=1, max_size=6)


@given(probes, st.sampled_from(["auto", "gpu"]))
def test_decision_rules(ranks, wanted):
    """GPUs only when every rank has one; a host run only when no rank shows a GPU."""
    try:
        got = decide(wanted, ranks)
    except ModeError:
        assert not all(p.usable for p in ranks)
        assert wanted == "gpu" or any(p.usable or p.visible for p in ranks)
        return
    assert got.gpu == all(p.usable for p in ranks)
    if not got.gpu:
        assert wanted == "auto" and not any(p.usable or p.visible for p in ranks)


def test_algorithms_of_the_wrong_memory_are_errors():
    check_algorithms(None, False, ("mpi", "ring", "auto"), "")
    check_algorithms(("ring",), False, ("mpi", "ring", "auto"), "")
    with pytest.raises(ModeError, match=r"--algo nccl: reduces GPU arrays only, and this run "
                                        r"benchmarks host arrays \(no GPU \(why\)\)"):
        check_algorithms(("ring", "nccl"), False, ("mpi", "ring", "auto"), "no GPU (why)")
    with pytest.raises(ModeError, match="--algo mpi: reduces host arrays only.*add --host"):
        check_algorithms(("mpi",), True, ("nccl", "ring"), "")


@serial
@pytest.mark.parametrize(("probe", "argv", "message"), [
    (BROKEN, [], "CuPy is installed but failed to load"),
    (NO_GPU, ["--gpu"], "--gpu: rank 0 cannot use a GPU"),
    (NO_GPU, ["--algo", "nccl"], "--algo nccl: reduces GPU arrays only"),
    (NO_GPU, ["-G", "1"], "-G/--graph needs GPUs"),
])
def test_the_bench_refuses_instead_of_benchmarking_the_host(monkeypatch, tmp_path, capsys, probe,
                                                            argv, message):
    from mpiring.bench.__main__ import main

    monkeypatch.setattr(mode, "probe_this_rank", lambda: probe)
    status = main(["-b", "1K", "-e", "1K", "--output-dir", str(tmp_path), "--progress", "off",
                   *argv])
    assert status == 3 and message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@serial
def test_tune_falls_back_to_the_host_without_gpus(monkeypatch, tmp_path, capsys):
    """Its help promises the host transport on a machine without GPUs: no --host needed."""
    from mpiring.auto.table import load
    from mpiring.bench import tune

    monkeypatch.setattr(mode, "probe_this_rank", lambda: NO_GPU)
    path = tmp_path / "t.json"
    status = tune.main(["-b", "1K", "-e", "4K", "--time-budget", "0.003", "--reps", "2",
                        "-o", str(path), "--progress", "off"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "graph" not in captured.err
    assert load(path).tables == {1: ((None, "ring"),)}
    assert "no GPU (CuPy is not installed)" in captured.out


class DeviceErrorCupy:
    """A CuPy that imports but whose runtime cannot reach a device (a driver too old)."""

    class cuda:  # noqa: N801 - mirrors cupy.cuda
        class runtime:  # noqa: N801
            @staticmethod
            def getDeviceCount():  # noqa: N802
                raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is "
                                   "insufficient for CUDA runtime version")


@pytest.mark.parametrize("seen", ["1 NVIDIA device file(s): /dev/nvidia0", ""])
def test_a_cupy_that_cannot_reach_a_device_warns_where_gpus_are_visible(monkeypatch, recwarn,
                                                                        seen):
    monkeypatch.setitem(sys.modules, "cupy", DeviceErrorCupy)
    monkeypatch.setattr(cuda.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(cuda, "visible_gpus", lambda: seen)
    cuda.gpu_status.cache_clear()
    try:
        assert not cuda.available()
        reason = cuda.unavailable_reason()
        assert "cannot reach a CUDA device: RuntimeError: cudaErrorInsufficientDriver" in reason
        assert "install the extra of your CUDA major" in reason
        warned = [w for w in recwarn if "GPUs unusable" in str(w.message)]
        assert len(warned) == (1 if seen else 0)
    finally:
        cuda.gpu_status.cache_clear()
