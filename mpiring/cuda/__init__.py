"""The GPU toolkit below the transports and backends: device binding, the IPC staging and its
layout, stream memory operations, kernels (sources in ``csrc/``), the status block and the
watchdog. Nothing here imports ``transports``, ``backends``, ``pipeline`` or ``algorithms``.

Importing this package never imports CuPy. Whether the GPU path can run, and why not:

* :func:`available`: CuPy imports and sees at least one CUDA device.
* :func:`unavailable_reason`: why not, with CuPy's own import error kept ("CuPy is installed but
  failed to load: <error>; install the extra of your CUDA major: ...").
* :func:`visible_gpus`: whether this machine shows NVIDIA GPUs at all, found without CuPy, so
  that a broken install on a GPU machine can be told from a machine without GPUs.

CuPy is probed once per process. A CuPy that is installed but fails to load, or that loads but
cannot reach the GPUs this machine shows, also raises a :class:`RuntimeWarning` (once), so
that ``Communicator()`` on such a machine does not fall back to host arrays in silence.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import warnings
from dataclasses import dataclass

from ..core.install import CUDA_EXTRAS, cuda_choices, pip_install
from .resources import live_resources

__all__ = ["GpuStatus", "available", "gpu_status", "live_resources", "unavailable_reason",
           "visible_gpus"]

# The CuPy wheels mpiring's extras install, by CUDA major.
CUPY_DISTRIBUTIONS = ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")
NVIDIA_SMI_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class GpuStatus:
    """What the probe found: ``usable`` GPUs, or ``reason`` why not; ``load_error`` is CuPy's
    import error as text ("" when CuPy imported, or is not installed)."""

    usable: bool
    reason: str = ""
    load_error: str = ""


def available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    return gpu_status().usable


def unavailable_reason() -> str:
    """Why :func:`available` is False ("" when it is True), naming the remedy."""
    return gpu_status().reason


@functools.cache
def gpu_status() -> GpuStatus:
    """Probe CuPy once: import it, count the CUDA devices; keep the error of either step."""
    try:
        installed = importlib.util.find_spec("cupy") is not None
    except (ImportError, ValueError):  # a broken parent package or a half-imported module
        installed = True
    if not installed:
        return GpuStatus(False, "CuPy is not installed; for GPUs install the extra of your CUDA "
                                f"major: {install_hint()}")
    try:
        import cupy
    except Exception as err:  # ImportError (missing libcudart, wrong CUDA major), OSError, ...
        error = f"{type(err).__name__}: {err}".strip()
        reason = (f"CuPy is installed but failed to load: {error}; install the extra of your "
                  f"CUDA major: {install_hint()}")
        warnings.warn(f"mpiring: GPUs unusable: {reason}", RuntimeWarning, stacklevel=2)
        return GpuStatus(False, reason, error)
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as err:  # CUDARuntimeError: no driver, driver too old, no device
        reason = (f"CuPy loaded but cannot reach a CUDA device: {type(err).__name__}: {err}"
                  f"{_hidden_note()}; if the driver is older than CuPy's CUDA, install the extra "
                  f"of your CUDA major: {install_hint()}")
        seen = visible_gpus()
        if seen:  # GPUs are there: a silent fall-back to host arrays would hide a broken install
            warnings.warn(f"mpiring: GPUs unusable ({seen}): {reason}", RuntimeWarning,
                          stacklevel=2)
        return GpuStatus(False, reason)
    if count < 1:
        return GpuStatus(False, f"CuPy loaded but sees no CUDA device{_hidden_note()}")
    return GpuStatus(True)


def _hidden_note() -> str:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "" if value is None else f" (CUDA_VISIBLE_DEVICES={value!r})"


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA version the installed NVIDIA driver supports (``cuDriverGetVersion``,
    which needs no GPU context), or None without a driver."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value // 1000, (version.value % 1000) // 10


def installed_cupy() -> str:
    """The CuPy distribution installed, with its version ("cupy-cuda12x 13.6.0"), or ""."""
    for name in CUPY_DISTRIBUTIONS:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def install_hint() -> str:
    """Which extra to install: both choices, the one matching this machine's driver, and the
    CuPy wheel installed now (a CUDA 13 wheel under a CUDA 12 driver cannot load). The commands
    come from :func:`mpiring.core.install.pip_install` (mpiring is not on the package index)."""
    text = cuda_choices()
    driver = driver_cuda_version()
    if driver is None:
        text += "; no NVIDIA driver found (libcuda.so.1 does not load)"
    else:
        extra = CUDA_EXTRAS.get(driver[0])
        text += f"; this machine's driver supports CUDA {driver[0]}.{driver[1]}"
        if extra:
            text += f", so {pip_install(extra)}"
    wheel = installed_cupy()
    if wheel:
        text += f"; installed now: {wheel}"
    return text


def visible_gpus() -> str:
    """Evidence, found without CuPy, that this process may use NVIDIA GPUs ("" if none).

    Evidence is a device file ``/dev/nvidia<N>`` (the driver's, also present in containers
    and Slurm jobs given GPUs), else ``nvidia-smi -L`` listing a GPU (WSL and unusual
    set-ups). ``CUDA_VISIBLE_DEVICES`` set to "", "-1" or "NoDevFiles" hides every GPU on
    purpose: then there is none. ``CUDA_VISIBLE_DEVICES`` alone is no evidence: shells and
    job scripts export it on machines without GPUs too.
    """
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and (hidden.split(",")[0].strip() in ("", "-1")
                               or hidden.strip() == "NoDevFiles"):
        return ""
    nodes = sorted(path for path in glob.glob("/dev/nvidia[0-9]*")
                   if path.removeprefix("/dev/nvidia").isdigit())
    if nodes:
        return f"{len(nodes)} NVIDIA device file(s): {', '.join(nodes[:4])}"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ""
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True,
                              timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    gpus = [line for line in done.stdout.splitlines() if line.startswith("GPU ")]
    return f"nvidia-smi -L lists {len(gpus)} GPU(s)" if done.returncode == 0 and gpus else ""
