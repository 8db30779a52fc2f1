"""The metadata block of a run: machine, software versions, the code that measured (mpiring's
version and commit: :func:`provenance`), command line, settings, and what every rank runs on
(host, process, GPU index, name and PCI bus id, MPI library, CPUs it may run on), which the
banner prints one line per rank as nccl-tests does: a rank on the wrong GPU, or one that
loaded another MPI library, shows there; so do more ranks on a host than it has CPUs
(:func:`cpu_load`), where timings swing from run to run.

:func:`collect` is collective (every rank reports itself); the rest is local.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import os
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..core import settings

ENV_PREFIXES = ("NCCL_", "MPIRING_", "CUDA_VISIBLE_DEVICES", "UCX_", "FI_", "MPICH_", "OMPI_MCA",
                "SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_JOB_NODELIST", "SLURM_GPUS")
COMMIT_ENV = "MPIRING_COMMIT"  # the commit of an installed copy that is not a git checkout
UNKNOWN = "unknown"
CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2 CPU quota: "<quota> <period>" or "max ..."


def _git(checkout: Path, *args: str) -> str | None:
    """``git -C checkout args`` 's output, stripped; None where git is missing or fails."""
    try:
        done = subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True,
                              timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def source_commit(package: Path | None = None, environ: Any = None) -> str:
    """The commit of the mpiring code that runs: ``git rev-parse HEAD`` of the checkout this
    package was imported from, with ``-dirty`` where tracked files differ from it; for a copy
    that is no checkout of mpiring (an installed wheel), ``$MPIRING_COMMIT``, else
    ``"unknown"``. ``package`` is the ``mpiring`` package directory (default: this one).

    The package is the checkout's only where git tracks its ``__init__.py`` there: a wheel
    installed into a virtualenv inside some other repository does not take that one's commit.
    """
    package = Path(__file__).resolve().parents[1] if package is None else package.resolve()
    top = _git(package, "rev-parse", "--show-toplevel")
    if top:
        root = Path(top).resolve()
        try:
            init = (package / "__init__.py").relative_to(root)
        except ValueError:  # git answered for another tree (a symlinked package)
            init = None
        head = _git(root, "rev-parse", "HEAD") if init is not None and \
            _git(root, "ls-files", "--error-unmatch", str(init)) is not None else None
        if head:
            dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
            return head + ("-dirty" if dirty else "")
    return (settings.text(COMMIT_ENV, environ) or "").strip() or UNKNOWN


@functools.lru_cache(maxsize=1)
def provenance() -> dict[str, str]:
    """The code that measured, for every result file and the banner: ``{"mpiring": version,
    "commit": commit}`` (:func:`source_commit`; looked up once per process)."""
    import mpiring

    return {"mpiring": str(mpiring.__version__), "commit": source_commit()}


def short_commit(commit: str) -> str:
    """A commit as the banner shows it: 12 hex digits, the ``-dirty`` mark kept."""
    head, dirty, _ = commit.partition("-dirty")
    return (head[:12] if len(head) == 40 else head) + ("-dirty" if dirty else "")


def cpu_quota(path: Path = CPU_MAX) -> int | None:
    """The CPUs a cgroup v2 quota allows this process (rounded up), None without a quota."""
    try:
        quota, period = path.read_text().split()[:2]
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):  # no file, "max" (no quota), or something else
        return None


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity; all CPUs where that cannot be read)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def cpu_load(ranks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per host: its ranks and the CPUs they may run on together (the union of their
    affinities, capped by a cgroup quota), and whether ranks outnumber those CPUs
    (``oversubscribed``): ranks then take turns on cores, and a rank that waits for a peer
    which is not running waits a scheduler slice, so times swing from run to run."""
    hosts: dict[str, dict[str, Any]] = {}
    for info in ranks:
        host = str(info.get("host", "?")).split(".")[0]
        entry = hosts.setdefault(host, {"ranks": 0, "cpu_ids": set(), "quota": None})
        entry["ranks"] += 1
        entry["cpu_ids"].update(info.get("cpu_ids") or ())
        if info.get("cpu_quota"):
            entry["quota"] = min(entry["quota"] or info["cpu_quota"], info["cpu_quota"])
    out = {}
    for host, entry in hosts.items():
        cpus = len(entry["cpu_ids"]) or 1
        if entry["quota"]:
            cpus = min(cpus, entry["quota"])
        out[host] = {"ranks": entry["ranks"], "cpus": cpus,
                     "oversubscribed": entry["ranks"] > cpus}
    return out


def cpu_line(load: dict[str, dict[str, Any]]) -> str:
    """The banner's line on ranks and CPUs per host, with a warning where ranks outnumber
    CPUs."""
    parts = [f"{h}: {v['ranks']} rank{'s' if v['ranks'] != 1 else ''} on {v['cpus']} "
             f"CPU{'s' if v['cpus'] != 1 else ''}" for h, v in load.items()]
    over = [h for h, v in load.items() if v["oversubscribed"]]
    if not over:
        return "; ".join(parts)
    return ("; ".join(parts) + f": MORE RANKS THAN CPUs on {', '.join(over)}: ranks take turns on "
            "cores, so times swing from run to run (rows marked ~); run at most one rank per CPU")


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
    """Where this rank runs: host, process id, GPU (with ``gpu``), MPI library, the CPUs it
    may run on (``cpu_ids``; ``cpu_quota``: a cgroup's cap, or None)."""
    return {"host": socket.gethostname(), "pid": os.getpid(),
            "gpu": gpu_of_this_rank() if gpu else None, "mpi_library": mpi_library(),
            "cpu_ids": usable_cpus(), "cpu_quota": cpu_quota()}


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
    load = cpu_load(ranks)
    for info in ranks:  # the count, not every CPU's number, goes into the file
        info["cpus"] = len(info.pop("cpu_ids", None) or ()) or None
    code = world.bcast(provenance() if world.rank == 0 else None, root=0)  # rank 0's checkout
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
        "mpiring": code["mpiring"],
        "commit": code["commit"],
        "cpus": load,
        "oversubscribed": sorted(h for h, v in load.items() if v["oversubscribed"]),
        "numpy": np.__version__,
        **mpi_versions(),
        **cuda_versions(),
        "torch": _version("torch") if "torch" in sys.modules else None,
        "environment": {k: v for k, v in sorted(os.environ.items())
                        if k.startswith(ENV_PREFIXES)},
        "settings": settings,
    }
    return meta
