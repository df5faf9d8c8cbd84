"""The node check's verdicts (`dtbench doctor`): each check a value, what was expected, a
verdict (pass, warn, fail) and the reason, from the pieces dtbench already measures — the GEMM
peak and copy bandwidth, collective busbw between the node's ranks, NVML's view of each GPU's
health — and the software and settings that move figures.

Thresholds are stated where they apply (RATIO_VERDICTS). A check with no published or
estimated expectation passes with its value: the fleet comparison (harness/doctor/fleet.py)
is what tells whether such a figure is normal.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PASS, WARN, FAIL = "pass", "warn", "fail"
# (measured / expected) at or above the first figure passes, at or above the second warns,
# below it fails: a datasheet is a ceiling a good node comes near; a CPU estimate is rougher.
# A collective's busbw against the link between the node's GPUs (NVLink or PCIe, as NVML
# reports it): nccl-tests' allreduce busbw comes near the per-GPU link bandwidth on a healthy
# node (NVLink) or a good share of it (PCIe through the host).
RATIO_VERDICTS = {"datasheet": (0.6, 0.4), "bandwidth datasheet": (0.7, 0.5),
                  "estimate": (0.35, 0.15), "link": (0.5, 0.25)}
# Message sizes of the collective checks: CPUs' at one size; GPUs' where busbw has left the
# latency-bound range (nccl-tests' allreduce on NVLink flattens from about 256 MiB).
COLLECTIVE_BYTES = 16 * 2**20
GPU_COLLECTIVE_BYTES = (256 * 2**20, 1024 * 2**20)


@dataclass
class NodeCheck:
    """One check of the node: `value` in `unit` (a number where it was measured, which the
    record keeps as a metric and the fleet compares), the expectation, the verdict and why."""

    name: str
    group: str
    value: Any
    unit: str
    expected: str
    verdict: str
    reason: str
    higher_is_better: bool | None = None

    @property
    def measured(self) -> bool:
        return isinstance(self.value, (int, float)) and not isinstance(self.value, bool) \
            and self.higher_is_better is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ratio_verdict(measured: float, expected: float | None, kind: str) -> tuple[str, str]:
    """The verdict of a measured figure against an expectation of `kind`, and why."""
    if not expected:
        return PASS, "no published or estimated figure: compare it with the fleet"
    good, poor = RATIO_VERDICTS[kind]
    ratio = measured / expected
    said = f"{ratio:.0%} of the {kind}"
    if ratio >= good:
        return PASS, said
    if ratio >= poor:
        return WARN, f"{said}, below {good:.0%}"
    return FAIL, f"{said}, below {poor:.0%}"


def compute_checks(backend: str, machine: Mapping[str, Any], precisions: tuple[str, ...],
                   measure: Callable[[str], Any], prefix: str = "") -> list[NodeCheck]:
    """GEMM peak per precision against the datasheet (GPUs) or the cores x clock x width
    estimate (CPUs), then the copy bandwidth against the datasheet's memory bandwidth. `measure`
    gives a PeakResult for a precision (harness/microbench/peak.measure_peak); `prefix` names
    the device ("gpu3_") where each GPU of the node is checked."""
    from harness.facts.datasheets import cpu_peak_estimate, datasheet_for
    from harness.machine.names import microarchitecture

    checks: list[NodeCheck] = []
    bandwidth: tuple[float, float | None] | None = None
    for precision in precisions:
        result = measure(precision)
        sheet = datasheet_for(result.device_name) if backend == "cuda" else None
        if sheet is not None:
            expected = sheet.peak(precision, backend)
            kind, source = "datasheet", sheet.source
        else:
            estimate = cpu_peak_estimate(machine, precision, microarchitecture(machine)) \
                if backend == "cpu" else None
            expected = estimate["flops"] if estimate else None
            kind = "estimate"
            source = (f"{estimate['cores']} cores x {estimate['mhz']:.0f} MHz x "
                      f"{estimate['flops_per_cycle']} FLOPs/cycle ({estimate['basis']}): "
                      "an estimate") if estimate else "none known"
        verdict, reason = ratio_verdict(result.flops, expected, kind)
        held = f"held {result.sustained_s:.0f} s, " if result.sustained_s else ""
        checks.append(NodeCheck(
            f"{prefix}gemm_{precision}", "compute", result.flops / 1e9, "GFLOP/s",
            f"{expected / 1e9:.0f} GFLOP/s ({source})" if expected else source, verdict,
            f"{held}{reason}", higher_is_better=True))
        if bandwidth is None:
            bandwidth = (result.memory_bandwidth,
                         sheet.memory_bandwidth if sheet is not None else None)
        if result.clocks:
            checks += clock_checks(result.clocks, result.device_name, precision, prefix)
    if bandwidth is not None:
        verdict, reason = ratio_verdict(bandwidth[0], bandwidth[1], "bandwidth datasheet")
        checks.append(NodeCheck(
            f"{prefix}copy_bandwidth", "memory", bandwidth[0] / 1e9, "GB/s",
            f"{bandwidth[1] / 1e9:.0f} GB/s (datasheet)" if bandwidth[1] else "none known",
            verdict, f"a large copy, bytes read + written; {reason}", higher_is_better=True))
    return checks


# NVML's clock event reasons by what they say of a node: a power cap under a full GEMM load
# is the design working; thermal slowdown is a cooling problem; the hardware slowdowns are
# faults (power brake, an external slowdown signal).
FAULT_REASONS = ("HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown")
WARN_REASONS = ("SwThermalSlowdown", "BoardLimit", "Reliability")


def clock_checks(clocks: Mapping[str, Any], device: str, precision: str,
                 prefix: str = "") -> list[NodeCheck]:
    """The clocks read during one precision's sustained GEMM, judged by NVML's reasons."""
    name = f"{prefix or 'gpu_'}sm_clock_{precision}"
    if "unavailable" in clocks:
        return [NodeCheck(name, "gpu", None, "", "read under load", WARN,
                          f"{device}: {clocks['unavailable']}")]
    reasons = list(clocks.get("clock_reasons") or [])
    faults = [r for r in reasons if r in FAULT_REASONS]
    warned = [r for r in reasons if r in WARN_REASONS]
    verdict = FAIL if faults else WARN if warned else PASS
    why = (f"hardware slowdown: {', '.join(faults)}" if faults else
           f"{', '.join(warned)} held the clocks" if warned else
           "limited by: " + (", ".join(reasons) or "nothing") + " (a power cap under a full "
           "GEMM load is the design)")
    highest = clocks.get("max_sm_clock_mhz")
    return [NodeCheck(name, "gpu", clocks.get("sm_clock_mhz"), "MHz",
                      f"up to {highest:.0f} MHz, no slowdown" if highest else "no slowdown",
                      verdict, f"{device}, median over the sustained {precision} GEMM; {why}",
                      higher_is_better=True)]


def health_checks(health: Mapping[str, Any], label: str) -> list[NodeCheck]:
    """A GPU's NVML health (backends/nvml.device_health) as checks named after the GPU."""
    if "unavailable" in health:
        return [NodeCheck(f"{label}_nvml", "gpu", None, "", "NVML answers", WARN,
                          str(health["unavailable"]))]
    checks = []

    def add(name: str, value: Any, unit: str, expected: str, verdict: str, reason: str,
            higher: bool | None = None) -> None:
        checks.append(NodeCheck(f"{label}_{name}", "gpu", value, unit, expected, verdict,
                                reason, higher))

    volatile, aggregate = health.get("ecc_uncorrected_volatile"), \
        health.get("ecc_uncorrected_aggregate")
    if volatile is None and aggregate is None:
        add("ecc", None, "errors", "0 uncorrected", PASS, "ECC counts not reported "
            f"(ECC mode {health.get('ecc_mode')})")
    else:
        verdict = FAIL if volatile else WARN if aggregate else PASS
        add("ecc_uncorrected", volatile or 0, "errors", "0", verdict,
            f"{volatile or 0} uncorrected since the driver loaded, {aggregate or 0} over the "
            "board's life" + (": memory is failing now" if volatile else ""), False)
    rows = health.get("remapped_rows")
    if rows is not None:
        verdict = FAIL if rows["failed"] else WARN if rows["pending"] else PASS
        add("remapped_rows", rows["uncorrectable"], "rows", "no failure, none pending", verdict,
            "a row remapping failed: the board needs service" if rows["failed"] else
            "a remapping waits for a GPU reset" if rows["pending"] else
            f"{rows['uncorrectable']} rows remapped for uncorrectable errors, none pending", False)
    if health.get("retired_pages_pending"):
        add("retired_pages", 1, "pending", "none pending", WARN,
            "retired pages wait for a GPU reset", False)
    temperature, slowdown = health.get("temperature_c"), health.get("slowdown_temperature_c")
    if temperature is not None:
        near = slowdown is not None and temperature >= slowdown - 5
        add("temperature", temperature, "°C", f"below {slowdown} °C (slowdown)"
            if slowdown else "below the slowdown threshold", WARN if near else PASS,
            "within 5 °C of the slowdown threshold" if near else "after the load", False)
    limit, default = health.get("power_limit_w"), health.get("default_power_limit_w")
    if limit is not None:
        capped = default is not None and limit < 0.95 * default
        add("power_limit", limit, "W", f"the default {default} W" if default else "default",
            WARN if capped else PASS,
            f"capped below the default: every figure is lower; drawing {health.get('power_w')} W"
            if capped else f"drawing {health.get('power_w')} W after the load", True)
    width, widest = health.get("pcie_width"), health.get("pcie_max_width")
    generation, newest = health.get("pcie_generation"), health.get("pcie_max_generation")
    if width is not None and widest:
        narrow = width < widest
        add("pcie_width", width, "lanes", f"x{widest}", FAIL if narrow else PASS,
            f"link trained at x{width} of x{widest}: host transfers at a fraction" if narrow
            else f"x{width}, generation {generation} of {newest} (links slow down when idle)",
            True)
    return checks


