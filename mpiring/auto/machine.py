"""Which kind of machine a node is, for auto's tuning table: a :class:`MachineKey` of the GPU
model, the ranks on the node, and the link between the node's GPUs.

The winners of auto's candidates depend on all three: a table measured on 4 H200s joined by
NVLink picks badly on 2 of them, and worse on GPUs joined by PCIe only. So tables are stored
per key (:mod:`mpiring.auto.tuning` finds them) and a node uses the table of its own key.

What the key holds, decided from every GPU of the node (each rank sees them all: CUDA IPC
needs it, :func:`mpiring.cuda.device.bind_device` checks it), so that every rank of the node
computes the same key from the same hardware:

* ``gpu``: the model name (``"NVIDIA H200"``), ``"mixed: A + B"`` on a node of several
  models, ``"none"`` on a node without GPUs (host arrays), ``"unknown"`` where no library
  answers;
* ``ranks``: the ranks on the node;
* ``link``: ``"nvlink"`` if every pair of the node's GPUs is joined by NVLink (directly or
  through NVSwitch), ``"pcie"`` if some pair is not, ``"unknown"`` if some pair cannot be
  told, ``"none"`` for one GPU or none.

How a pair's link is told: NVML first (``pynvml``, from the ``nvidia-ml-py`` package, when it
is importable): ``nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK)`` is OK exactly when
the pair can talk over NVLink, switch or no switch (``nvmlDeviceGetNvLinkState`` alone would
only say a link is up, not to whom; ``nvmlDeviceGetTopologyCommonAncestor`` only describes
the PCIe tree). Else the CUDA driver (``cuda-bindings``, which the GPU path needs anyway;
CuPy's runtime module has no ``deviceGetP2PAttribute``): peer access with native atomics
(``CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED``) counts as NVLink, as PCIe peer-to-peer
offers no native atomics; anything else as PCIe. Where neither answers: ``"unknown"``.

The seam for tests is :func:`detect` (what the communicator calls) and the :class:`Probe`
it is given: everything else here is pure.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Sequence
from itertools import combinations
from typing import Any, NamedTuple, Protocol

NVLINK, PCIE, UNKNOWN, NONE = "nvlink", "pcie", "unknown", "none"
_STRENGTH = {NVLINK: 0, PCIE: 1, UNKNOWN: 2}  # the weakest link of a node is the largest


class MachineKey(NamedTuple):
    """What a tuning table is measured on, and looked up by."""

    gpu: str  # "NVIDIA H200"; "none" without GPUs
    ranks: int  # ranks on the node
    link: str  # "nvlink", "pcie", "unknown", "none"

    def describe(self) -> str:
        """``2 x NVIDIA H200, nvlink``."""
        return f"{self.ranks} x {self.gpu}, {self.link}"

    def file_name(self, sm_budget: int | None = None) -> str:
        """``nvidia-h200-2x-nvlink.json``: the per-user table's name (:mod:`mpiring.auto.tuning`);
        measured under an SM budget of 16, ``nvidia-h200-2x-nvlink-sm16.json``."""
        budget = f"-sm{sm_budget}" if sm_budget else ""
        return f"{slug(self.gpu)}-{self.ranks}x-{slug(self.link)}{budget}.json"


def slug(text: str) -> str:
    """``"NVIDIA H200"`` -> ``"nvidia-h200"``: lower case, runs of other characters as one ``-``."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or UNKNOWN


class Probe(Protocol):
    """What detection asks about GPUs named by PCI bus id (``0000:07:00.0``)."""

    def name(self, bus: str) -> str:
        """The GPU's model name, or ``"unknown"``."""

    def link(self, a: str, b: str) -> str:
        """``"nvlink"``, ``"pcie"`` or ``"unknown"`` for the pair."""


def weakest(links: Iterable[str]) -> str:
    """The link that describes a node: NVLink only if every pair has it; a pair that cannot be
    told makes the whole ``unknown``; no pair at all (one GPU): ``none``."""
    found = [link if link in _STRENGTH else UNKNOWN for link in links]
    if not found:
        return NONE
    return max(found, key=_STRENGTH.__getitem__)


def model(names: Iterable[str]) -> str:
    """One model name for the node: the common one, else ``mixed: A + B`` (sorted)."""
    distinct = sorted(set(names))
    if not distinct:
        return NONE
    return distinct[0] if len(distinct) == 1 else "mixed: " + " + ".join(distinct)


