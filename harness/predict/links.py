"""Named links: the published rate and latency of the interconnects clusters are built from,
each with its source (docs/guide/prediction.md lists them). A link is an α-β pair
(costs.Link): α the seconds a message waits before its first byte, β the seconds per byte
of one direction at line rate. Transports that move bytes through the host's kernel (TCP)
add a per-byte CPU cost to β.

These are specifications, not measurements: a real link delivers less than its line rate.
`dtbench comm` over the link itself calibrates the model better (harness/predict/calibration.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from harness.core.errors import UsageError
from harness.predict.costs import Link

# NCCL's per-step latencies for the Simple protocol, which large gradient buffers use
# (NVIDIA/nccl src/graph/tuning.cc, hwLat: NVLink 0.6/1.9/3.4 µs, PCIe 1.0/2.5/5.7 µs,
# network 2.7/4.0/14 µs for LL/LL128/Simple). TCP's small-message latency over Ethernet is
# 10-30 µs in published socket benchmarks; 20 µs is taken.
NVLINK_ALPHA, PCIE_ALPHA, RDMA_ALPHA, TCP_ALPHA = 3.4e-6, 5.7e-6, 14e-6, 20e-6
# The host's cost of a byte through the kernel's TCP stack (copies into and out of socket
# buffers, checksums): one memory copy each way, ~10 GB/s on the servers of 2017-2020,
# counted on both ends. RDMA transports (RoCE, InfiniBand) bypass it.
TCP_CPU_BETA = 2 / 10e9
GB = 1e9


@dataclass(frozen=True)
class LinkPreset:
    """A named link: what it is, α, one direction's bytes per second, the host's extra
    seconds per byte (TCP) and where the figures come from."""

    name: str
    description: str
    alpha: float
    bandwidth: float
    cpu_beta: float
    source: str

    @property
    def link(self) -> Link:
        return Link(self.alpha, 1 / self.bandwidth + self.cpu_beta)

    @property
    def summary(self) -> str:
        tcp = ", +host TCP cost" if self.cpu_beta else ""
        return (f"{self.description}: α {self.alpha * 1e6:g} µs, {self.bandwidth / GB:g} GB/s"
                f"{tcp}")


def _ethernet(gbit: int, transport: str) -> LinkPreset:
    tcp = transport == "tcp"
    return LinkPreset(
        f"{gbit}gbe-{transport}", f"{gbit} Gb/s Ethernet, {'TCP' if tcp else 'RoCE (RDMA)'}",
        TCP_ALPHA if tcp else RDMA_ALPHA, gbit / 8 * GB, TCP_CPU_BETA if tcp else 0.0,
        f"IEEE 802.3 line rate {gbit} Gb/s; latency "
        + ("of TCP sockets" if tcp else "NCCL's network (Simple)"))


def _presets() -> dict[str, LinkPreset]:
    found = [
        LinkPreset("pcie3", "PCIe 3.0 x16", PCIE_ALPHA, 15.75 * GB, 0.0,
                   "PCI-SIG PCIe 3.0: 8 GT/s x16, 128b/130b; latency NCCL's PCIe (Simple)"),
        LinkPreset("pcie4", "PCIe 4.0 x16", PCIE_ALPHA, 31.5 * GB, 0.0,
                   "PCI-SIG PCIe 4.0: 16 GT/s x16; latency NCCL's PCIe (Simple)"),
        LinkPreset("pcie5", "PCIe 5.0 x16", PCIE_ALPHA, 63 * GB, 0.0,
                   "PCI-SIG PCIe 5.0: 32 GT/s x16; latency NCCL's PCIe (Simple)"),
        LinkPreset("nvlink-p100", "NVLink 1 (P100, 4 links)", NVLINK_ALPHA, 80 * GB, 0.0,
                   "NVIDIA Tesla P100 datasheet: 160 GB/s bidirectional per GPU"),
        LinkPreset("nvlink-v100", "NVLink 2 (V100, 6 links)", NVLINK_ALPHA, 150 * GB, 0.0,
                   "NVIDIA Tesla V100 datasheet: 300 GB/s bidirectional per GPU"),
        LinkPreset("nvlink-a100", "NVLink 3 (A100, 12 links)", NVLINK_ALPHA, 300 * GB, 0.0,
                   "NVIDIA A100 datasheet: 600 GB/s bidirectional per GPU"),
        LinkPreset("nvlink-h100", "NVLink 4 (H100 SXM, 18 links)", NVLINK_ALPHA, 450 * GB,
                   0.0, "NVIDIA H100 datasheet: 900 GB/s bidirectional per GPU"),
        LinkPreset("ib-edr", "InfiniBand 4x EDR", RDMA_ALPHA, 12.5 * GB, 0.0,
                   "InfiniBand Trade Association roadmap: EDR 100 Gb/s per 4x port"),
        LinkPreset("ib-hdr", "InfiniBand 4x HDR", RDMA_ALPHA, 25 * GB, 0.0,
                   "InfiniBand Trade Association roadmap: HDR 200 Gb/s per 4x port"),
        LinkPreset("ib-ndr", "InfiniBand 4x NDR", RDMA_ALPHA, 50 * GB, 0.0,
                   "InfiniBand Trade Association roadmap: NDR 400 Gb/s per 4x port"),
        LinkPreset("aries", "Cray Aries (XC40 dragonfly), per node", 1.3e-6, 10 * GB, 0.0,
                   "Alverson et al., Cray XC Series Network (2012): ~10 GB/s injection, "
                   "~1.3 µs MPI latency"),
    ]
    found += [_ethernet(rate, transport) for rate in (10, 25, 50, 100, 200, 400)
              for transport in ("tcp", "roce")]
    return {preset.name: preset for preset in found}


LINKS = _presets()
ALIASES = {"10gbe": "10gbe-tcp", "10g": "10gbe-tcp", "10gbit": "10gbe-tcp",
           "ethernet": "10gbe-tcp", "ib": "ib-edr", "infiniband": "ib-edr", "edr": "ib-edr",
           "ib-100g": "ib-edr", "100g-ib": "ib-edr", "hdr": "ib-hdr", "ndr": "ib-ndr",
           "cray-aries": "aries", "xc40": "aries", "nvlink": "nvlink-v100", "pcie": "pcie3"}


def find_link(name: str) -> LinkPreset | None:
    """The preset of a name or alias (case and spaces ignored), or None."""
    key = name.strip().lower().replace(" ", "")
    return LINKS.get(ALIASES.get(key, key))


def link_preset(name: str, flag: str) -> LinkPreset:
    """The preset of a name, or UsageError naming the presets."""
    found = find_link(name)
    if found is None:
        raise UsageError(f"{flag} {name!r}: unknown link; presets: {', '.join(LINKS)}")
    return found