def _mount_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def settings_checks(machine: Mapping[str, Any], sys_root: Path = Path("/sys")) -> list[NodeCheck]:
    """Settings that move figures: the frequency governor, SMT, NUMA nodes, transparent huge
    pages. Reported; a governor other than performance warns (clocks then follow the load)."""
    frequency = machine.get("frequency") or {}
    governor = frequency.get("governor")
    checks = [NodeCheck("cpu_governor", "settings", governor or "not exposed", "",
                        "performance", WARN if governor and governor != "performance" else PASS,
                        "the clock follows the load: short runs measure a ramp" if governor and
                        governor != "performance" else "no cpufreq here (a VM, or fixed "
                        "clocks)" if not governor else "fixed at the highest clock")]
    smt = machine.get("smt")
    checks.append(NodeCheck("smt", "settings", "on" if smt else "off" if smt is False else
                            "unknown", "", "stated", PASS,
                            "two threads share a core's units: dtbench places one per core"
                            if smt else "one thread per core"))
    checks.append(NodeCheck("numa_nodes", "settings", machine.get("numa_nodes"), "", "stated",
                            PASS, "ranks on more than one node cross the interconnect"))
    thp = _mount_text(sys_root / "kernel/mm/transparent_hugepage/enabled")
    chosen = thp.split("[", 1)[1].split("]", 1)[0] if thp and "[" in thp else thp
    checks.append(NodeCheck("transparent_hugepages", "settings", chosen or "not exposed", "",
                            "stated", PASS, "large tensors on 2 MiB pages where madvise or "
                            "always; never leaves the allocator on 4 KiB pages"))
    return checks


