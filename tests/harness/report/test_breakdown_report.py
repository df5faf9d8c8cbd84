"""The report's "Where the time goes": shares per strategy and rank count, the traces a
--profile run kept, a stacked bar in HTML; energy per sample in the tables."""
from __future__ import annotations

import json
from pathlib import Path

from harness.commands.cli import main
from harness.records.record import Metric
from tests.harness.report.report_records import training


def breakdown(exposed: float) -> Metric:
    shares = {"compute": 0.6 - exposed, "comm_overlapped": 0.1, "comm_exposed": exposed,
              "data_wait": 0.05, "optimizer": 0.05, "waiting": 0.2}
    return Metric("time_breakdown", "1", exposed, False,
                  extra={"per_rank": [{"rank": r, **shares} for r in range(2)],
                         "source": ["the rank's trace of the profiled steps"],
                         "compute_spread": 0.04, "slowest_rank": 1})


def test_the_time_breakdown_section_lists_shares_and_links_traces(tmp_path: Path,
                                                                   capsys: object) -> None:
    record = training("20240102T030405Z-hep_cnn-aaaa0001", world_size=2, comm="gloo",
                      extra=[breakdown(0.15),
                             Metric("energy_per_sample", "J/sample", 0.125, False)])
    record["notes"]["traces"] = ["traces/20240102T030405Z-hep_cnn-aaaa0001/rank0.trace.json.gz"]
    (tmp_path / "run.json").write_text(json.dumps(record))
    assert main(["report", str(tmp_path / "run.json"), "-o", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    section = text.split("## Where the time goes", 1)[1]
    assert all(f" {share} |" in section for share in ("45.0%", "15.0%", "10.0%", "4.0%"))
    assert "rank0.trace.json.gz" in section
    assert "energy per sample" in text
    assert main(["report", str(tmp_path / "run.json"), "-o", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert "Where the time goes" in html and "stacked bars" in html
