"""What a GPU node is, from a fake NVML (eight GPUs on NVSwitch, or on PCIe only) and generated
sysfs trees (NUMA nodes, network cards): mocked, not measured."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from backends.gpu_topology import gpu_topology, link_bandwidth, network_cards, sysfs_pci_address

pynvml = pytest.importorskip("pynvml")

BUSES = ["1B", "43", "52", "61", "9D", "C3", "D1", "DF"]


def fake_nvml(monkeypatch: pytest.MonkeyPatch, nvlinks: int = 18) -> None:
    def link_state(handle: int, link: int) -> int:
        if link >= nvlinks:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 1

    def p2p(first: int, second: int, kind: int) -> int:
        return 0 if kind == 0 or nvlinks else 2  # reads over PCIe; NVLink only with links

    fakes: dict[str, Any] = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: len(BUSES),
        "nvmlDeviceGetHandleByIndex": lambda index: index,
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=f"00000000:{BUSES[h]}:00.0"
                                                          .encode()),
        "nvmlDeviceGetNvLinkState": link_state,
        "nvmlDeviceGetNvLinkVersion": lambda h, link: 4,
        "nvmlDeviceGetNvLinkRemoteDeviceType": lambda h, link: 2,  # an NVSwitch
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetP2PStatus": p2p,
        "nvmlDeviceGetTopologyCommonAncestor": lambda a, b: 40 if (a < 4) == (b < 4) else 50,
    }
    for name, fake in fakes.items():
        monkeypatch.setattr(pynvml, name, fake)


def sysfs(root: Path) -> Path:
    for index, bus in enumerate(BUSES):
        device = root / "bus/pci/devices" / f"0000:{bus.lower()}:00.0"
        device.mkdir(parents=True)
        (device / "numa_node").write_text("0\n" if index < 4 else "1\n")
        (device / "local_cpulist").write_text("0-55\n" if index < 4 else "56-111\n")
    port = root / "class/infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "state").write_text("4: ACTIVE\n")
    (port / "link_layer").write_text("InfiniBand\n")
    (root / "class/infiniband/mlx5_0/device").mkdir()
    (root / "class/infiniband/mlx5_0/device/numa_node").write_text("1\n")
    for name, speed, backed in (("eth0", "100000", True), ("lo", "", False),
                                ("docker0", "-1", False)):
        interface = root / "class/net" / name
        interface.mkdir(parents=True)
        (interface / "speed").write_text(speed + "\n")
        (interface / "operstate").write_text("up\n")
        if backed:
            (interface / "device").mkdir()
            (interface / "device/numa_node").write_text("0\n")
    return root


def test_eight_gpus_on_nvswitch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_nvml(monkeypatch)
    found = gpu_topology(sysfs(tmp_path))
    assert found["link"] == "NVLink" and found["p2p"] is True and len(found["pairs"]) == 28
    assert found["pairs"]["0-7"] == {"link": "NVLink", "p2p": True, "path": "SYS"}
    assert found["pairs"]["0-3"]["path"] == "NODE"
    gpu5 = found["gpus"][5]
    assert gpu5["pci"] == "0000:c3:00.0" and gpu5["numa_node"] == 1
    assert gpu5["local_cpus"] == "56-111" and gpu5["nvlinks"] == 18 and gpu5["nvswitch"]
    assert found["nics"] == [
        {"name": "mlx5_0/1", "type": "infiniband", "rate_gbps": 400.0, "state": "ACTIVE",
         "numa_node": 1},
        {"name": "eth0", "type": "ethernet", "rate_gbps": 100.0, "state": "up",
         "numa_node": 0}]
    assert link_bandwidth(found) == (18 * 25e9, "NVLink 4, 18 links through NVSwitch")


def test_eight_gpus_on_pcie_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_nvml(monkeypatch, nvlinks=0)
    found = gpu_topology(sysfs(tmp_path))
    assert found["link"] == "PCIe" and found["pairs"]["2-6"]["link"] == "PCIe"
    assert found["gpus"][0]["nvlinks"] == 0
    assert link_bandwidth(found) == (pytest.approx(16 * 3.938e9), "PCIe 5 x16")


def test_no_nvml_says_why_and_still_lists_the_cards(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    def broken() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    found = gpu_topology(sysfs(tmp_path))
    assert "libnvidia-ml.so.1" in found["unavailable"] and len(found["nics"]) == 2
    assert link_bandwidth(found) is None


def test_bus_ids_and_empty_trees() -> None:
    assert sysfs_pci_address("00000000:1B:00.0") == "0000:1b:00.0"
    assert sysfs_pci_address("00000001:C3:00.0") == "0001:c3:00.0"
    assert network_cards(Path("/nonexistent")) == []
    assert link_bandwidth(None) is None and link_bandwidth({"gpus": []}) is None