def software_checks(software: Mapping[str, Any], gpus: list[Any],
                    backends: Mapping[str, Any]) -> list[NodeCheck]:
    """The versions that move figures; a CPU build of torch on a node with GPUs fails."""
    checks = []
    for name in ("torch", "cuda", "cudnn", "nccl", "onednn", "mkl", "python"):
        value = software.get(name)
        checks.append(NodeCheck(f"software_{name}", "software", str(value) if value else
                                "absent", "", "stated", PASS, "version in every record"))
    mpi = software.get("mpi") or {}
    checks.append(NodeCheck("software_mpi", "software", (mpi.get("implementation") or
                                                         "absent").split(",")[0], "", "stated",
                            PASS,
                            f"mpi4py {mpi.get('mpi4py')}" if mpi else "MPI runs unavailable"))
    if gpus:
        drivers = sorted({str(g.get("driver")) for g in gpus})
        cuda = backends.get("cuda") or {}
        usable = bool(cuda.get("available"))
        checks.append(NodeCheck("gpu_driver", "software", ", ".join(drivers), "", "a CUDA "
                                "build of torch that sees the GPUs", PASS if usable else FAIL,
                                f"{len(gpus)} GPU(s)" if usable else
                                f"{len(gpus)} GPU(s) but {cuda.get('reason')}"))
    return checks


def verdict_of(checks: list[NodeCheck]) -> str:
    verdicts = {c.verdict for c in checks}
    return FAIL if FAIL in verdicts else WARN if WARN in verdicts else PASS
