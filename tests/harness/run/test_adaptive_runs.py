"""Adaptive run length through `dtbench run`: two ranks stop together on rank 0's decision, and
a run beside busy loops keeps to its time budget and says the target was missed."""
from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main


def records(store: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(store.rglob("*.json"))]


def metric(record: dict[str, Any], name: str) -> dict[str, Any]:
    return next(m for m in record["metrics"] if m["name"] == name)


def test_two_ranks_stop_together_on_rank_zeros_decision(tmp_path: Path) -> None:
    # 0.01% cannot be reached in a second: the budget ends the run, whichever rank's clock
    # would have said so first; rank 1 follows rank 0's word.
    assert main(["run", "-w", "lstm", "--size", "tiny", "-n", "2", "--target-ci", "0.01",
                 "--max-time", "1", "--out", str(tmp_path), "-q"]) == 0
    (record,) = records(tmp_path)
    account = record["notes"]["measurement"]
    assert account["rule"] == "adaptive" and account["stopped"] == "time budget spent"
    assert account["target_met"] is False
    measured, discarded = account["measured_steps"], account["discarded_steps"]
    losses = record["trajectory"]["losses"]
    assert len(losses) == 2 and len(losses[0]) == len(losses[1]) == measured
    kept = measured - discarded
    assert metric(record, "throughput")["measured_steps"] == kept
    assert metric(record, "comm_bytes")["stats"]["n"] == kept  # each kept step's bytes
    outside = metric(record, "comm_bytes_outside_steps")
    assert "stop decision" in outside["phases"]  # the decisions' bytes are not a step's
    assert metric(record, "throughput")["interval_pct"]["met"] is False


@pytest.fixture
def two_busy_loops() -> Iterator[None]:
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def test_a_run_beside_busy_loops_keeps_its_budget_and_says_it_missed(
        tmp_path: Path, two_busy_loops: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "-w", "lstm", "--size", "tiny", "--target-ci", "0.2", "--max-time", "2",
                 "--out", str(tmp_path), "-q"]) == 0
    (record,) = records(tmp_path)
    account = record["notes"]["measurement"]
    assert account["stopped"] == "time budget spent" and account["target_met"] is False
    # no interval at all where fewer than six steps fit the budget
    assert account["achieved_ci_pct"] is None or account["achieved_ci_pct"] > 0.2
    # measured within the budget, but for the one step that crossed it
    seconds = record["trajectory"]["step_seconds"]
    assert sum(seconds[:-1]) < 2.0 and len(seconds) == account["measured_steps"]
    err = capsys.readouterr().err
    assert "missed its precision target" in err and "lstm" in err
