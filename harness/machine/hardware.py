"""What the hardware is, read from procfs, sysfs and lscpu: no torch, no measurement.

`cpu_fingerprint()` gathers the facts that explain a CPU's numbers (vendor, family, model,
stepping, microcode, sockets, NUMA nodes, cores and SMT, caches, frequencies, hypervisor or
container, cgroup limits, ISA flags). The parsers take text and a root directory, so saved
samples from other machines test them. `hardware_key()` hashes the fields that make two
machines the same hardware; `machine_id` stays an identifier only (VMs built from one image
share /etc/machine-id, whatever CPU they land on).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

# ISA flags that decide which kernels oneDNN and MKL can use, as /proc/cpuinfo spells them.
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw",
             "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16",
             "amx_int8", "asimd", "sve", "bf16", "i8mm")
# Fields of a machine entry that make two machines the same hardware for a comparison.
HARDWARE_FIELDS = ("cpu_vendor", "cpu_family", "cpu_model_number", "cpu_stepping", "cpu_model",
                   "isa_flags", "cpus_usable", "sockets")
_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_size(text: str) -> int | None:
    """Bytes from sysfs/lscpu sizes: '32K', '512 KiB', '32 MiB (1 instance)', '1 MB'."""
    match = re.match(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\b", text.strip(), re.IGNORECASE)
    if not match:
        return None
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()])


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """The first processor's identity from /proc/cpuinfo, and counts over all processors."""
    blocks = [b for b in text.split("\n\n") if b.strip()]
    first: dict[str, str] = {}
    for line in (blocks[0] if blocks else "").splitlines():
        key, _, value = line.partition(":")
        first.setdefault(key.strip(), value.strip())
    physical = set()
    cores = set()
    for block in blocks:
        fields = {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in
                                                        block.splitlines())}
        physical.add(fields.get("physical id", "0"))
        cores.add((fields.get("physical id", "0"), fields.get("core id", fields.get("processor"))))

    def number(key: str) -> int | None:
        value = first.get(key, "")
        return int(value, 0) if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", value) else None

    flags = set((first.get("flags") or first.get("Features") or "").split())
    return {
        "cpu_vendor": first.get("vendor_id") or first.get("CPU implementer"),
        "cpu_model": first.get("model name") or first.get("Processor"),
        "cpu_family": number("cpu family"),
        "cpu_model_number": number("model"),
        "cpu_stepping": number("stepping"),
        "cpu_microcode": first.get("microcode"),
        "cpu_part": number("CPU part"),
        "cpu_mhz": float(first["cpu MHz"]) if re.fullmatch(r"\d+(\.\d+)?",
                                                            first.get("cpu MHz", "")) else None,
        "logical_cpus": len(blocks),
        "sockets": len(physical) if blocks else None,
        "physical_cores": len(cores) if blocks else None,
        "isa_flags": sorted(f for f in ISA_FLAGS if f in flags),
        "hypervisor_flag": "hypervisor" in flags,
    }


