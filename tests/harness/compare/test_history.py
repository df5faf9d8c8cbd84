"""dtbench history: change points over commits per machine, found where they are and not
where there is only noise."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from harness.commands.cli import main
from harness.compare.history import Point, build_series, detect

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "record_v1.json")
                    .read_text())


def _series(rng: np.random.Generator, drop_at: int | None, noise: float = 0.02,
            n: int = 12) -> list[Point]:
    return [Point(f"c{i:02d}", f"2026-01-{i + 1:02d}",
                  [100.0 * (0.8 if drop_at is not None and i >= drop_at else 1.0)
                   * (1 + noise * float(rng.standard_normal())) for _ in range(3)])
            for i in range(n)]


@pytest.mark.parametrize("seed", range(10))
def test_a_20_percent_drop_at_the_7th_commit_is_one_step_there(seed: int) -> None:
    steps = detect(_series(np.random.default_rng(seed), drop_at=6))
    assert [(s.index, s.before, s.after) for s in steps] == [(6, "c05", "c06")]
    (step,) = steps
    assert step.ci[0] <= step.ratio <= step.ci[1]
    assert 0.75 < step.ratio < 0.85 and step.ci[1] < 1.0


@pytest.mark.parametrize("seed", range(10))
def test_equal_commits_with_noise_have_no_step(seed: int) -> None:
    assert detect(_series(np.random.default_rng(100 + seed), drop_at=None)) == []


def test_a_step_below_the_minimum_effect_is_not_reported() -> None:
    points = [Point(f"c{i}", f"t{i:02d}", [100.0 if i < 6 else 97.0]) for i in range(12)]
    assert detect(points) == []
    assert [s.index for s in detect(points, min_effect=0.02)] == [6]


def _record(commit: str, when: str, value: float, machine: str) -> dict:
    record = copy.deepcopy(GOLDEN)
    record["run_id"] = f"{when}-{commit}-{machine}"
    record["created_at"] = when
    record["code"] = {"commit": commit, "branch": "main", "dirty": False, "ci_url": None}
    record["machine"]["name"] = machine
    record["metrics"].append({"name": "throughput", "unit": "samples/s", "value": value,
                              "higher_is_better": True})
    return record


def test_history_command_finds_the_step_per_machine(tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(7)
    docs = []
    for machine, drop in (("box-a", 6), ("box-b", None)):
        for i in range(12):
            value = 100.0 * (0.8 if drop is not None and i >= drop else 1.0)
            for _ in range(2):
                docs.append(_record(f"{i:02d}" + "a" * 38, f"2026-01-{i + 1:02d}T00:00:00Z",
                                    value * (1 + 0.01 * float(rng.standard_normal())),
                                    machine))
    (tmp_path / "records.json").write_text(json.dumps(docs))
    series = {s.machine: s for s in build_series(docs, "throughput")}
    assert [s.index for s in series["box-a"].steps] == [6] and series["box-b"].steps == []
    out_json = tmp_path / "history.json"
    assert main(["history", str(tmp_path / "records.json"), "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "box-a" in text and "06aaaaaaaaaa" in text and "regression" in text
    written = json.loads(out_json.read_text())
    assert {s["machine"]: len(s["steps"]) for s in written} == {"box-a": 1, "box-b": 0}
    page = tmp_path / "history.html"
    assert main(["history", str(tmp_path / "records.json"), "-o", str(page)]) == 0
    html = page.read_text()
    # a plot per machine (one workload each), the step in the table, nothing external
    assert html.count('<img alt="throughput of hep_cnn') == 2
    assert "<h2>box-a: hep_cnn</h2>" in html and "05aaaaaaaaaa" in html
    assert "http" not in html.replace("http-equiv", "")


def test_history_page_to_a_missing_directory_is_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["history", str(tmp_path), "-o", str(tmp_path / "no" / "h.html")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_every_series_is_labelled_apart_by_what_differs(capsys) -> None:
    """Two 2-rank runs over gloo and MPI and one of a scaling suite: three series, each label
    naming what tells it from the others (the labels once ended in one character of the key,
    the same `[c]` for two workloads)."""
    docs = []
    for i, (comm, suite) in enumerate((("gloo", None), ("mpi", None), ("gloo", "scaling"))):
        record = _record("c" * 40, "2026-01-01T00:00:00Z", 100.0 + i, "box-a")
        record["spec"].update(comm=comm, suite=suite, world_size=2, nproc_per_node=2)
        record["spec_key"] = "ab" * 8 if comm == "gloo" else "cd" * 8
        docs.append(record)
    labels = [one.experiment for one in build_series(docs, "throughput")]
    assert len(labels) == 3 and len(set(labels)) == 3
    assert any("comm=mpi" in label for label in labels)
    assert sum("suite=scaling" in label for label in labels) == 1
    assert all(label.startswith("hep_cnn/") for label in labels)
