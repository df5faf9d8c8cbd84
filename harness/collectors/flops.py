"""flops_per_sample (counted), achieved_flops, peak_flops (measured GEMM) and mfu."""
from __future__ import annotations

import statistics
from typing import Any

from harness.collectors.base import CollectContext, collector, measured
from harness.records.record import Metric


@collector("flops", stage=1)
def flops(context: CollectContext) -> list[Metric]:
    if context.flops_per_sample is None:
        return []
    found = [measured("flops_per_sample", float(context.flops_per_sample),
                      extra={"method": "torch.utils.flop_counter on the meta device, fwd+bwd"})]
    rate = context.get("throughput")
    if rate is not None and rate.value is not None:
        found.append(measured(
            "achieved_flops", context.flops_per_sample * rate.value,
            samples=[context.flops_per_sample * s for s in rate.samples or []]))
    return found


def _in_run_peaks(context: CollectContext) -> tuple[float, dict[str, Any]] | None:
    """The node-wide peak from the ranks' own readings: each rank times its device (CPU ranks
    their share of the cores, at the same moment), so the sum over ranks is the capability the
    run had; the higher of the before/after totals is the peak, both are kept."""
    ranks = [r for r in context.ranks if any("flops" in reading for reading in r.peak_readings)]
    if not ranks:
        return None
    # One reading per device and moment: ranks sharing a GPU (--share-gpu) each time the whole
    # board, which counts once (the higher reading).
    per_device: dict[tuple[str, str], dict[str, float]] = {}
    for rank in ranks:
        for reading in (r for r in rank.peak_readings if "flops" in r):
            key = (reading["when"], rank.device_key or f"rank {rank.rank}")
            held = per_device.setdefault(key, {"flops": 0.0, "memory_bandwidth": 0.0})
            held["flops"] = max(held["flops"], reading["flops"])
            held["memory_bandwidth"] = max(held["memory_bandwidth"],
                                           reading["memory_bandwidth"])
    totals: dict[str, float] = {}
    bandwidth: dict[str, float] = {}
    for (when, _), held in per_device.items():
        totals[when] = totals.get(when, 0.0) + held["flops"]
        bandwidth[when] = bandwidth.get(when, 0.0) + held["memory_bandwidth"]
    peak = max(totals.values())
    spread = (peak - min(totals.values())) / peak if peak > 0 else 0.0
    lead = next(r for r in ranks[0].peak_readings if "flops" in r)
    return peak, {"peak_source": "in-run", "readings": totals, "spread": spread,
                  "memory_bandwidth": max(bandwidth.values()),
                  "memory_bandwidth_readings": bandwidth,
                  "per_rank": [[r["flops"] for r in rank.peak_readings if "flops" in r]
                               for rank in ranks],
                  "precision": context.spec.precision, "threads": lead["threads"],
                  "per_size": lead["per_size"], "devices": _devices(context, ranks),
                  "method": "best per-size median of square GEMMs, timed in the run before "
                            "and after the measured steps on every rank; peak = the higher "
                            "total"}


def _devices(context: CollectContext, ranks: list[Any]) -> int:
    """Distinct devices the ranks ran on (ranks sharing a GPU count it once); where the ranks
    do not say, one per rank."""
    keys = {rank.device_key for rank in ranks}
    if None in keys or not keys:
        return len(ranks) if context.spec.backend != "cuda" else \
            context.spec.nnodes * context.spec.nproc_per_node
    return len(keys)


def _sustained_peaks(context: CollectContext) -> tuple[float, dict[str, Any]] | None:
    """The GPUs' one denominator: each device's sustained peak, by its UUID (measured on this
    node as the device is; a device of another node, not measured here, counts at the median
    of those that were, and is named); the sweep's burst beside it."""
    peaks = context.peak if isinstance(context.peak, list) else None
    if not peaks:
        return None
    by_device = {p.device_key: p for p in peaks if p.device_key}
    typical = statistics.median(p.flops for p in peaks)
    keys = sorted({r.device_key for r in context.ranks if r.device_key}) or \
        [p.device_key or f"device {i}" for i, p in enumerate(peaks)]
    flops = {key: by_device[key].flops if key in by_device else typical for key in keys}
    burst = {key: by_device[key].burst_flops for key in keys if key in by_device}
    bandwidth = statistics.median(p.memory_bandwidth for p in peaks)
    lead = peaks[0]
    return sum(flops.values()), {
        "peak_source": "sustained", "per_device": flops, "devices": len(keys),
        "not_measured_here": [key for key in keys if key not in by_device],
        "burst_flops": sum(value or 0.0 for value in burst.values()) or None,
        "per_device_burst": burst, "sustained_s": lead.sustained_s,
        "device_state": {key: by_device[key].device_state for key in keys if key in by_device},
        "clocks": {key: by_device[key].clocks for key in keys if key in by_device},
        "precision": lead.precision, "threads": lead.threads, "measured_at": lead.measured_at,
        "per_size": lead.per_size, "memory_bandwidth": bandwidth * len(keys),
        "method": f"each device's best GEMM size held for {lead.sustained_s or 0:.0f} s, median "
                  "rate of its last half, measured per device (UUID) as it is configured "
                  "(a power-capped board reads capped); the sweep's burst beside it"}


