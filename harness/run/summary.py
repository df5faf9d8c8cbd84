"""The plain-text summary table printed at the end of `dtbench run`."""
from __future__ import annotations

from typing import Any

from harness.core.machine_load import is_busy, marked_status
from harness.core.text import human_bytes, render_table
from harness.records.record import metric


def _value(record: dict[str, Any], name: str, scale: float = 1.0, fmt: str = "{:.2f}",
           with_ci: bool = False) -> str:
    found = metric(record, name)
    if not found or found.get("value") is None:
        return "-"
    text = fmt.format(found["value"] / scale)
    stats = found.get("stats")
    if with_ci and stats:
        low, high = stats["ci95"]
        text += f" [{fmt.format(low / scale)}, {fmt.format(high / scale)}]"
    return text


COLUMNS = ("workload", "size", "backend", "prec", "ws", "bs", "status", "throughput/s (CI95)",
           "step s", "GFLOP/s", "MFU", "peak mem", "ttt s", "quality")


def summary_rows(records: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for record in records:
        spec = record["spec"]
        quality = metric(record, "quality")
        rows.append([
            spec["workload"], spec["size"], spec["backend"], spec["precision"],
            str(spec["world_size"]), str(spec["batch_per_rank"]), marked_status(record),
            _value(record, "throughput", with_ci=True),
            _value(record, "step_time", fmt="{:.4f}"),
            _value(record, "achieved_flops", scale=1e9, fmt="{:.1f}"),
            _value(record, "mfu", fmt="{:.3f}"),
            human_bytes((metric(record, "peak_memory") or {}).get("value")),
            _value(record, "time_to_train", fmt="{:.1f}"),
            f"{quality['metric']}={quality['value']:.4g}" if quality and quality.get("value")
            is not None else "-",
        ])
    return rows


def summary_table(records: list[dict[str, Any]]) -> str:
    text = render_table(COLUMNS, summary_rows(records))
    problems = [f"  {r['spec']['workload']}: {r['status']}: {r['error']}" for r in records
                if r.get("error")]
    problems += [f"  {r['spec']['workload']}: measured on a busy machine: "
                 f"{r['load'].get('busy_reason')}" for r in records if is_busy(r)]
    return text + ("\n" + "\n".join(problems) if problems else "")
