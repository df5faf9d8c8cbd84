"""The published site's charts keep their tick labels and legends inside their figures
(matplotlib's text extents after drawing): the machines chart of the index and of each
workload's page and each machine's trend plots, for machines with long names over several
commits, and the machines chart of the three published machines (results/)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main
from tests.harness.report.chart_extents import measured_charts
from tests.harness.report.report_records import training, write_store

MACHINES = ("a-build-machine-with-a-rather-long-name-01", "b-build-machine-with-a-long-name",
            "c-short")
COMMITS = [f"{i:x}" * 12 for i in range(1, 4)]


def fleet() -> list[dict[str, Any]]:
    """Each machine: hep_cnn and alexnet, fp32 and bf16, and a 2-rank gloo hep_cnn, at three
    commits."""
    records = []
    for m, machine in enumerate(MACHINES):
        for c, commit in enumerate(COMMITS):
            for workload in ("hep_cnn", "alexnet"):
                for precision in ("fp32", "bf16"):
                    record = training(f"2024030{c + 1}T0{m}00{len(records) % 60:02d}Z-{m}",
                                      workload=workload, precision=precision,
                                      speed=(1 + m) * (1 + c / 20),
                                      created=f"2024-03-0{c + 1}T0{m}:00:00Z")
                    record["machine"] = {**record["machine"], "name": machine}
                    record["code"] = {"commit": commit, "branch": "main", "dirty": False,
                                      "ci_url": None}
                    records.append(record)
            wide = training(f"2024030{c + 1}T0{m}5900Z-ws2-{m}", world_size=2, comm="gloo",
                            created=f"2024-03-0{c + 1}T0{m}:59:00Z")
            wide["machine"] = {**wide["machine"], "name": machine}
            wide["code"] = {"commit": commit, "branch": "main", "dirty": False, "ci_url": None}
            records.append(wide)
    return records


def test_the_sites_charts_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the pages in this process, so that every figure they draw is measured here
    monkeypatch.setattr("harness.publish.site._pages_in_parallel", lambda builder, pages: None)
    store = write_store(tmp_path / "store", fleet())
    with measured_charts() as found:
        assert main(["publish", str(store), "-o", str(tmp_path / "site")]) == 0
    drawn = sorted((tmp_path / "site" / "plots").glob("*.png"))
    # the index's chart, two workloads' and two trends a machine and workload at least
    assert len(found) == len(drawn) >= 3 + 2 * len(MACHINES) * 2
    assert [(number, what) for number, what in found if what] == []


def test_the_published_machines_chart_fits() -> None:
    from harness.records.record import load_record
    from harness.report.machineplot import machines_chart
    from harness.report.machines import default_reference
    from harness.report.view import views_of
    from tests.harness.report.test_published_results import published_records

    views = views_of([load_record(path) for path in published_records()])
    with measured_charts() as found:
        plot = machines_chart(views, default_reference(views))
    assert plot.png is not None and len(found) == 1 and found[0][1] == []