def _cached_peak(context: CollectContext) -> tuple[float, dict[str, Any]] | None:
    peak = context.peak
    if peak is None or isinstance(peak, list):
        return None
    devices = _devices(context, context.ranks) if context.spec.backend == "cuda" else \
        context.spec.nnodes
    extra: dict[str, Any] = {
        "peak_source": "cached", "per_device": peak.flops, "devices": devices,
        "precision": peak.precision, "threads": peak.threads, "measured_at": peak.measured_at,
        "per_size": peak.per_size, "memory_bandwidth": peak.memory_bandwidth,
        "method": "best per-size median of square GEMMs, the highest measured on this "
                  "hardware so far (dtbench peak)"}
    if peak.sustained_s is not None:
        extra.update(method=f"the best GEMM size held for {peak.sustained_s:.0f} s, median rate "
                            "of its last half (a GPU's burst runs at clocks it cannot keep)",
                     burst_flops=peak.burst_flops, sustained_s=peak.sustained_s,
                     clocks=peak.clocks)
    return peak.flops * devices, extra


@collector("mfu", stage=2)
def mfu(context: CollectContext) -> list[Metric]:
    in_run = _in_run_peaks(context)
    sustained = _sustained_peaks(context)
    found_peak = sustained or in_run or _cached_peak(context)
    if found_peak is None:
        return []
    total_peak, extra = found_peak
    if sustained is not None and in_run is not None:
        # the in-run probe is a burst: beside the denominator, never it
        extra = {**extra, "in_run_bursts": in_run[1]["readings"]}
    skipped = sorted({r["skipped"] for rank in context.ranks for r in rank.peak_readings
                      if "skipped" in r})
    if skipped:
        extra = {**extra, "in_run_skipped": skipped}
    if getattr(context.spec, "share_gpu", False):
        extra = {**extra, "shared_devices": (
            f"{len(context.ranks)} ranks on {extra.get('devices')} GPU(s) (--share-gpu): each "
            "GPU's peak counts once, so MFU is per GPU, not per rank")}
    achieved = context.get("achieved_flops")
    rate = achieved.value if achieved is not None else None
    # Each step's rate is an MFU sample too: one above the peak is as impossible as a value.
    fastest = max([rate, *(achieved.samples or [])]) if achieved is not None and rate else None
    if fastest is not None and total_peak > 0 and fastest > total_peak:
        # More than the peak is impossible: the peak was read low (a busy machine, a slow
        # moment of a shared host), so the ratio is withheld, with why, never published.
        what = "achieved" if rate > total_peak else "the fastest measured step's rate"
        extra = {**extra, "mfu_withheld": (
            f"{what} {fastest:.4g} FLOP/s exceeds the peak {total_peak:.4g} FLOP/s "
            f"({extra['peak_source']}): the peak was measured low, so MFU is not published")}
    found = [measured("peak_flops", total_peak, extra=extra),
             measured("memory_bandwidth", extra["memory_bandwidth"],
                      extra={"peak_source": extra["peak_source"], "method": "copy of a large "
                             "float32 buffer: bytes read + written per second"})]
    if achieved is not None and rate is not None and 0 < total_peak and "mfu_withheld" not in extra:
        readings = extra.get("readings", {})
        # A reading below the achieved rate (the peak is the higher one) would give a ratio
        # above 1: it is named, not divided by.
        found.append(measured("mfu", rate / total_peak,
                              samples=[s / total_peak for s in achieved.samples or []],
                              extra={"peak_source": extra["peak_source"],
                                     "against_each_reading": {
                                         when: rate / value
                                         for when, value in readings.items() if value >= rate},
                                     "readings_below_achieved": sorted(
                                         when for when, value in readings.items()
                                         if value < rate)}))
    found += _spec_sheet_mfu(context, rate, achieved, extra)
    return found


def _spec_sheet_mfu(context: CollectContext, rate: float | None, achieved: Any,
                    extra: dict[str, Any]) -> list[Metric]:
    """The achieved rate over the devices' datasheet dense peak in the run's precision (fp32
    on CUDA: TF32), beside the measured-peak MFU; nothing for a device the table does not
    know, nor for a CPU (its peak is only estimated)."""
    from harness.facts.datasheets import datasheet_for

    spec = context.spec
    if rate is None or spec.backend != "cuda" or not context.ranks:
        return []
    sheet = datasheet_for(context.ranks[0].device_name)
    per_device = sheet.peak(spec.precision, spec.backend) if sheet is not None else None
    if not per_device:
        return []
    devices = int(extra.get("devices") or 1)
    total = per_device * devices
    return [measured("mfu_spec", rate / total,
                     samples=[s / total for s in achieved.samples or []],
                     extra={"datasheet": sheet.name, "source": sheet.source,
                            "peak_per_device": per_device, "devices": devices,
                            "precision": spec.precision,
                            "method": "achieved FLOP/s over the datasheet's dense peak of the "
                                      "run's precision (fp32 on CUDA: TF32) times the devices"})]
