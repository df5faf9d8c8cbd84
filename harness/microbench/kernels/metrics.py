"""Names shared by kernel records and their readers (report, compare), in a module that
imports nothing heavy: the task name, the spec fields that tell kernels apart, and the
metrics that are constants of a kernel or of the machine rather than measurements."""
from __future__ import annotations

from typing import Any

TASK = "kernel"
KEY_FIELDS = ("kernel", "pass", "algorithm", "threads")
CONSTANT_METRICS = ("kernel_flops", "kernel_bytes", "arithmetic_intensity", "peak_flops",
                    "memory_bandwidth", "attainable_flops", "share_of_roof", "max_rel_error")


def kernel_label(spec: dict[str, Any]) -> str:
    """kernel/pass/algorithm/backend/precision/threads, as `compare` names a kernel spec."""
    parts = [spec.get("kernel"), spec.get("pass"), spec.get("algorithm"), spec.get("backend"),
             spec.get("precision"), f"t{spec.get('threads')}"]
    return "/".join(str(part) for part in parts)
