"""The plain-text summary table printed at the end of `dtbench run`."""
from __future__ import annotations

from typing import Any

from harness.core.stats import repeat_spread, unstable
from harness.core.text import render_table
from harness.facts.metrics import heading_of, metric_info
from harness.facts.units import Scale, choose_scale
from harness.machine.load import is_busy, marked_status
from harness.records.record import metric
from harness.spec.headings import field_heading

# The figures the summary shows, each a column in its catalogue heading and one unit.
METRICS = ("throughput", "step_time", "achieved_flops", "mfu", "peak_memory", "time_to_train")
# The spec fields each row opens with.
FIELDS = ("workload", "size", "backend", "precision", "world_size", "batch_per_rank")


def _scale(records: list[dict[str, Any]], name: str) -> Scale:
    found = [entry for record in records if (entry := metric(record, name))
             and entry.get("value") is not None]
    info = metric_info(name)
    unit = str(found[0].get("unit") or "") if found and found[0].get("unit") else \
        (info.unit if info and info.unit else "")
    values = [v for entry in found for v in (entry["value"], *((entry.get("stats") or {})
                                                              .get("ci95") or []))]
    return choose_scale(name, unit, [float(v) for v in values if isinstance(v, int | float)])


def _cell(record: dict[str, Any], name: str, scale: Scale) -> str:
    found = metric(record, name)
    if not found or found.get("value") is None:
        return "-"
    text = scale.show(found["value"])
    ci = (found.get("stats") or {}).get("ci95")
    if name == "throughput" and ci:
        text += f" [{scale.show(ci[0])}, {scale.show(ci[1])}]"
    return text


def columns(scales: dict[str, Scale]) -> list[str]:
    """The headings: the spec fields' and the catalogue's words, each metric's unit."""
    return [*(field_heading(name) for name in FIELDS), "status",
            *(f"{heading_of(name)} ({scales[name].label})" if scales[name].label
              else heading_of(name) for name in METRICS), heading_of("quality")]


def summary_rows(records: list[dict[str, Any]],
                 scales: dict[str, Scale] | None = None) -> list[list[str]]:
    scales = scales or {name: _scale(records, name) for name in METRICS}
    rows = []
    for record in records:
        spec = record["spec"]
        quality = metric(record, "quality")
        rows.append([
            *(str(spec[name]) for name in FIELDS), marked_status(record),
            *(_cell(record, name, scales[name]) for name in METRICS),
            f"{quality['metric']}={quality['value']:.4g}" if quality and quality.get("value")
            is not None else "-",
        ])
    return rows


def _label(record: dict[str, Any]) -> str:
    spec = record["spec"]
    return (f"{spec['workload']} {spec['size']} {spec['backend']} {spec['precision']} "
            f"x{spec['world_size']} {spec.get('strategy') or 'ddp'}")


def _interval(record: dict[str, Any]) -> float | None:
    found = (metric(record, "throughput") or {}).get("interval_pct") or {}
    value = found.get("achieved")
    return float(value) if isinstance(value, int | float) else None


def precision_warnings(records: list[dict[str, Any]]) -> list[str]:
    """A line for every run whose figure missed its precision target, and for every spec whose
    repeats disagree more than their own intervals say (pyperf's unstable benchmark)."""
    lines = []
    for record in records:
        account = (record.get("notes") or {}).get("measurement") or {}
        if record.get("status") == "success" and account.get("target_met") is False:
            achieved = account.get("achieved_ci_pct")
            shown = f"+/-{achieved:.1f}%" if isinstance(achieved, int | float) else "no interval"
            drift = "; its step times drifted" if account.get("drifting") else ""
            lines.append(f"{_label(record)} missed its precision target: throughput "
                         f"{shown} against +/-{account.get('target_ci_pct'):g}% "
                         f"({account.get('stopped')} after {account.get('measured_steps')} "
                         f"steps{drift}); compare cannot resolve changes smaller than that")
    for spread, within, label, count in repeat_spreads(records):
        if unstable(spread, within):
            lines.append(f"{label}: its {count} runs' throughputs spread +/-{spread:.1f}% "
                         f"while each run's interval is +/-{within:.1f}%: the runs disagree "
                         "more than one run can show (another load, clock or placement); "
                         "compare with more --repeat")
    return lines


def repeat_spreads(records: list[dict[str, Any]]
                   ) -> list[tuple[float, float | None, str, int]]:
    """Per spec with two or more successful runs: the between-run spread of throughput (half
    the range of the runs' values over their median, percent), the within-run interval (the
    median of the runs' achieved intervals), the spec's label and the run count."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record.get("status") == "success" and (metric(record, "throughput") or {}).get(
                "value"):
            groups.setdefault(str(record.get("spec_key")), []).append(record)
    out = []
    for members in groups.values():
        if len(members) < 2:
            continue
        spread, within = repeat_spread(
            [float(metric(r, "throughput")["value"]) for r in members],
            [v for v in map(_interval, members) if v is not None])
        out.append((spread, within, _label(members[0]), len(members)))
    return out


def summary_table(records: list[dict[str, Any]]) -> str:
    scales = {name: _scale(records, name) for name in METRICS}
    text = render_table(columns(scales), summary_rows(records, scales))
    if any((metric(record, "throughput") or {}).get("stats") for record in records):
        text += "\n  throughput brackets: the in-process 95% interval of the median (one run)"
    problems = [f"  {r['spec']['workload']}: {r['status']}: {r['error']}" for r in records
                if r.get("error")]
    problems += [f"  {r['spec']['workload']}: measured on a busy machine: "
                 f"{r['load'].get('busy_reason')}" for r in records if is_busy(r)]
    problems += [f"  between runs: {label}: throughput +/-{spread:.1f}% across {count} runs"
                 + (f", +/-{within:.1f}% within a run" if within is not None else "")
                 for spread, within, label, count in repeat_spreads(records)]
    return text + ("\n" + "\n".join(problems) if problems else "")
