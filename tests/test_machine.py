"""mpiring.auto.machine: the node's key (GPU model, ranks, link) from every GPU of the node, through a
probe that tests replace; the NVML and CUDA-driver probes against fake libraries; and the real
detection on this machine (no GPU library answers here: "unknown", never an exception)."""

from __future__ import annotations

from itertools import permutations
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpiring.auto import machine
from mpiring.auto.machine import NONE, NVLINK, PCIE, UNKNOWN, MachineKey

BUSES = ("0000:07:00.0", "0000:0a:00.0", "0000:47:00.0", "0000:4e:00.0")


class FakeProbe:
    """GPU names by bus, and links by pair (either order); unlisted pairs are NVLink."""

    def __init__(self, names: dict[str, str], links: dict[frozenset, str] | None = None) -> None:
        self.names, self.links, self.asked = names, links or {}, []

    def name(self, bus: str) -> str:
        return self.names.get(bus, UNKNOWN)

    def link(self, a: str, b: str) -> str:
        self.asked.append((a, b))
        return self.links.get(frozenset((a, b)), NVLINK)


def h200s(n: int, links: dict[frozenset, str] | None = None) -> FakeProbe:
    return FakeProbe({b: "NVIDIA H200" for b in BUSES[:n]}, links)


def test_a_node_of_nvlinked_gpus() -> None:
    assert machine.machine_key(4, BUSES, h200s(4)) == MachineKey("NVIDIA H200", 4, NVLINK)
    assert machine.machine_key(2, BUSES[:2], h200s(2)) == ("NVIDIA H200", 2, "nvlink")


def test_one_pair_without_nvlink_makes_the_node_pcie_and_unknown_beats_both() -> None:
    pcie = {frozenset(BUSES[2:4]): PCIE}
    assert machine.machine_key(4, BUSES, h200s(4, pcie)).link == PCIE
    unknown = {**pcie, frozenset(BUSES[:2]): UNKNOWN}
    assert machine.machine_key(4, BUSES, h200s(4, unknown)).link == UNKNOWN


def test_one_gpu_or_none() -> None:
    assert machine.machine_key(1, BUSES[:1], h200s(1)) == MachineKey("NVIDIA H200", 1, NONE)
    assert machine.machine_key(3, None, h200s(0)) == MachineKey(NONE, 3, NONE)
    assert machine.detect(3, None) == MachineKey(NONE, 3, NONE)  # touches no GPU library


def test_mixed_models_name_every_model() -> None:
    probe = FakeProbe({BUSES[0]: "NVIDIA H100", BUSES[1]: "NVIDIA A100"})
    assert machine.machine_key(2, BUSES[:2], probe).gpu == "mixed: NVIDIA A100 + NVIDIA H100"


@given(st.permutations(BUSES), st.dictionaries(st.sampled_from(
    [frozenset(p) for p in permutations(BUSES, 2)]), st.sampled_from([NVLINK, PCIE, UNKNOWN])))
def test_every_rank_computes_the_same_key_whatever_its_order(order, links) -> None:
    """Each rank lists the node's GPUs by rank: the key depends on the set, not the order, so
    every rank of the node gets the same key from the same hardware, asking the same pairs."""
    shuffled, listed = h200s(4, links), h200s(4, links)
    assert machine.machine_key(4, order, shuffled) == machine.machine_key(4, BUSES, listed)
    assert shuffled.asked == listed.asked


@pytest.mark.parametrize("order", [(0, 0, 1), (1, 0, 0), (0, 1, 0)])
def test_ranks_that_share_a_gpu_ask_the_link_of_each_pair_of_gpus_once(order) -> None:
    """Ranks sharing a GPU list its bus twice: the link of a GPU with itself is never asked."""
    probe = h200s(2)
    assert machine.machine_key(3, [BUSES[i] for i in order], probe) == MachineKey("NVIDIA H200", 3, NVLINK)
    assert probe.asked == [(BUSES[0], BUSES[1])]


def test_weakest_and_model() -> None:
    assert machine.weakest([]) == NONE
    assert machine.weakest([NVLINK, NVLINK]) == NVLINK
    assert machine.weakest([NVLINK, PCIE, NVLINK]) == PCIE
    assert machine.weakest([PCIE, "something new"]) == UNKNOWN
    assert machine.model([]) == NONE and machine.model(["A", "A"]) == "A"


def test_key_text_and_file_name() -> None:
    key = MachineKey("NVIDIA H200", 2, NVLINK)
    assert key.describe() == "2 x NVIDIA H200, nvlink"
    assert key.file_name() == "nvidia-h200-2x-nvlink.json"
    assert MachineKey("mixed: NVIDIA A100 + NVIDIA H100", 2, PCIE).file_name() == \
        "mixed-nvidia-a100-nvidia-h100-2x-pcie.json"
    assert machine.slug("  ") == UNKNOWN and machine.slug("H100 80GB HBM3") == "h100-80gb-hbm3"


