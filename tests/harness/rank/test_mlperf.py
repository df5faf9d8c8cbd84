"""MLPerf-style run logs: lines the official parser reads, events kept, logging never crashes."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from mlperf_logging.compliance_checker import mlp_parser

from harness.rank import mlperf


def test_log_lines_parse_with_the_official_parser(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "run.mllog"
    log = mlperf.RunLog(path)
    log.event(mlperf.SUBMISSION_BENCHMARK, "hep_cnn")
    log.start(mlperf.RUN_START)
    log.event(mlperf.EVAL_ACCURACY, np.float32(0.75), metadata={"epoch_num": np.int64(1)})
    log.end(mlperf.RUN_STOP, metadata={"status": mlperf.STATUS_SUCCESS})
    log.close()
    lines, errors = mlp_parser.parse_file(str(path), ruleset="6.1.0")
    assert errors == []
    assert [line.key for line in lines] == ["submission_benchmark", "run_start", "eval_accuracy",
                                           "run_stop"]
    accuracy = lines[2].value
    assert accuracy["value"] == 0.75 and accuracy["metadata"]["epoch_num"] == 1


def test_events_are_kept_in_memory_as_plain_values() -> None:
    log = mlperf.RunLog(None)
    log.start(mlperf.RUN_START)
    log.event(mlperf.EVAL_ACCURACY, np.float32(0.5), metadata={"epoch_num": np.int32(2)})
    log.end(mlperf.RUN_STOP)
    log.close()
    assert [(e["key"], e["event_type"]) for e in log.events] == [
        ("run_start", "start"), ("eval_accuracy", "event"), ("run_stop", "end")]
    assert type(log.events[1]["value"]) is float
    assert json.loads(json.dumps(log.events[1])) == {**log.events[1], "metadata": {"epoch_num": 2}}
    assert log.events[0]["time_ms"] <= log.events[2]["time_ms"]


def test_an_unwritable_log_path_does_not_stop_the_run(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    log = mlperf.RunLog(tmp_path / "afile" / "logs" / "run.mllog")
    log.start(mlperf.RUN_START)
    log.end(mlperf.RUN_STOP, value=object())
    log.close()
    assert [e["key"] for e in log.events] == ["run_start", "run_stop"]
    assert isinstance(log.events[1]["value"], str)


def test_two_logs_do_not_share_handlers(tmp_path: Path) -> None:
    first, second = mlperf.RunLog(tmp_path / "a.mllog"), mlperf.RunLog(tmp_path / "b.mllog")
    first.event(mlperf.SEED, 1)
    second.event(mlperf.SEED, 2)
    first.close()
    second.close()
    assert (tmp_path / "a.mllog").read_text().count(":::MLLOG") == 1
    assert (tmp_path / "b.mllog").read_text().count(":::MLLOG") == 1
