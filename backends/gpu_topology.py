"""What a GPU node is: how its GPUs reach each other (NVLink or PCIe, and whether NCCL may go
peer to peer), which NUMA node each sits on, and its network cards with their rates; from NVML
and sysfs, as `nvidia-smi topo -m` and `ibstat` read them.

Every query that a driver or a board does not answer becomes None (or, for NVML as a whole,
{"unavailable": reason}); nothing here needs a GPU to import."""
from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import Any

from backends.numa import pci_numa_node
from backends.nvml import NVMLUnavailable, _optional, _text, nvml_session

# nvmlDeviceGetP2PStatus's capability indices (pynvml 12 spells READ as a tuple) and its OK.
P2P_READ, P2P_NVLINK, P2P_OK = 0, 2, 0
# nvmlDeviceGetTopologyCommonAncestor's levels, in `nvidia-smi topo -m`'s words.
PATHS = {0: "same board", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
# One NVLink's bandwidth per direction by NVLink version, bytes/s: NVLink 1 (P100) 20 GB/s,
# 2 to 4 (V100, A100, H100/H200) 25 GB/s, 5 (B200) 50 GB/s (NVIDIA's NVLink product pages:
# 6 x 25 = 150 GB/s on V100, 12 x 25 = 300 on A100, 18 x 25 = 450 on H100, 18 x 50 = 900 on B200).
NVLINK_BYTES = {1: 20e9, 2: 25e9, 3: 25e9, 4: 25e9, 5: 50e9}
# PCIe per lane and direction after encoding, bytes/s, by generation (PCI-SIG: 2.5, 5, 8, 16,
# 32, 64 GT/s; 8b/10b to generation 2, then 128b/130b): x16 gives 15.75 GB/s at generation 3.
PCIE_LANE_BYTES = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.877e9}


def sysfs_pci_address(nvml_bus_id: str) -> str:
    """NVML's bus id ("00000000:1B:00.0") as sysfs names the device ("0000:1b:00.0")."""
    domain, _, rest = nvml_bus_id.strip().partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _links(nv: ModuleType, handle: Any) -> tuple[int, int | None, bool]:
    """Active NVLinks of a GPU, their version, and whether any ends on an NVSwitch."""
    active, version, switch = 0, None, False
    switch_type = getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
        if _optional(nv, nv.nvmlDeviceGetNvLinkState, handle, link) != 1:
            continue
        active += 1
        version = version or _optional(nv, nv.nvmlDeviceGetNvLinkVersion, handle, link)
        remote = getattr(nv, "nvmlDeviceGetNvLinkRemoteDeviceType", None)
        switch = switch or (remote is not None and _optional(nv, remote, handle, link)
                            == switch_type)
    return active, version, switch


def _gpu(nv: ModuleType, index: int, handle: Any, sys_root: Path) -> dict[str, Any]:
    pci = _optional(nv, nv.nvmlDeviceGetPciInfo, handle)
    address = sysfs_pci_address(_text(pci.busId)) if pci is not None else None
    links, version, switch = _links(nv, handle)
    local = sys_root / "bus/pci/devices" / address / "local_cpulist" if address else None
    return {"index": index, "pci": address,
            "numa_node": pci_numa_node(address, sys_root) if address else None,
            "local_cpus": local.read_text().strip() if local and local.is_file() else None,
            "nvlinks": links, "nvlink_version": version, "nvswitch": switch,
            "pcie_generation": _optional(nv, nv.nvmlDeviceGetMaxPcieLinkGeneration, handle),
            "pcie_width": _optional(nv, nv.nvmlDeviceGetMaxPcieLinkWidth, handle)}


