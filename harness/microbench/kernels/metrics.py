"""Names shared by kernel records and their readers (report, compare), in a module that
imports nothing heavy: the task name and the spec fields that tell kernels apart (which
metrics are constants of a kernel or of the machine, the metric catalogue says:
harness/core/metrics.py)."""
from __future__ import annotations

from typing import Any

TASK = "kernel"
KEY_FIELDS = ("kernel", "pass", "algorithm", "threads")


def kernel_label(spec: dict[str, Any]) -> str:
    """kernel/pass/algorithm/backend/precision/threads, as `compare` names a kernel spec."""
    parts = [spec.get("kernel"), spec.get("pass"), spec.get("algorithm"), spec.get("backend"),
             spec.get("precision"), f"t{spec.get('threads')}"]
    return "/".join(str(part) for part in parts)
