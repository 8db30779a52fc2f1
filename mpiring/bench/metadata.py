"""The metadata block of a run: machine, software versions, command line, settings, and
what every rank runs on (host, process, GPU index, name and PCI bus id, MPI library), which
the banner prints one line per rank as nccl-tests does: a rank on the wrong GPU, or one that
loaded another MPI library, shows there.

:func:`collect` is collective (every rank reports itself); the rest is local.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import socket
import sys
from typing import Any

import numpy as np

ENV_PREFIXES = ("NCCL_", "MPIRING_", "CUDA_VISIBLE_DEVICES", "UCX_", "FI_", "MPICH_", "OMPI_MCA",
                "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_JOB_NODELIST", "SLURM_GPUS")


def _version(module: str) -> str | None:
    try:
        mod = __import__(module)
    except Exception:  # noqa: BLE001 - absent or broken: report nothing
        return None
    return getattr(mod, "__version__", None)


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def gpu_of_this_rank() -> dict[str, Any] | None:
    """Index, name, PCI bus id and memory of this rank's current GPU (None without CuPy/GPU)."""
    try:
        import cupy

        dev = cupy.cuda.Device()
        props = cupy.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        return {
            "device": dev.id,
            "name": name.decode() if isinstance(name, bytes) else str(name),
            "pci_bus_id": dev.pci_bus_id,
            "memory_bytes": int(props.get("totalGlobalMem", 0)),
        }
    except Exception:  # noqa: BLE001
        return None


def cuda_versions() -> dict[str, Any]:
    """CUDA runtime and driver, CuPy and NCCL versions, where present."""
    out: dict[str, Any] = {}
    try:
        import cupy
    except Exception:  # noqa: BLE001
        return out
    out["cupy"] = cupy.__version__
    try:
        out["cuda_runtime"] = _cuda_version(cupy.cuda.runtime.runtimeGetVersion())
        out["cuda_driver"] = _cuda_version(cupy.cuda.runtime.driverGetVersion())
    except Exception:  # noqa: BLE001
        pass
    try:
        from cupy.cuda import nccl

        v = nccl.get_version()
        out["nccl"] = f"{v // 10000}.{(v % 10000) // 100}.{v % 100}" if v >= 10000 else str(v)
    except Exception:  # noqa: BLE001
        pass
    try:
        with open("/proc/driver/nvidia/version") as f:
            out["nvidia_driver"] = f.readline().strip()
    except OSError:
        pass
    return out


def mpi_library() -> str:
    """The first line of the MPI library's own version string, spaces squeezed."""
    from mpi4py import MPI

    return " ".join(MPI.Get_library_version().replace("\0", "").split("\n")[0].split())


def mpi_versions() -> dict[str, Any]:
    from mpi4py import MPI

    major, minor = MPI.Get_version()
    return {
        "mpi_library": mpi_library(),
        "mpi_standard": f"{major}.{minor}",
        "mpi4py": _version("mpi4py"),
    }


def this_rank(gpu: bool) -> dict[str, Any]:
    """Where this rank runs: host, process id, GPU (with ``gpu``) and MPI library."""
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "gpu": gpu_of_this_rank() if gpu else None, "mpi_library": mpi_library()}


def pci_address(bus_id: str) -> str:
    """nccl-tests' short PCI address, domain:bus:device: ``0000:18:00.0`` -> ``0000:18:00``."""
    return bus_id.rsplit(".", 1)[0].lower() if bus_id.count(":") == 2 else bus_id


def rank_lines(ranks: list[dict[str, Any]]) -> list[str]:
    """One line per rank in nccl-tests' form (``#  Rank  0 Group  0 Pid 1234 on host device
    0 [0000:18:00] NVIDIA H200``, without the leading ``#``), then the MPI library: one line
    when every rank loaded the same, else one per library with its ranks."""
    lines = []
    for r, info in enumerate(ranks):
        gpu = info.get("gpu")
        where = (f"device {gpu['device']:2d} [{pci_address(str(gpu['pci_bus_id']))}] {gpu['name']}"
                 if gpu else "device  - [host memory]")
        lines.append(f"  Rank {r:2d} Group  0 Pid {info.get('pid', 0):6d} on "
                     f"{str(info.get('host', '?')).split('.')[0]:>10} {where}")
    libraries: dict[str, list[int]] = {}
    for r, info in enumerate(ranks):
        libraries.setdefault(str(info.get("mpi_library", "?")), []).append(r)
    if len(libraries) == 1:
        lines.append(f" MPI library (every rank): {next(iter(libraries))}")
    else:
        for lib, members in libraries.items():
            lines.append(f" MPI library of ranks {', '.join(map(str, members))}: {lib} "
                         "(differs between ranks!)")
    return lines


def collect(world: Any, *, mode: str, space: str, settings: dict[str, Any],
            argv: list[str], prog: str = "mpiring.bench") -> dict[str, Any]:
    """Collective: the metadata of this run of ``python -m <prog>`` (every rank gets the same
    dict)."""
    ranks = world.allgather(this_rank(mode == "gpu"))
    gpus = [r["gpu"] for r in ranks]
    hosts = [r["host"] for r in ranks]
    import mpiring

    meta: dict[str, Any] = {
        "benchmark": "allreduce",
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "hostname": hosts[0],
        "hosts": sorted(set(hosts)),
        "world_size": world.size,
        "mode": mode,
        "memory": space,
        "command": shlex.join([sys.executable, "-m", prog, *argv]),
        "gpus": list(gpus) if mode == "gpu" else [],
        "ranks": ranks,
        "gpu_names": sorted({g["name"] for g in gpus if g}) if mode == "gpu" else [],
        "python": platform.python_version(),
        "platform": platform.platform(),
        "mpiring": getattr(mpiring, "__version__", None),
        "numpy": np.__version__,
        **mpi_versions(),
        **cuda_versions(),
        "torch": _version("torch") if "torch" in sys.modules else None,
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith(ENV_PREFIXES)},
        "settings": settings,
    }
    return meta
