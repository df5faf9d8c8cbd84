"""data_wait and data_wait_share: how long training waited for its batches when --data files
fed it (harness/rank/feed.py), and whether the run was input-bound."""
from __future__ import annotations

import statistics

from harness.collectors.base import CollectContext, collector, measured
from harness.collectors.timing import step_times_over_ranks
from harness.records.record import Metric

# The share of the step spent waiting for the batch beyond which a run is input-bound: the
# loader, not the model, sets its pace (a tenth of the step, the share MLPerf-style reports
# treat as noise when they compare real data with synthetic).
INPUT_BOUND_SHARE = 0.10
MAX_IDS_SHOWN = 1024


@collector("data_wait", stage=1)
def data_wait(context: CollectContext) -> list[Metric]:
    fed = [r.data for r in context.ranks if r.data]
    waits = [d["waits"] for d in fed if d.get("waits")]
    if not waits:
        return []
    steps = min(len(w) for w in waits)
    per_step = [max(w[i] for w in waits) for i in range(steps)]  # the slowest rank's wait
    first = fed[0]
    info = {"format": first.get("format"), "path": first.get("path"),
            "loader_workers": first.get("loader_workers"),
            "skipped_samples": sum(int(d.get("skipped") or 0) for d in fed),
            "samples_read": sum(int(d.get("samples_read") or 0) for d in fed),
            "page_cache": first.get("page_cache"),
            "class_counts": first.get("class_counts") or None,
            # which samples each rank read (the first MAX_IDS_SHOWN): disjoint shards
            "sample_ids_per_rank": [list(d.get("sample_ids") or [])[:MAX_IDS_SHOWN]
                                    for d in fed],
            "aggregation": "the slowest rank's wait per step; value is the median"}
    found = [measured("data_wait", statistics.median(per_step),
                      samples=per_step, extra=info)]
    times = step_times_over_ranks(context)
    if times:
        share = statistics.median(per_step) / statistics.median(times)
        found.append(measured("data_wait_share", share,
                              extra={"input_bound": share > INPUT_BOUND_SHARE,
                                     "threshold": INPUT_BOUND_SHARE,
                                     "definition": "median data_wait / median step_time"}))
    return found
