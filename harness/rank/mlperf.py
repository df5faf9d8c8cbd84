"""MLPerf-style event logging through mlperf-logging; logging never crashes a run.

Each run gets its own `logging.Logger` and `MLLogger`, so runs in one process do not share
handlers, and every event is also kept in memory for the record's `events` list.
"""
from __future__ import annotations

import json
import logging
import numbers
import time
import uuid
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants
from mlperf_logging.mllog.mllog import MLLogger

RUN_START = constants.RUN_START
RUN_STOP = constants.RUN_STOP
INIT_START = constants.INIT_START
INIT_STOP = constants.INIT_STOP
EPOCH_START = constants.EPOCH_START
EPOCH_STOP = constants.EPOCH_STOP
EVAL_START = constants.EVAL_START
EVAL_STOP = constants.EVAL_STOP
EVAL_ACCURACY = constants.EVAL_ACCURACY
SUBMISSION_BENCHMARK = constants.SUBMISSION_BENCHMARK
GLOBAL_BATCH_SIZE = constants.GLOBAL_BATCH_SIZE
OPT_BASE_LR = constants.OPT_BASE_LR
TRAIN_SAMPLES = constants.TRAIN_SAMPLES
EVAL_SAMPLES = constants.EVAL_SAMPLES
SEED = constants.SEED
STATUS_SUCCESS = constants.SUCCESS
STATUS_ABORTED = constants.ABORTED


class RunLog:
    """Writes `:::MLLOG` lines to a file and remembers the events for the record."""

    def __init__(self, path: Path | None) -> None:
        self.events: list[dict[str, Any]] = []
        self._logger = logging.getLogger(f"dtbench.mllog.{uuid.uuid4().hex}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        self._handler: logging.Handler | None = None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._handler = logging.FileHandler(path, encoding="utf-8")
                self._logger.addHandler(self._handler)
            except OSError:
                self._handler = None
        if self._handler is None:
            self._logger.addHandler(logging.NullHandler())
        self._mllogger = MLLogger(logger=self._logger, default_stack_offset=3)

    def _emit(self, kind: str, key: str, value: Any = None,
              metadata: dict[str, Any] | None = None) -> None:
        time_ms = int(time.time() * 1000)
        value = _plain(value)
        metadata = {k: _plain(v) for k, v in (metadata or {}).items()}
        self.events.append({"key": key, "event_type": kind, "time_ms": time_ms,
                            "value": value, "metadata": metadata})
        try:
            method = getattr(self._mllogger, kind)
            method(key=key, value=value, metadata=metadata, time_ms=time_ms)
        except Exception:  # noqa: BLE001 - a logging failure must not end a benchmark run
            pass

    def start(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self._emit("start", key, value, metadata)

    def end(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self._emit("end", key, value, metadata)

    def event(self, key: str, value: Any = None, metadata: dict[str, Any] | None = None) -> None:
        self._emit("event", key, value, metadata)

    def close(self) -> None:
        if self._handler is not None:
            self._handler.close()
            self._logger.removeHandler(self._handler)


def _plain(value: Any) -> Any:
    """JSON-safe version of a value (numpy and torch scalars become Python numbers)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    try:
        json.dumps(value)
        return value
    except TypeError:
        try:
            return float(value)
        except (TypeError, ValueError):
            return str(value)
