"""A language model's throughput in tokens/s beside samples/s: the collector, the report's
training table, `report --by machine` and the throughput plot's second axis."""
from __future__ import annotations

from pathlib import Path

import pytest
from report_records import training, write_store

from harness.collectors import CollectContext
from harness.collectors.timing import throughput, tokens_per_s
from harness.commands.cli import main
from harness.records.record import Metric
from harness.report.plots import throughput_plot
from harness.report.view import views_of
from harness.rundir import RankResult
from harness.spec.specs import RunSpec

TIMES = [0.5, 0.25, 0.5, 1.0]


def collected(workload: str) -> list[Metric]:
    spec = RunSpec(workload=workload, size="tiny", batch_per_rank=4, steps=4, warmup=1)
    context = CollectContext(spec=spec, ranks=[RankResult(rank=0, world_size=1,
                                                          device_name="cpu", settings={},
                                                          step_times=TIMES)])
    context.metrics.extend(throughput(context))
    return tokens_per_s(context)


def test_tokens_per_s_is_throughput_times_the_window() -> None:
    (entry,) = collected("gpt")
    assert entry.unit == "tokens/s" and entry.extra["tokens_per_sample"] == 32
    assert entry.value == pytest.approx(32 * 4 / 0.5)
    assert entry.samples == pytest.approx([32 * 4 / t for t in TIMES])
    assert collected("lstm")[0].extra["tokens_per_sample"] == 35
    assert collected("resnet50") == []  # images hold no tokens


def gpt_record(run_id: str, speed: float) -> dict:
    record = training(run_id, workload="gpt", speed=speed)
    rate = next(m for m in record["metrics"] if m["name"] == "throughput")
    record["metrics"].append(Metric("tokens_per_s", "tokens/s", 32 * rate["value"], True,
                                    samples=[32 * s for s in rate["samples"]]).as_dict())
    return record


def test_tables_and_by_machine_show_tokens_per_s(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    store = write_store(tmp_path / "store", [gpt_record("20240102T030405Z-gpt", 1.0)])
    assert main(["report", str(store)]) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if "tokens/s" in line)
    assert header.index("throughput") < header.index("tokens/s")
    assert main(["report", str(store), "--by", "machine"]) == 0
    assert "### token throughput (tokens/s)" in capsys.readouterr().out


def test_the_throughput_plot_reads_tokens_on_its_right_axis() -> None:
    plain = throughput_plot(views_of([training("20240102T030405Z-hep", workload="hep_cnn")]))
    with_tokens = throughput_plot(views_of([gpt_record("20240102T030405Z-gpt", 1.0)]))
    assert "tokens/s" in with_tokens.caption and with_tokens.png and plain.png
    assert with_tokens.png != throughput_plot(views_of([training(
        "20240102T030405Z-gpt", workload="gpt")])).png  # the same bars, one more axis
