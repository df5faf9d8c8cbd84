"""Published peaks: GPUs from their vendors' datasheets (dense, no structured sparsity), and a
CPU's peak estimated from its cores, clock and the FLOPs per cycle its vector units can do.

A GPU's entry names the datasheet it comes from. dtbench's `fp32` on a CUDA device runs with
TF32 allowed (matrix products and convolutions on tensor cores), so its spec-sheet peak is the
TF32 one where the device has TF32. A device that no entry matches has no spec-sheet peak:
nothing is guessed for it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TERA = 1e12


@dataclass(frozen=True)
class Datasheet:
    """One accelerator's dense peaks in FLOP/s by precision, its memory bandwidth in B/s,
    and where the figures come from."""

    name: str
    # substrings of the device name as the driver reports it, all of which must appear
    match: tuple[str, ...]
    peaks: Mapping[str, float]
    memory_bandwidth: float
    source: str

    def peak(self, precision: str, backend: str = "cuda") -> float | None:
        """The dense peak a run in `precision` can reach: fp32 on CUDA is TF32 where the
        device has it."""
        if precision == "fp32" and backend == "cuda" and "tf32" in self.peaks:
            return self.peaks["tf32"]
        return self.peaks.get(precision)


def _t(**peaks: float) -> dict[str, float]:
    return {name: value * TERA for name, value in peaks.items()}


# Most specific first: the first entry whose substrings all appear in the name is taken.
DATASHEETS: tuple[Datasheet, ...] = (
    Datasheet("NVIDIA H200 NVL", ("H200", "NVL"), _t(fp32=60, tf32=418, bf16=836, fp16=836),
              4.8e12, "NVIDIA H200 Tensor Core GPU datasheet (NVL column; sparse figures "
              "halved)"),
    Datasheet("NVIDIA H200 SXM", ("H200",), _t(fp32=67, tf32=494.5, bf16=989.5, fp16=989.5),
              4.8e12, "NVIDIA H200 Tensor Core GPU datasheet (SXM column; sparse figures "
              "halved)"),
    Datasheet("NVIDIA H100 NVL", ("H100", "NVL"), _t(fp32=60, tf32=417.5, bf16=835, fp16=835),
              3.9e12, "NVIDIA H100 Tensor Core GPU datasheet (H100 NVL column; sparse "
              "figures halved)"),
    Datasheet("NVIDIA H100 PCIe", ("H100", "PCIe"), _t(fp32=51, tf32=378, bf16=756, fp16=756),
              2.0e12, "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe column; sparse "
              "figures halved)"),
    Datasheet("NVIDIA H100 SXM", ("H100",), _t(fp32=67, tf32=494.5, bf16=989.5, fp16=989.5),
              3.35e12, "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column; sparse "
              "figures halved)"),
    Datasheet("NVIDIA A100 80GB", ("A100", "80GB"), _t(fp32=19.5, tf32=156, bf16=312, fp16=312),
              2.039e12, "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM; dense figures)"),
    Datasheet("NVIDIA A100 40GB", ("A100",), _t(fp32=19.5, tf32=156, bf16=312, fp16=312),
              1.555e12, "NVIDIA A100 Tensor Core GPU datasheet (40GB; dense figures)"),
    Datasheet("NVIDIA V100", ("V100",), _t(fp32=15.7, fp16=125), 0.9e12,
              "NVIDIA Tesla V100 datasheet (SXM2; no bf16, no TF32)"),
    Datasheet("NVIDIA B200", ("B200",), _t(tf32=1100, bf16=2250, fp16=2250), 8.0e12,
              "NVIDIA HGX B200 specifications (per GPU; sparse figures halved; no fp32 "
              "entry taken)"),
    Datasheet("AMD Instinct MI300X", ("MI300X",), _t(fp32=163.4, tf32=653.7, bf16=1307.4,
                                                     fp16=1307.4),
              5.3e12, "AMD Instinct MI300X data sheet (dense; fp32 matrix)"),
    Datasheet("AMD Instinct MI250X", ("MI250X",), _t(fp32=95.7, bf16=383, fp16=383), 3.2768e12,
              "AMD Instinct MI250X data sheet (fp32 matrix)"),
)


def datasheet_for(device_name: str | None) -> Datasheet | None:
    """The datasheet of a device name as the driver gives it ("NVIDIA H100 80GB HBM3")."""
    if not device_name:
        return None
    name = device_name.upper()
    for sheet in DATASHEETS:
        if all(part.upper() in name for part in sheet.match):
            return sheet
    return None


# FP32 FLOPs per cycle and core of the vector units (two FMA pipes unless named), by the
# microarchitecture dtbench names (harness/machine/names.py), then by ISA.
FP32_PER_CYCLE = {"Zen": 16, "Zen+": 16, "Zen 2": 32, "Zen 3": 32,
                  # Zen 4 runs AVX-512 on 256-bit datapaths; Zen 5 has full 512-bit ones
                  "Zen 4": 32, "Zen 5": 64}
ISA_FP32_PER_CYCLE = (("avx512f", 64), ("avx2", 32), ("avx", 16), ("sse4_2", 8))
# bf16 per cycle and core: the dot-product instructions double the fp32 rate; Intel AMX's
# tile unit does 1,024 bf16 FLOPs a cycle on each core
AMX_BF16_PER_CYCLE = 1024


def cpu_peak_estimate(machine: Mapping[str, Any], precision: str,
                      microarchitecture: str | None = None) -> dict[str, Any] | None:
    """cores x clock x FLOPs per cycle, with how each factor was found; None where the clock
    or the vector width is unknown. An estimate: turbo, AVX-512 clock offsets and a VM's
    reported clock all move the real figure."""
    cores = machine.get("physical_cores") or machine.get("cpu_cores")
    frequency = machine.get("frequency") or {}
    mhz = frequency.get("max_mhz") or \
        frequency.get("cpuinfo_mhz")
    flags = set(machine.get("isa_flags") or [])
    per_cycle = FP32_PER_CYCLE.get(microarchitecture or "")
    basis = f"{microarchitecture}'s vector units" if per_cycle else None
    if per_cycle is None:
        found = next(((flag, n) for flag, n in ISA_FP32_PER_CYCLE if flag in flags), None)
        if found is not None:
            per_cycle, basis = found[1], f"{found[0]} with two FMA pipes"
    if not cores or not mhz or per_cycle is None:
        return None
    if precision == "bf16":
        if "amx_bf16" in flags:
            per_cycle, basis = AMX_BF16_PER_CYCLE, "AMX tiles (1,024 bf16 FLOPs a cycle)"
        elif "avx512_bf16" in flags:
            per_cycle, basis = 2 * per_cycle, f"{basis}, bf16 dot products at twice fp32"
    elif precision != "fp32":
        return None
    return {"flops": float(cores) * float(mhz) * 1e6 * per_cycle, "cores": cores, "mhz": mhz,
            "flops_per_cycle": per_cycle, "basis": basis,
            "method": "estimate: cores x clock x FLOPs per cycle (the clock as the OS "
                      "reports it; turbo and AVX-512 offsets move it)"}


# The instructions that compute a precision natively on a CPU, by architecture, as
# /proc/cpuinfo spells them (harness/machine/hardware.py records them as isa_flags). A CPU
# with none of them runs the precision by converting to fp32 and back (oneDNN's emulation):
# it works, often slower than fp32 itself (bf16 on AVX2 Zen 1 to 3).
NATIVE_PRECISION_FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "bf16": {"x86_64": ("avx512_bf16", "amx_bf16"), "aarch64": ("bf16",)},
    "fp16": {"x86_64": ("avx512_fp16",)},
}


def emulated_precision(machine: Mapping[str, Any], precision: str) -> bool:
    """Whether a CPU had no instruction for `precision` (bf16 on an AVX2 CPU), as its recorded
    ISA flags say; never claimed where the flags were not recorded or the architecture or
    precision has no entry above."""
    flags = machine.get("isa_flags")
    arch = str(machine.get("arch") or "").lower()
    native = NATIVE_PRECISION_FLAGS.get(precision, {}).get({"amd64": "x86_64",
                                                            "arm64": "aarch64"}.get(arch, arch))
    if native is None or not isinstance(flags, list) or not flags:
        return False
    return not any(flag in flags for flag in native)