class NvmlError(Exception):
    pass


def fake_nvml(nvlinked: set[frozenset], names: dict[str, str]) -> SimpleNamespace:
    """The few pynvml functions NvmlProbe calls (the constants' values are pynvml's)."""
    def handle(bus: str) -> str:
        if bus not in names:
            raise NvmlError("NVML_ERROR_NOT_FOUND")
        return bus

    def p2p(a: str, b: str, index: int) -> int:
        assert index == 2  # NVML_P2P_CAPS_INDEX_NVLINK
        return 0 if frozenset((a, b)) in nvlinked else 3  # OK, else NOT_SUPPORTED

    return SimpleNamespace(nvmlDeviceGetHandleByPciBusId=handle,
                           nvmlDeviceGetName=lambda h: names[h].encode(),
                           nvmlDeviceGetP2PStatus=p2p, NVML_P2P_CAPS_INDEX_NVLINK=2,
                           NVML_P2P_STATUS_OK=0)


def test_nvml_probe() -> None:
    names = {b: "NVIDIA H200" for b in BUSES[:3]}
    probe = machine.NvmlProbe(fake_nvml({frozenset(BUSES[:2])}, names))
    assert probe.name(BUSES[0]) == "NVIDIA H200"
    assert probe.link(BUSES[0], BUSES[1]) == NVLINK
    assert probe.link(BUSES[0], BUSES[2]) == PCIE
    assert probe.link(BUSES[0], BUSES[3]) == UNKNOWN and probe.name(BUSES[3]) == UNKNOWN


def fake_driver(devices: dict[bytes, tuple[int, str]], links: dict[frozenset, tuple[int, int]]):
    """The few cuda.bindings.driver functions CudaProbe calls; links: (access, native atomics)."""
    ok, bad = "CUDA_SUCCESS", "CUDA_ERROR_INVALID_DEVICE"
    attrs = SimpleNamespace(CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED=0,
                            CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED=1)

    def by_bus(bus: bytes):
        return (ok, devices[bus][0]) if bus in devices else (bad, None)

    def get_name(length: int, dev: int):
        name = next(n for d, n in devices.values() if d == dev)
        return ok, name.encode() + b"\0" * (length - len(name))

    def p2p(attr: int, a: int, b: int):
        return ok, links.get(frozenset((a, b)), (0, 0))[attr]

    return SimpleNamespace(CUresult=SimpleNamespace(CUDA_SUCCESS=ok), CUdevice_P2PAttribute=attrs,
                           cuDeviceGetByPCIBusId=by_bus, cuDeviceGetName=get_name,
                           cuDeviceGetP2PAttribute=p2p)


def test_cuda_probe_counts_native_atomics_over_peer_access_as_nvlink() -> None:
    devices = {b.encode(): (i, "NVIDIA L40S") for i, b in enumerate(BUSES[:3])}
    probe = machine.CudaProbe(fake_driver(devices, {frozenset((0, 1)): (1, 1),
                                                    frozenset((0, 2)): (1, 0)}))
    assert probe.name(BUSES[0]) == "NVIDIA L40S"
    assert probe.link(BUSES[0], BUSES[1]) == NVLINK
    assert probe.link(BUSES[0], BUSES[2]) == PCIE  # peer access over PCIe: no native atomics
    assert probe.link(BUSES[1], BUSES[2]) == PCIE  # no peer access at all: through the host
    assert probe.link(BUSES[0], BUSES[3]) == UNKNOWN and probe.name(BUSES[3]) == UNKNOWN


def test_the_first_probe_that_knows_answers() -> None:
    nothing = FakeProbe({}, {frozenset(BUSES[:2]): UNKNOWN})
    knows = h200s(2, {frozenset(BUSES[:2]): PCIE})
    both = machine.FirstAnswer([nothing, knows])
    assert both.name(BUSES[0]) == "NVIDIA H200" and both.link(*BUSES[:2]) == PCIE
    assert machine.FirstAnswer([]).link(*BUSES[:2]) == UNKNOWN


def test_real_detection_here_says_unknown_rather_than_raising() -> None:
    """This machine has no GPU: NVML (if installed) and the CUDA driver cannot answer; the key
    says unknown, and nothing raises (set-up must not fail for a tuning table)."""
    key = machine.detect(2, BUSES[:2])
    assert key.ranks == 2
    if key != MachineKey(UNKNOWN, 2, UNKNOWN):
        pytest.skip(f"a GPU library answered here: {key}")
