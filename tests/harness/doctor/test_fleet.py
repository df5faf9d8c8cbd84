"""A fleet of nodes' doctor records: the slow node named by the median-absolute-deviation
rule, nodes within noise left alone, `dtbench doctor --fleet` exits 1 only when one stands
out."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.doctor.fleet import fleet, outlier_lines

ROOT = Path(__file__).resolve().parents[3]


def doctor_record(node: str, gemm: float, copy: float, temperature: float,
                  created: str = "2026-11-27T12:00:00Z") -> dict[str, Any]:
    def metric(name: str, unit: str, value: float, higher: bool) -> dict[str, Any]:
        return {"name": f"doctor_{name}", "unit": unit, "value": value,
                "higher_is_better": higher, "verdict": "pass"}

    return {"schema_version": 1, "run_id": f"20261127T120000Z-doctor-{node}",
            "created_at": created, "status": "success", "error": None,
            "harness": {"version": "0.1.0", "git_commit": None, "dirty": None},
            "machine": {"hostname": node, "machine_id": node, "cpu_model": "x"},
            "software": {}, "spec": {"task": "doctor", "workload": "doctor", "size": "-",
                                     "precision": "-", "backend": "cpu"},
            "metrics": [metric("gemm_fp32", "GFLOP/s", gemm, True),
                        metric("copy_bandwidth", "GB/s", copy, True),
                        metric("gpu0_temperature", "°C", temperature, False)],
            "events": [], "notes": {"verdict": "pass"}}


def six_nodes(slow: str | None) -> list[dict[str, Any]]:
    noise = random.Random(7)
    records = []
    for index in range(6):
        node = f"node{index}"
        gemm = 1000.0 * (1 + noise.uniform(-0.02, 0.02)) * (0.7 if node == slow else 1.0)
        records.append(doctor_record(node, gemm, 200.0 * (1 + noise.uniform(-0.03, 0.03)),
                                     60 + noise.uniform(-2, 2)))
    return records


def test_one_node_thirty_percent_slower_is_named_and_no_other() -> None:
    nodes, figures = fleet(six_nodes(slow="node3"))
    assert nodes == [f"node{i}" for i in range(6)]
    outliers = {f.name: sorted(f.outliers) for f in figures}
    assert outliers == {"doctor_gemm_fp32": ["node3"], "doctor_copy_bandwidth": [],
                        "doctor_gpu0_temperature": []}
    (line,) = outlier_lines(figures)
    assert line.startswith("node3: doctor_gemm_fp32") and "against the fleet median" in line


def test_nodes_within_noise_are_not_named() -> None:
    _, figures = fleet(six_nodes(slow=None))
    assert outlier_lines(figures) == []


def test_a_hotter_node_stands_out_where_lower_is_better_and_the_latest_record_counts() -> None:
    records = six_nodes(slow=None)
    records[1]["metrics"][2]["value"] = 95.0  # node1 runs hot
    old = doctor_record("node2", 300.0, 200.0, 60.0, created="2026-11-01T00:00:00Z")
    _, figures = fleet([*records, old])
    named = {f.name: sorted(f.outliers) for f in figures}
    assert named["doctor_gpu0_temperature"] == ["node1"]
    assert named["doctor_gemm_fp32"] == []  # node2's old slow record is not its latest


def test_doctor_fleet_command_names_the_node_and_exits_1(tmp_path: Path) -> None:
    for record in six_nodes(slow="node3"):
        (tmp_path / f"{record['run_id']}.json").write_text(json.dumps(record))
    done = subprocess.run([sys.executable, "-m", "harness", "doctor", "--fleet", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "6 node(s)" in done.stdout and "! node3: doctor_gemm_fp32" in done.stdout
    assert "node0:" not in done.stdout
    even = tmp_path / "even"
    even.mkdir()
    for record in six_nodes(slow=None):
        (even / f"{record['run_id']}.json").write_text(json.dumps(record))
    done = subprocess.run([sys.executable, "-m", "harness", "doctor", "--fleet", str(even)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "no node stands out" in done.stdout


def test_publish_shows_the_fleet_page(tmp_path: Path) -> None:
    from harness.commands.cli import main

    store = tmp_path / "records"
    store.mkdir()
    for record in six_nodes(slow="node3"):
        (store / f"{record['run_id']}.json").write_text(json.dumps(record))
    assert main(["publish", str(store), "-o", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "fleet.html").read_text()
    assert "6 node(s)" in page and "node3: doctor_gemm_fp32" in page
    assert 'href="fleet.html"' in (tmp_path / "site" / "index.html").read_text()
