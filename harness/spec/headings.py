"""What a table column calls a spec field: the heading its run-field declaration gives it
(world_size: "ranks", batch_per_rank: "batch/rank"), else its name in words. The report,
publish and the run summary read it here; a metric's heading is the metric catalogue's
(harness/facts/metrics.py)."""
from __future__ import annotations

from harness.spec.specs import RUN_FIELDS

HEADINGS: dict[str, str] = {f.spec_name: f.heading for f in RUN_FIELDS
                            if f.heading is not None and f.spec_name is not None}


def field_heading(name: str) -> str:
    """A spec field as a column heading names it ("ranks", "channels last")."""
    return HEADINGS.get(name) or name.replace("_", " ")
