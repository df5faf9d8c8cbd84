"""Every metric a collector (or any other writer: predict, the kernel and collective
benchmarks, doctor, the pytest-benchmark reader) emits comes from the metric catalogue
(harness/facts/metrics.py): its unit and direction are read there, and a name the catalogue
lacks cannot be emitted."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from harness.collectors.base import measured
from harness.collectors.memory import peak_memory
from harness.facts.metrics import metric_info
from harness.records.definitions import step_time_metric, throughput_metric
from harness.rundir import RankResult
from harness.spec.specs import RunSpec

HARNESS = Path(__file__).resolve().parents[3] / "harness"


def _calls(*names: str) -> list[tuple[str, ast.Call]]:
    return [(str(path.relative_to(HARNESS)), node) for path in sorted(HARNESS.rglob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in names]


def test_writers_make_metrics_only_through_the_catalogue() -> None:
    # the one Metric(...) is inside measured(); the kernels' records call it `catalogued`
    assert [where for where, _ in _calls("Metric")] == ["records/record.py"]


def test_every_metric_a_writer_emits_is_in_the_catalogue() -> None:
    """Each measured(...) names a catalogued metric, or (an f-string) a catalogued family."""
    calls = _calls("measured", "catalogued")
    assert len(calls) > 50
    assert {where.split("/")[0] for where, _ in calls} >= {
        "collectors", "predict", "microbench", "store", "records", "commands"}
    unknown = []
    for where, call in calls:
        first = call.args[0]
        if isinstance(first, ast.Constant):
            info = metric_info(first.value)
            if info is None or info.family:
                unknown.append(f"{where}: {first.value}")
        elif isinstance(first, ast.JoinedStr):
            prefix = first.values[0]
            assert isinstance(prefix, ast.Constant)
            info = metric_info(prefix.value)
            if info is None or not info.family:
                unknown.append(f"{where}: {prefix.value}*")
    assert not unknown, f"not in harness/facts/metrics.py: {unknown}"


def test_metrics_named_at_run_time_are_catalogued_too() -> None:
    ranks = [RankResult(rank=0, world_size=1, device_name="cuda", settings={}, peak_memory=5,
                        memory={"reserved": 7, "device_used": 9})]
    from harness.collectors.base import CollectContext

    found = peak_memory(CollectContext(spec=RunSpec(workload="hep_cnn", size="tiny"),
                                       ranks=ranks))
    assert [m.name for m in found] == ["peak_memory", "peak_memory_reserved",
                                       "device_memory_used"]


def test_measured_takes_unit_and_direction_from_the_catalogue() -> None:
    rate = measured("throughput", 10.0, samples=[9.0, 11.0])
    assert (rate.unit, rate.higher_is_better, rate.samples) == ("samples/s", True, [9.0, 11.0])
    assert measured("phase_forward", 0.1).unit == "s"
    with pytest.raises(KeyError, match="catalogue"):
        measured("no_such_metric", 1.0)
    with pytest.raises(ValueError, match="state the unit"):
        measured("quality", 0.9)  # the target's unit and direction, passed by the collector
    quality = measured("quality", 12.0, unit="perplexity", higher_is_better=False)
    assert (quality.unit, quality.higher_is_better) == ("perplexity", False)


def test_the_shared_definitions_agree_with_the_catalogue() -> None:
    """step_time and throughput are built in harness/records/definitions.py, beside the
    pytest-benchmark reader: they state what the catalogue states."""
    for metric in (step_time_metric([0.1, 0.2]), throughput_metric(8, [0.1, 0.2])):
        info = metric_info(metric.name)
        assert info is not None
        assert (metric.unit, metric.higher_is_better) == (info.unit, info.higher_is_better)
