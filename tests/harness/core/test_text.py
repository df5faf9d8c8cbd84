"""The summary table printed at the end of `dtbench run`."""
from __future__ import annotations

from typing import Any

import pytest

from harness.core.text import human_bytes, render_table
from harness.run.summary_table import summary_table


def record(workload: str, status: str, error: str | None = None,
           metrics: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"spec": {"workload": workload, "size": "tiny", "backend": "cpu", "precision": "fp32",
                     "world_size": 1, "batch_per_rank": 8},
            "status": status, "error": error, "metrics": metrics or []}


@pytest.mark.parametrize("value, text", [(None, "-"), (512, "512 B"), (2048, "2.00 KiB"),
                                         (3 * 2**30, "3.00 GiB"), (5 * 2**50, "5120.00 TiB")])
def test_human_bytes(value: float | None, text: str) -> None:
    assert human_bytes(value) == text


def test_render_table_aligns_columns() -> None:
    lines = render_table(("a", "long"), [["xyz", "1"], ["q", "22"]]).splitlines()
    assert lines == ["a    long", "---  ----", "xyz  1", "q    22"]


def test_summary_shows_values_ci_and_problems() -> None:
    success = record("lstm", "success", metrics=[
        {"name": "throughput", "value": 123.456, "stats": {"ci95": [120.0, 130.0]}},
        {"name": "peak_memory", "value": 2**20},
        {"name": "quality", "value": 0.91234, "metric": "accuracy"}])
    skipped = record("resnet50", "skipped", error="backend cuda: no CUDA device")
    text = summary_table([success, skipped])
    # a column's unit in its heading, the catalogue's where the record states none
    assert "123.5 [120.0, 130.0]" in text and "throughput (samples/s)" in text
    assert "peak memory (MiB)" in text and " 1.000 " in text and "accuracy=0.9123" in text
    assert text.splitlines()[-2].startswith("  throughput brackets: the in-process 95% interval")
    assert text.splitlines()[-1] == "  resnet50: skipped: backend cuda: no CUDA device"
    assert text.count("\n") == 5