def parse_lscpu(text: str) -> dict[str, str]:
    """`lscpu`'s plain "Key: value" lines (run with LC_ALL=C: keys are not localised)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() and not key.startswith(" "):
            found.setdefault(key.strip(), value.strip())
    return found


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_caches(sys_root: Path) -> dict[str, int]:
    """Cache sizes of cpu0 (per instance) from sysfs: l1d, l1i, l2, l3 in bytes."""
    caches: dict[str, int] = {}
    for index in sorted((sys_root / "devices/system/cpu/cpu0/cache").glob("index*")):
        level, kind, size = (_read(index / name) for name in ("level", "type", "size"))
        if not level or not size or (bytes_ := parse_size(size)) is None:
            continue
        name = f"l{level}" + {"Data": "d", "Instruction": "i"}.get(kind or "", "")
        caches[name] = bytes_
    return caches


def read_frequencies(sys_root: Path) -> dict[str, Any]:
    """Base and maximum frequency (MHz) and the governor of cpu0, where cpufreq exposes them."""
    cpufreq = sys_root / "devices/system/cpu/cpu0/cpufreq"
    found: dict[str, Any] = {}
    for key, name in (("base_mhz", "base_frequency"), ("max_mhz", "cpuinfo_max_freq"),
                      ("min_mhz", "cpuinfo_min_freq")):
        value = _read(cpufreq / name)
        if value and value.isdigit():
            found[key] = int(value) / 1000.0
    governor = _read(cpufreq / "scaling_governor")
    if governor:
        found["governor"] = governor
    return found


def read_numa_nodes(sys_root: Path) -> int | None:
    folder = sys_root / "devices/system/node"
    if not folder.is_dir():
        return None
    return len([p for p in folder.glob("node*") if p.name[4:].isdigit()]) or None


def read_cgroup_limits(sys_root: Path) -> dict[str, Any]:
    """CPU quota (in CPUs) and memory limit (bytes) of this process's cgroup, v2 or v1; None
    where there is no limit."""
    root = sys_root / "fs/cgroup"
    quota: float | None = None
    memory: int | None = None
    cpu_max = _read(root / "cpu.max")
    if cpu_max:
        limit, _, period = cpu_max.partition(" ")
        if limit.isdigit() and period.isdigit() and int(period):
            quota = int(limit) / int(period)
    else:
        limit_text, period_text = (_read(root / "cpu" / n) for n in ("cpu.cfs_quota_us",
                                                                     "cpu.cfs_period_us"))
        if limit_text and period_text and limit_text.lstrip("-").isdigit() \
                and int(limit_text) > 0 and period_text.isdigit() and int(period_text):
            quota = int(limit_text) / int(period_text)
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        text = _read(path)
        if text and text.isdigit() and int(text) < 2**60:  # v1 says "no limit" with ~2**63
            memory = int(text)
            break
    return {"cpu_quota": quota, "memory_limit": memory}


def detect_container(root: Path) -> str | None:
    """docker, podman or another container runtime, from the marker files they leave."""
    if (root / ".dockerenv").exists():
        return "docker"
    if (root / "run/.containerenv").exists():
        return "podman"
    container = _read(root / "run/systemd/container")
    return container or None


@cache
def _lscpu_text() -> str:
    if shutil.which("lscpu") is None:
        return ""
    try:
        return subprocess.run(["lscpu"], capture_output=True, text=True, timeout=20,
                              env={**os.environ, "LC_ALL": "C"}, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_fingerprint(proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys"),
                    root: Path = Path("/"), lscpu_text: str | None = None) -> dict[str, Any]:
    """Everything procfs, sysfs and lscpu say about the CPU that can explain its figures."""
    info = parse_cpuinfo(_read(proc_root / "cpuinfo") or "")
    lscpu = parse_lscpu(_lscpu_text() if lscpu_text is None else lscpu_text)
    threads_per_core = int(lscpu.get("Thread(s) per core", "0") or 0) or None
    sockets = info["sockets"]
    if lscpu.get("Socket(s)", "").isdigit():
        sockets = int(lscpu["Socket(s)"])
    caches = read_caches(sys_root)
    for key, label in (("l1d", "L1d cache"), ("l1i", "L1i cache"), ("l2", "L2 cache"),
                       ("l3", "L3 cache")):
        if key not in caches and label in lscpu and (size := parse_size(lscpu[label])):
            caches[key] = size
    frequencies = read_frequencies(sys_root)
    if info["cpu_mhz"]:
        frequencies["cpuinfo_mhz"] = info["cpu_mhz"]
    for key, label in (("max_mhz", "CPU max MHz"), ("min_mhz", "CPU min MHz")):
        if key not in frequencies and label in lscpu:
            try:
                frequencies[key] = float(lscpu[label])
            except ValueError:
                pass
    hypervisor = lscpu.get("Hypervisor vendor") or ("unknown" if info["hypervisor_flag"]
                                                    else None)
    return {
        "cpu_vendor": info["cpu_vendor"],
        "cpu_model": info["cpu_model"] or lscpu.get("Model name") or platform.processor()
        or platform.machine(),
        "cpu_family": info["cpu_family"],
        "cpu_model_number": info["cpu_model_number"],
        "cpu_stepping": info["cpu_stepping"],
        "cpu_microcode": info["cpu_microcode"],
        **({"cpu_part": info["cpu_part"]} if info["cpu_part"] is not None else {}),
        "sockets": sockets,
        "numa_nodes": read_numa_nodes(sys_root) or (int(lscpu["NUMA node(s)"])
                                                     if lscpu.get("NUMA node(s)", "").isdigit()
                                                     else None),
        "physical_cores": info["physical_cores"],
        "logical_cpus": info["logical_cpus"] or None,
        "smt": threads_per_core > 1 if threads_per_core else None,
        "caches": caches,
        "frequency": frequencies,
        "hypervisor": hypervisor,
        "container": detect_container(root),
        "cgroup": read_cgroup_limits(sys_root),
        "isa_flags": info["isa_flags"],
    }


@cache
def cpu_model() -> str:
    """The CPU's model name ("AMD EPYC", "Intel(R) Xeon(R) Processor")."""
    return str(parse_cpuinfo(_read(Path("/proc/cpuinfo")) or "")["cpu_model"]
               or platform.processor() or platform.machine())