def _pair(nv: ModuleType, first: Any, second: Any) -> dict[str, Any]:
    nvlink = _optional(nv, nv.nvmlDeviceGetP2PStatus, first, second, P2P_NVLINK) == P2P_OK
    read = _optional(nv, nv.nvmlDeviceGetP2PStatus, first, second, P2P_READ) == P2P_OK
    level = _optional(nv, nv.nvmlDeviceGetTopologyCommonAncestor, first, second)
    return {"link": "NVLink" if nvlink else "PCIe", "p2p": read,
            "path": PATHS.get(level, str(level)) if level is not None else None}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def network_cards(sys_root: Path = Path("/sys")) -> list[dict[str, Any]]:
    """The physical network cards: InfiniBand (or RoCE) ports with their rate and state, and
    Ethernet interfaces backed by a device, with their speed; each with its NUMA node."""
    cards: list[dict[str, Any]] = []
    ib = sys_root / "class/infiniband"
    for device in sorted(ib.iterdir()) if ib.is_dir() else []:
        for port in sorted((device / "ports").iterdir()) if (device / "ports").is_dir() else []:
            rate = re.match(r"\s*([\d.]+)\s*Gb/sec", _read(port / "rate") or "")
            cards.append({"name": f"{device.name}/{port.name}", "type": (
                _read(port / "link_layer") or "InfiniBand").lower(),
                "rate_gbps": float(rate.group(1)) if rate else None,
                "state": (_read(port / "state") or "").split(":")[-1].strip() or None,
                "numa_node": _node(device / "device")})
    net = sys_root / "class/net"
    for interface in sorted(net.iterdir()) if net.is_dir() else []:
        if not (interface / "device").exists():
            continue  # virtual: loopback, bridges, veth, tunnels
        speed = _read(interface / "speed")
        cards.append({"name": interface.name, "type": "ethernet",
                      "rate_gbps": int(speed) / 1000 if speed and speed.isdigit() else None,
                      "state": _read(interface / "operstate"),
                      "numa_node": _node(interface / "device")})
    return cards


def _node(device: Path) -> int | None:
    text = _read(device / "numa_node")
    return int(text) if text and text.lstrip("-").isdigit() and int(text) >= 0 else None


def gpu_topology(sys_root: Path = Path("/sys")) -> dict[str, Any] | None:
    """The node's GPUs and how they connect (per GPU: PCI address, NUMA node and its CPUs,
    NVLinks; per pair: NVLink or PCIe, peer to peer or not, the PCIe path between them), the
    link every pair shares, and the network cards; None without GPUs."""
    try:
        with nvml_session() as nv:
            handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
            if not handles:
                return None
            gpus = [_gpu(nv, index, handle, sys_root) for index, handle in enumerate(handles)]
            pairs = {f"{a}-{b}": _pair(nv, handles[a], handles[b])
                     for a in range(len(handles)) for b in range(a + 1, len(handles))}
    except NVMLUnavailable as why:
        return {"unavailable": str(why), "nics": network_cards(sys_root)}
    links = {pair["link"] for pair in pairs.values()}
    return {"gpus": gpus, "pairs": pairs,
            "link": links.pop() if len(links) == 1 else ("mixed" if links else None),
            "p2p": all(pair["p2p"] for pair in pairs.values()) if pairs else None,
            "nics": network_cards(sys_root)}


def link_bandwidth(topology: dict[str, Any] | None) -> tuple[float, str] | None:
    """The bytes/s per direction of the link the node's GPUs share, and what it is: NVLink's
    links x their speed where every pair is on NVLink, else the narrowest PCIe link; the
    slowest GPU bounds a ring. None where the topology does not say."""
    gpus = (topology or {}).get("gpus") or []
    if not gpus:
        return None
    if topology.get("link") == "NVLink" and all(g.get("nvlinks") for g in gpus):
        rates = [g["nvlinks"] * NVLINK_BYTES.get(g.get("nvlink_version") or 0, 0.0)
                 for g in gpus]
        if min(rates) > 0:
            lead = min(gpus, key=lambda g: g["nvlinks"])
            return min(rates), (f"NVLink {lead.get('nvlink_version')}, {lead['nvlinks']} links"
                                + (" through NVSwitch" if lead.get("nvswitch") else ""))
    widths = [(g.get("pcie_generation"), g.get("pcie_width")) for g in gpus]
    if any(gen is None or width is None for gen, width in widths):
        return None
    rate, gen, width = min((PCIE_LANE_BYTES.get(gen, 0.0) * width, gen, width)
                           for gen, width in widths)
    return (rate, f"PCIe {gen} x{width}") if rate > 0 else None
