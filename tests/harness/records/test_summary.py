"""The index's summary of each record, and the catalog that serves whole-store commands from
it: the same machines, commits and metric values as the records themselves say, only the
latest version of each experiment loaded for a report, and a changed file read again."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main
from harness.compare.history import build_series
from harness.records.summary import INDEXED, latest_rows, summary_cells
from harness.store.directory import Store
from harness.store.sources import catalog_inputs, load_inputs

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = json.loads((ROOT / "tests" / "harness" / "golden" / "record_v1.json").read_text())


def made(run_id: str, commit: str, when: str, value: float, machine: str = "box-a",
         workload: str = "hep_cnn", task: str | None = None) -> dict[str, Any]:
    record = copy.deepcopy(GOLDEN)
    record.update(run_id=run_id, created_at=when,
                  code={"commit": commit, "branch": "main", "dirty": False, "ci_url": None})
    record["machine"]["name"] = machine
    record["spec"]["workload"] = workload
    record["spec_key"] = f"key-{workload}"
    if task:
        record["spec"]["task"] = task
    record["metrics"].append({"name": "throughput", "unit": "samples/s", "value": value,
                              "higher_is_better": True})
    return record


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "store")
    for i, commit in enumerate(("a" * 40, "b" * 40)):
        for repeat in range(2):
            for machine in ("box-a", "box-b"):
                store.add(made(f"2026-11-0{i + 1}-{repeat}-{machine}", commit,
                               f"2026-11-0{i + 1}T00:00:0{repeat}Z", 100.0 + i, machine))
    return store


def published_metrics() -> dict[str, tuple[str, bool]]:
    """Unit and direction of each metric, as the records of results/ hold them."""
    found: dict[str, tuple[str, bool]] = {}
    for path in sorted(ROOT.glob("results/*/*/*.json")):
        for entry in json.loads(path.read_text()).get("metrics", []):
            found.setdefault(entry["name"], (entry["unit"], entry["higher_is_better"]))
    return found


def test_indexed_metrics_have_the_units_and_directions_records_carry() -> None:
    published = published_metrics()
    assert {"throughput", "step_time", "mfu", "peak_memory"} <= set(published)
    for info in INDEXED:
        if info.name in published:
            assert published[info.name] == (info.unit, info.higher_is_better), info.name


def test_summary_cells_say_what_the_record_says() -> None:
    cells = summary_cells(made("r", "c" * 40, "2026-11-01T00:00:00Z", 12.5))
    assert (cells["machine"], cells["code_commit"], cells["code_branch"],
            cells["code_dirty"]) == ("box-a", "c" * 40, "main", 0)
    assert cells["m_throughput"] == 12.5
    assert cells["m_step_time"] == next(m["value"] for m in GOLDEN["metrics"]
                                        if m["name"] == "step_time")


def test_record_lists_from_the_index_keep_the_busy_and_imprecise_marks(tmp_path: Path
                                                                       ) -> None:
    """publish lists records from index rows: a busy machine's run and a run that missed its
    precision target show their marks there as in tables built from the records."""
    from harness.machine.load import marked_status
    from harness.records.summary import summary_record

    quiet = made("quiet", "c" * 40, "2026-11-01T00:00:00Z", 12.5)
    marked = made("marked", "c" * 40, "2026-11-01T00:00:01Z", 12.5)
    marked["load"] = {**(marked.get("load") or {}), "busy": True, "busy_reason": "2 loops"}
    marked.setdefault("notes", {})["measurement"] = {"target_met": False}
    store = Store(tmp_path / "store")
    for record in (quiet, marked):
        store.add(record)
    rows = {row["run_id"]: row for row in store.summary_rows()}
    assert (rows["quiet"]["busy"], rows["quiet"]["imprecise"]) == (0, 0)
    assert (rows["marked"]["busy"], rows["marked"]["imprecise"]) == (1, 1)
    shown = {run_id: marked_status(summary_record(row, ())) for run_id, row in rows.items()}
    assert shown == {"quiet": "success", "marked": "success (busy, imprecise)"}
    assert marked_status(marked) == shown["marked"]


def test_latest_rows_keep_each_machines_newest_commit_and_every_other_task(store: Store
                                                                          ) -> None:
    rows = store.summary_rows()
    rows.append({"run_id": "comm", "task": "comm", "machine": "box-a", "code_commit": "a" * 40,
                 "created_at": "2026-01-01"})
    latest = latest_rows(rows)
    assert sorted(r["run_id"] for r in latest) == sorted(
        ["comm", *(f"2026-11-02-{i}-{m}" for i in range(2) for m in ("box-a", "box-b"))])


def test_history_from_the_index_equals_history_from_the_records(store: Store) -> None:
    catalog = catalog_inputs([str(store.root)])
    full = load_inputs([str(store.root)]).records

    def shape(series: list) -> list:
        return [(s.machine, s.experiment, [(p.label, sorted(p.values)) for p in s.points])
                for s in series]
    assert shape(build_series(catalog.summaries(), "throughput")) == \
        shape(build_series(full, "throughput"))


def test_a_file_changed_after_indexing_is_indexed_and_validated_again(
        store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    path = sorted(store.root.glob("*/*/*.json"))[0]
    record = json.loads(path.read_text())
    record["metrics"][-1]["value"] = 555.0
    path.write_text(json.dumps(record))
    row = next(r for r in store.summary_rows() if r["run_id"] == record["run_id"])
    assert row["m_throughput"] == 555.0
    path.write_text('{"schema_version": 1, "run_id": "x"}')  # now invalid
    catalog = catalog_inputs([str(store.root)])
    assert record["run_id"] not in {r["run_id"] for r in catalog.rows}
    assert any(str(path.name) in w for w in catalog.warnings)


def test_report_shows_each_experiments_latest_commit_and_counts_the_rest(
        store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.md"
    assert main(["report", str(store.root), "--runs", "-o", str(out)]) == 0
    text = out.read_text()
    assert "4 records (4 success)" in text and "4 older records" in text
    assert "2026-11-02-0-box-a" in text and "2026-11-01-0-box-a" not in text
    assert main(["report", str(store.root), "--by", "machine", "-o", str(out)]) == 0
    assert "4 older records" in out.read_text()
