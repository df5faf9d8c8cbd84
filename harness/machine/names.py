"""A machine as a reader recognises it: its microarchitecture named from the CPU's family and
model numbers, a short label for table rows and plot legends, and a system description in
the terms of MLPerf's system_desc files (host processor, accelerators, nodes, interconnect,
framework, OS).

The tables name what the vendors' documentation and the Linux kernel's CPU model lists say;
a CPU not in them is named by its numbers ("AMD family 23 model 49"), never guessed.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# AMD: family -> (first model, last model, name): the ranges the Linux kernel maps to its
# ZEN1..ZEN5 features (arch/x86/kernel/cpu/amd.c); Zen+ parts are the kernel's ZEN1.
AMD_MODELS: dict[int, tuple[tuple[int, int, str], ...]] = {
    0x17: ((0x00, 0x2F, "Zen 1"), (0x50, 0x5F, "Zen 1"), (0x30, 0x4F, "Zen 2"),
           (0x60, 0x7F, "Zen 2"), (0x90, 0x91, "Zen 2"), (0xA0, 0xAF, "Zen 2")),
    0x19: ((0x00, 0x0F, "Zen 3"), (0x20, 0x5F, "Zen 3"), (0x10, 0x1F, "Zen 4"),
           (0x60, 0xAF, "Zen 4")),
    0x1A: ((0x00, 0x2F, "Zen 5"), (0x40, 0x4F, "Zen 5"), (0x60, 0x7F, "Zen 5")),
}
# Intel family 6: model -> name (server parts first; client parts where dtbench has met them).
INTEL_FAMILY6: dict[int, str] = {
    0x3F: "Haswell", 0x4F: "Broadwell", 0x55: "Skylake", 0x6A: "Ice Lake", 0x6C: "Ice Lake",
    0x8F: "Sapphire Rapids", 0xCF: "Emerald Rapids", 0xAD: "Granite Rapids",
    0xAE: "Granite Rapids", 0xAF: "Sierra Forest", 0x8E: "Kaby Lake", 0x9E: "Coffee Lake",
    0x97: "Alder Lake", 0x9A: "Alder Lake", 0xB7: "Raptor Lake", 0xBA: "Raptor Lake",
    0xBF: "Raptor Lake", 0xAA: "Meteor Lake", 0xC6: "Arrow Lake",
}
# Skylake's server model 0x55 is three generations, told apart by stepping.
INTEL_55_STEPPINGS = ((11, "Cooper Lake"), (5, "Cascade Lake"), (0, "Skylake"))
# Arm: the main ID register's part number (/proc/cpuinfo "CPU part") of Arm's own cores.
ARM_PARTS: dict[int, str] = {
    0xD0C: "Neoverse N1", 0xD40: "Neoverse V1", 0xD49: "Neoverse N2", 0xD4F: "Neoverse V2",
    0xD84: "Neoverse V3", 0xD8E: "Neoverse N3", 0xD0B: "Cortex-A76", 0xD41: "Cortex-A78",
}
VENDORS = {"AuthenticAMD": "AMD", "GenuineIntel": "Intel", "0x41": "Arm"}


def _number(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            return None
    return None


def vendor_name(machine: Mapping[str, Any]) -> str:
    vendor = str(machine.get("cpu_vendor") or "")
    return VENDORS.get(vendor, vendor)


def microarchitecture(machine: Mapping[str, Any]) -> str:
    """The CPU's microarchitecture, or its vendor, family and model numbers where the tables
    do not name it."""
    vendor = vendor_name(machine)
    family = _number(machine.get("cpu_family"))
    model = _number(machine.get("cpu_model_number"))
    part = _number(machine.get("cpu_part"))
    if vendor == "AMD" and family is not None and model is not None:
        for first, last, name in AMD_MODELS.get(family, ()):
            if first <= model <= last:
                return name
    if vendor == "Intel" and family == 6 and model is not None:
        if model == 0x55:
            stepping = _number(machine.get("cpu_stepping")) or 0
            return next(name for least, name in INTEL_55_STEPPINGS if stepping >= least)
        if model in INTEL_FAMILY6:
            return INTEL_FAMILY6[model]
    if vendor == "Arm" and part is not None and part in ARM_PARTS:
        return ARM_PARTS[part]
    if family is None and model is None:
        named = str(machine.get("cpu_model") or "unknown CPU")
        return named if not vendor or named.startswith(vendor) else f"{vendor} {named}"
    return f"{vendor or 'CPU'} family {family} model {model}"


def _cores(machine: Mapping[str, Any]) -> int | None:
    for key in ("cpus_usable", "cpu_cores", "physical_cores", "logical_cpus"):
        value = _number(machine.get(key))
        if value:
            return value
    return None


def _accelerators(machine: Mapping[str, Any]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for gpu in machine.get("gpus") or []:
        name = str(gpu.get("name") if isinstance(gpu, Mapping) else gpu)
        counts[name] = counts.get(name, 0) + 1
    return sorted(counts.items())


def machine_label(machine: Mapping[str, Any]) -> str:
    """What a table row or plot legend calls the machine: the name given with --machine, else
    vendor and microarchitecture, cores, accelerators and nodes ("AMD Zen 3, 2 cores")."""
    name = machine.get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    uarch = microarchitecture(machine)
    vendor = vendor_name(machine)
    parts = [uarch if not vendor or uarch.startswith(vendor) else f"{vendor} {uarch}"]
    cores = _cores(machine)
    if cores:
        parts.append(f"{cores} cores")
    parts += [f"{count}× {gpu}" for gpu, count in _accelerators(machine)]
    nodes = _number(machine.get("nodes")) or 1
    if nodes > 1:
        parts.append(f"{nodes} nodes")
    return ", ".join(parts)


def system_description(machine: Mapping[str, Any], software: Mapping[str, Any]
                       ) -> dict[str, Any]:
    """The machine in the terms of an MLPerf system_desc file."""
    accelerators = _accelerators(machine)
    interconnect = machine.get("interconnect") or {}
    network = interconnect.get("type") if isinstance(interconnect, Mapping) else None
    speed = interconnect.get("speed_mbps") if isinstance(interconnect, Mapping) else None
    if network and type(speed) in (int, float) and 0 < speed < 1e30:  # a record's claim
        network = f"{network} {float(speed):g} Mb/s"
    return {
        "system_name": machine_label(machine),
        "host_processor_model_name": machine.get("cpu_model"),
        "host_processor_microarchitecture": microarchitecture(machine),
        "host_processors_per_node": machine.get("sockets"),
        "host_processor_core_count": _cores(machine),
        "accelerator_model_name": ", ".join(name for name, _ in accelerators) or None,
        "accelerators_per_node": sum(count for _, count in accelerators),
        "number_of_nodes": _number(machine.get("nodes")) or 1,
        "host_networking": network,
        "framework": f"PyTorch {software['torch']}" if software.get("torch") else None,
        "operating_system": machine.get("os"),
    }
