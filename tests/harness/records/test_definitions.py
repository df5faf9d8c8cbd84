"""One definition per metric: a training run's collectors and a pytest-benchmark file with
the same step times give the same step_time and throughput."""
from __future__ import annotations

import pytest

from harness.collectors.base import CollectContext
from harness.collectors.timing import step_time, throughput
from harness.core.spec import RunSpec
from harness.records.pytest_bench import _metrics
from harness.records.rundir import RankResult

TIMES = [0.25, 0.2, 0.3, 0.22, 0.21]


def test_collectors_and_pytest_benchmark_share_the_definitions() -> None:
    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=8, steps=5, warmup=1)
    context = CollectContext(spec=spec, ranks=[RankResult(
        rank=0, world_size=1, device_name="cpu", settings={}, step_times=list(TIMES))])
    ours = {m.name: m for m in step_time(context) + throughput(context)}
    theirs = {m.name: m for m in _metrics({"data": list(TIMES)}, {}, 8, "bench")}
    for name in ("step_time", "throughput"):
        assert ours[name].value == pytest.approx(theirs[name].value)
        assert ours[name].samples == pytest.approx(theirs[name].samples)
    assert ours["throughput"].value == pytest.approx(8 / 0.22)
    assert ours["throughput"].extra["aggregation"] == theirs["throughput"].extra["aggregation"]
