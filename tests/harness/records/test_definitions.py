"""One definition per metric: a training run's collectors and a pytest-benchmark file with
the same step times give the same step_time and throughput."""
from __future__ import annotations

import statistics
from datetime import UTC, datetime

import pytest

from harness.collectors.base import CollectContext
from harness.collectors.timing import step_time, throughput
from harness.rundir import RankResult
from harness.spec.specs import RunSpec
from harness.store.pytest_benchmark import _metrics

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


def _record(times: list[float], run_id: str) -> dict[str, object]:
    """A record whose timing and FLOP metrics come from the collectors, as a run writes them."""
    from harness.collectors.base import collect
    from harness.microbench.peak import PeakResult
    from harness.records.record import build_record

    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=8, steps=len(times),
                   warmup=1)
    peak = PeakResult(backend="cpu", device_name="cpu", precision="fp32", threads=1,
                      flops=1e12, memory_bandwidth=1e9, per_size={"64": 1e12},
                      measured_at="2024-01-01T00:00:00+00:00", torch="x")
    context = CollectContext(spec=spec, ranks=[RankResult(
        rank=0, world_size=1, device_name="cpu", settings={}, step_times=list(times))],
        flops_per_sample=1_000_000, peak=peak)
    return build_record(run_id=run_id, created=datetime(2024, 1, 1, tzinfo=UTC),
                          status="success", error=None, harness={"version": "x"},
                          machine={"machine_id": "m"}, software={}, spec=spec.as_dict(),
                          metrics=collect(context), events=[], extra={"spec_key": "k"})


@pytest.mark.parametrize("runs", [1, 3])
def test_compare_shows_the_records_own_rates(runs: int) -> None:
    """compare's medians of throughput, achieved FLOP/s and MFU are the values the records
    hold (global batch over the median step), not the median of the per-step rates, which
    differs for an even step count (the issue's 36.62/s against report's 36.37/s)."""
    from harness.compare.rows import compare_records

    even = [0.25, 0.2, 0.3, 0.22, 0.21, 0.24]
    base = [_record([t * (1 + k / 50) for t in even], f"b{k}") for k in range(runs)]
    cand = [_record([t * 1.1 * (1 + k / 50) for t in even], f"c{k}") for k in range(runs)]
    rows = {row.metric: row for row in compare_records(base, cand, 5.0).rows}
    for name in ("throughput", "achieved_flops", "mfu", "step_time"):
        values = [[m["value"] for m in r["metrics"] if m["name"] == name][0] for r in base]
        cands = [[m["value"] for m in r["metrics"] if m["name"] == name][0] for r in cand]
        row = rows[name]
        assert row.baseline == pytest.approx(statistics.median(values), rel=1e-12), name
        assert row.candidate == pytest.approx(statistics.median(cands), rel=1e-12), name
        assert row.test is not None and row.test.ci_low <= row.ratio <= row.test.ci_high
    assert rows["throughput"].baseline != pytest.approx(
        statistics.median(8 / t for t in even), rel=1e-6)