@cache
def cpu_flags() -> frozenset[str]:
    """All flags of /proc/cpuinfo (empty where it cannot be read)."""
    match = re.search(r"^flags\s*:\s*(.*)$", _read(Path("/proc/cpuinfo")) or "", re.MULTILINE)
    return frozenset(match.group(1).split()) if match else frozenset()


@cache
def machine_id() -> str:
    """A stable, non-reversible id of this machine (hash of /etc/machine-id, else host+cpu);
    an identifier, never the test of "same hardware" (see hardware_key)."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        raw = _read(Path(path))
        if raw:
            return hashlib.sha256(raw.encode()).hexdigest()[:16]
    return hashlib.sha256(f"{socket.gethostname()}|{cpu_model()}".encode()).hexdigest()[:16]


def hardware_summary(machine: Mapping[str, Any]) -> dict[str, Any]:
    """The HARDWARE_FIELDS of a machine entry, plus its GPU models; None where unknown."""
    summary = {name: machine.get(name) for name in HARDWARE_FIELDS}
    gpus = machine.get("gpus")
    summary["gpus"] = sorted(str(g.get("name")) for g in gpus if isinstance(g, dict)) \
        if isinstance(gpus, list) else None
    return summary


def hardware_key(machine: Mapping[str, Any]) -> str:
    """A short hash of hardware_summary: equal for the same CPU model, stepping, ISA, usable
    cores and GPUs, whatever the machine_id."""
    blob = json.dumps(hardware_summary(machine), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def hardware_differences(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[str]:
    """'field: a vs b' for each hardware field known on both sides that differs."""
    a, b = hardware_summary(first), hardware_summary(second)
    known = [name for name in a if a[name] not in (None, [], "") and b[name] not in (None, [], "")]
    return [_difference(name, a[name], b[name]) for name in known if a[name] != b[name]]


def _difference(name: str, first: Any, second: Any) -> str:
    """'field: a vs b' (each side cut at 80 characters); for a list (ISA flags, GPUs) only
    what one side has and the other lacks, the first few named, so that a line names the
    difference instead of repeating two long lists."""
    if not (isinstance(first, list) and isinstance(second, list)):
        return f"{name}: {_cut(str(first))} vs {_cut(str(second))}"
    from collections import Counter

    a, b = Counter(map(str, first)), Counter(map(str, second))
    only = [sorted((a - b).elements()), sorted((b - a).elements())]
    return f"{name}: " + "; ".join(
        f"only the {side} has {_cut(', '.join(found[:5]))}"
        + (f" and {len(found) - 5} more" if len(found) > 5 else "")
        for side, found in zip(("first", "second"), only, strict=True) if found)


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@cache
def local_hardware_key() -> str:
    """hardware_key of this machine's CPU and usable cores (GPUs are named apart)."""
    return hardware_key({**cpu_fingerprint(), "cpus_usable": len(os.sched_getaffinity(0))})
