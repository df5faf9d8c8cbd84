"""The CPU fingerprint parser on saved samples from an AMD and an Intel (AMX) machine, and what
makes two machines the same hardware."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.machine.hardware import (
    cpu_fingerprint,
    hardware_differences,
    hardware_key,
    parse_size,
)

SAMPLES = Path(__file__).resolve().parent / "samples"


def fingerprint(name: str) -> dict:
    folder = SAMPLES / name
    return cpu_fingerprint(proc_root=folder, sys_root=folder / "sys", root=folder,
                           lscpu_text=(folder / "lscpu.txt").read_text())


def test_amd_epyc_zen3_sample() -> None:
    found = fingerprint("amd-epyc-zen3")
    assert (found["cpu_vendor"], found["cpu_model"]) == ("AuthenticAMD", "AMD EPYC")
    assert (found["cpu_family"], found["cpu_model_number"], found["cpu_stepping"]) == (25, 1, 1)
    assert found["cpu_microcode"] == "0x1000065"
    assert (found["sockets"], found["numa_nodes"], found["physical_cores"],
            found["logical_cpus"], found["smt"]) == (1, 1, 2, 2, False)
    assert found["caches"] == {"l1d": 32 * 2**10, "l1i": 32 * 2**10, "l2": 512 * 2**10,
                               "l3": 32 * 2**20}
    assert found["hypervisor"] == "KVM"
    assert found["cgroup"] == {"cpu_quota": None, "memory_limit": None}  # v1, no limits
    assert found["isa_flags"] == ["avx", "avx2", "f16c", "fma", "sse4_2"]
    assert found["frequency"] == {"cpuinfo_mhz": 2445.406}


def test_intel_amx_sample_uses_lscpu_where_sysfs_is_silent() -> None:
    found = fingerprint("intel-xeon-amx")
    assert (found["cpu_vendor"], found["cpu_family"], found["cpu_model_number"],
            found["cpu_stepping"]) == ("GenuineIntel", 6, 143, 8)
    assert found["cpu_model"] == "Intel(R) Xeon(R) Processor"
    assert {"amx_tile", "amx_bf16", "amx_int8", "avx512_bf16", "avx512f"} <= set(
        found["isa_flags"])
    assert (found["physical_cores"], found["logical_cpus"], found["smt"]) == (1, 2, True)
    assert found["caches"] == {"l1d": 48 * 2**10, "l1i": 32 * 2**10, "l2": 2 * 2**20,
                               "l3": 105 * 2**20}
    assert found["cgroup"] == {"cpu_quota": 2.0, "memory_limit": 24 * 2**30}
    assert found["container"] == "podman" and found["hypervisor"] == "KVM"
    assert found["numa_nodes"] == 1


def test_same_machine_id_different_cpu_is_different_hardware() -> None:
    amd, intel = fingerprint("amd-epyc-zen3"), fingerprint("intel-xeon-amx")
    amd.update(machine_id="same", cpus_usable=2)
    intel.update(machine_id="same", cpus_usable=2)
    assert hardware_key(amd) != hardware_key(intel)
    differences = hardware_differences(amd, intel)
    assert "cpu_model: AMD EPYC vs Intel(R) Xeon(R) Processor" in differences
    assert any(d.startswith("isa_flags:") for d in differences)
    assert hardware_differences(amd, dict(amd, machine_id="other")) == []
    assert hardware_key(amd) == hardware_key(dict(amd, machine_id="other", hostname="x"))


def test_old_records_compare_on_what_they_have() -> None:
    old = {"machine_id": "a", "cpu_model": "AMD EPYC", "cpus_usable": 2}
    assert hardware_differences(old, fingerprint("amd-epyc-zen3") | {"cpus_usable": 2}) == []
    assert hardware_differences(old, {"cpu_model": "Intel(R) Xeon(R) Processor"}) == [
        "cpu_model: AMD EPYC vs Intel(R) Xeon(R) Processor"]


@pytest.mark.parametrize(("text", "expected"), [
    ("32K", 32768), ("512 KiB", 524288), ("32 MiB (1 instance)", 33554432), ("1 MB", 2**20),
    ("2G", 2**31), ("", None), ("n/a", None)])
def test_sizes(text: str, expected: int | None) -> None:
    assert parse_size(text) == expected


def test_this_machine_reads_without_errors() -> None:
    found = cpu_fingerprint()
    assert found["logical_cpus"] and found["cpu_model"]
