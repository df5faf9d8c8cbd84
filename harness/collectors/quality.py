"""time_to_train and quality for time-to-train runs (MLPerf rules: evaluation included)."""
from __future__ import annotations

from harness.collectors.base import CollectContext, collector, measured
from harness.records.record import Metric


@collector("quality")
def quality(context: CollectContext) -> list[Metric]:
    lead = context.ranks[0] if context.ranks else None
    if lead is None or lead.quality is None:
        return []
    from workloads import get_workload

    target = get_workload(context.spec.workload).preset(context.spec.size).target
    found = []
    if lead.target_reached and lead.time_to_train is not None:
        found.append(measured("time_to_train", lead.time_to_train,
                              extra={"from": "run_start", "to": "run_stop"}))
        if lead.quality_history and "step" in lead.quality_history[-1]:
            steps = int(lead.quality_history[-1]["step"])
            found.append(measured(
                "samples_to_target", float(steps * context.spec.global_batch),
                extra={"steps": steps, "global_batch": context.spec.global_batch,
                       "meaning": "samples trained until the evaluation that reached the "
                                  "target: statistical efficiency, apart from speed"}))
    value = lead.quality.get(target.metric)
    unit = "1" if target.metric in ("accuracy", "auc") else target.metric
    found.append(measured("quality", value, unit=unit, higher_is_better=target.higher_is_better,
                          extra={"metric": target.metric, "target": target.value,
                                 "reached": bool(lead.target_reached),
                                 "all": lead.quality, "history": lead.quality_history}))
    return found