def machine_key(ranks: int, buses: Sequence[str] | None, probe: Probe) -> MachineKey:
    """The key of a node of ``ranks`` ranks using the GPUs ``buses`` (by place; None or empty:
    no GPUs), as ``probe`` sees them. Pure given the probe."""
    if not buses:
        return MachineKey(NONE, ranks, NONE)
    gpus = sorted(set(buses))
    return MachineKey(model(probe.name(b) for b in gpus), ranks,
                      weakest(probe.link(a, b) for a, b in combinations(gpus, 2)))


def detect(ranks: int, buses: Sequence[str] | None) -> MachineKey:
    """The key of this node (the seam the communicator calls; tests replace it). ``buses``: the
    PCI bus ids of the node's ranks' GPUs, or None on a communicator without GPUs (then no GPU
    library is touched)."""
    if not buses:
        return MachineKey(NONE, ranks, NONE)
    with open_probe() as probe:
        return machine_key(ranks, buses, probe)


# -- the libraries ---------------------------------------------------------------------


class NvmlProbe:
    """NVML through ``pynvml``; answers ``unknown`` for what it cannot tell."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    def _handle(self, bus: str) -> Any:
        return self._nvml.nvmlDeviceGetHandleByPciBusId(bus)

    def name(self, bus: str) -> str:
        try:
            name = self._nvml.nvmlDeviceGetName(self._handle(bus))
        except Exception:  # noqa: BLE001 - any NVML error: this probe cannot tell
            return UNKNOWN
        return name.decode() if isinstance(name, bytes) else str(name)

    def link(self, a: str, b: str) -> str:
        nvml = self._nvml
        try:
            status = nvml.nvmlDeviceGetP2PStatus(self._handle(a), self._handle(b),
                                                 nvml.NVML_P2P_CAPS_INDEX_NVLINK)
        except Exception:  # noqa: BLE001
            return UNKNOWN
        return NVLINK if status == nvml.NVML_P2P_STATUS_OK else PCIE


class CudaProbe:
    """The CUDA driver through ``cuda-bindings``; answers ``unknown`` for what it cannot tell."""

    def __init__(self, driver: Any) -> None:
        self._d = driver

    def _call(self, fn: Any, *args: Any) -> Any:
        err, value = fn(*args)
        if err != self._d.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"{fn.__name__}: {err}")
        return value

    def _device(self, bus: str) -> Any:
        return self._call(self._d.cuDeviceGetByPCIBusId, bus.encode())

    def name(self, bus: str) -> str:
        try:
            raw = self._call(self._d.cuDeviceGetName, 256, self._device(bus))
        except Exception:  # noqa: BLE001 - any driver error: this probe cannot tell
            return UNKNOWN
        text = raw.split(b"\0", 1)[0].decode() if isinstance(raw, bytes) else str(raw)
        return text.strip() or UNKNOWN

    def link(self, a: str, b: str) -> str:
        attr = self._d.CUdevice_P2PAttribute
        try:
            da, db = self._device(a), self._device(b)
            access = self._call(self._d.cuDeviceGetP2PAttribute,
                                attr.CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, da, db)
            atomics = self._call(self._d.cuDeviceGetP2PAttribute,
                                 attr.CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, da, db)
        except Exception:  # noqa: BLE001
            return UNKNOWN
        return NVLINK if access and atomics else PCIE


class FirstAnswer:
    """Asks each probe in turn; the first answer that is not ``unknown`` counts."""

    def __init__(self, probes: Sequence[Probe]) -> None:
        self.probes = tuple(probes)

    def name(self, bus: str) -> str:
        return next((n for p in self.probes if (n := p.name(bus)) != UNKNOWN), UNKNOWN)

    def link(self, a: str, b: str) -> str:
        return next((k for p in self.probes if (k := p.link(a, b)) != UNKNOWN), UNKNOWN)


@contextlib.contextmanager
def open_probe() -> Iterator[Probe]:
    """NVML (if ``pynvml`` imports and initialises), then the CUDA driver; NVML is shut down
    after."""
    probes: list[Probe] = []
    nvml: Any = None
    try:
        import pynvml

        pynvml.nvmlInit()
        nvml = pynvml
        probes.append(NvmlProbe(pynvml))
    except Exception:  # noqa: BLE001 - not installed, no driver: the CUDA driver may still answer
        nvml = None
    with contextlib.suppress(Exception):
        from cuda.bindings import driver

        driver.cuInit(0)
        probes.append(CudaProbe(driver))
    try:
        yield FirstAnswer(probes)
    finally:
        if nvml is not None:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
