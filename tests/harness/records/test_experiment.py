"""No view pools records that differ in an identity field: generated records, each differing
from a base record in exactly one field of the run-field declaration (and one differing only
in machine, one only in commit), go through compare, report, report --by machine, history,
publish and predict's calibration, and every group a view forms holds one of them alone.

Each generated record comes twice (two repeats of one experiment may pool; two experiments
may not), and each variant is told by its run ids, not by harness/records/experiment.py, so
the test does not take the identity's word for what differs."""
from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main
from harness.spec.fields import spec_key
from harness.spec.kinds import IDENTITY_FIELDS
from harness.spec.specs import RUN_FIELDS
from tests.harness.report.report_records import training

CHOICES = {f.spec_name: f.choices for f in RUN_FIELDS if f.choices and f.spec_name}
# a value for an identity field the base record leaves unset
UNSET = {"straggler": [1, 2.0], "data": "data/other", "suite": "scaling", "share_gpu": True,
         "optimizer": "lars", "lr_scaling": "linear", "warmup_epochs": 1.0, "lars_eta": 0.01,
         "straggler_work": "busy", "speed_probe": True}
OLDER, NEWER = "a" * 40, "b" * 40


def other_value(name: str, value: Any) -> Any:
    """A different value of the field's type (another declared choice where it has them)."""
    if value is None:
        return UNSET[name]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, dict):
        return {**value, "bucket_mb": 50}
    choices = [c for c in CHOICES.get(name) or () if c != value]
    return choices[0] if choices else f"{value}-other"


def base_record(variant: str, repeat: int, order: int) -> dict[str, Any]:
    record = training(f"2024010{order % 9 + 1}T{order:06d}Z-{variant}-r{repeat}",
                      created=f"2024-01-02T03:{order // 60:02d}:{order % 60:02d}Z")
    record["spec"]["suite"] = "quick"
    record["machine"]["name"] = "box"
    record["code"] = {"commit": NEWER, "branch": "main", "dirty": False, "ci_url": None}
    return record


def generated() -> list[dict[str, Any]]:
    """The base, a variant per identity field, the base on another machine and at an older
    commit: two runs each, their run ids naming the variant."""
    records = []
    names = ["base", *IDENTITY_FIELDS, "machine", "commit"]
    for order, variant in enumerate(names):
        for repeat in range(2):
            record = base_record(variant, repeat, 2 * order + repeat + 1)
            spec = record["spec"]
            if variant in IDENTITY_FIELDS:
                spec[variant] = other_value(variant, spec.get(variant))
            elif variant == "machine":
                record["machine"]["name"] = "other-box"
            elif variant == "commit":
                record["code"]["commit"] = OLDER
                record["created_at"] = f"2023-12-01T00:00:0{repeat}Z"
            record["spec_key"] = spec_key(spec, RUN_FIELDS)  # as `dtbench run` writes it
            records.append(record)
    return records


def variant_of(run_id: str) -> str:
    return run_id.split("Z-", 1)[1].rsplit("-r", 1)[0]


def assert_apart(groups: Iterable[Iterable[str]], view: str) -> set[str]:
    """Every group of run ids holds one variant alone; the variants shown."""
    shown = set()
    for members in groups:
        variants = {variant_of(run) for run in members}
        assert len(variants) == 1, f"{view} pools {sorted(variants)}"
        shown |= variants
    return shown


RECORDS = generated()
EVERY = {"base", *IDENTITY_FIELDS, "machine", "commit"}
LATEST = EVERY - {"commit"}  # the views of each experiment's latest commit leave it out


def test_the_generator_varies_each_declared_identity_field_once() -> None:
    assert len(IDENTITY_FIELDS) >= 20 and "suite" in IDENTITY_FIELDS
    base = RECORDS[0]["spec"]
    for record in RECORDS:
        variant = variant_of(record["run_id"])
        differ = {name for name in set(base) | set(record["spec"])
                  if record["spec"].get(name) != base.get(name)}
        assert differ == ({variant} if variant in IDENTITY_FIELDS else set()), variant


def test_compare_keeps_them_apart() -> None:
    from harness.compare.matching import match_specs

    pairs, only_base, only_cand = match_specs(RECORDS, copy.deepcopy(RECORDS))
    assert not only_base and not only_cand
    shown = assert_apart(([r["run_id"] for r in side.records] for pair in pairs for side in pair),
                         "compare")
    assert shown == LATEST


def test_report_keeps_them_apart() -> None:
    from harness.records.summary import latest_rows
    from harness.report.compose import build_report
    from harness.report.view import configurations, views_of

    views = views_of(RECORDS)
    bars = configurations(views, several=True)
    assert assert_apart(([v.run_id for v in group] for group in bars.values()),
                        "report's plots") == EVERY
    rows = [{**r["spec"], "spec_key": r["spec_key"], "machine": "box" if variant_of(
        r["run_id"]) != "machine" else "other-box", "created_at": r["created_at"],
             "code_commit": r["code"]["commit"], "run_id": r["run_id"]} for r in RECORDS]
    assert {variant_of(row["run_id"]) for row in latest_rows(rows)} == LATEST
    report = build_report(views, paths=["x"], files=[], skipped=[], regenerate="", by="record")
    notes = [note for section in report.sections for table in section.tables
             for note in table.notes if note.startswith("between runs")]
    # a note per (experiment, machine, commit) measured twice: no note pools two of them
    assert len(notes) == len(EVERY) and all("across 2 runs" in note for note in notes)
    # rows that read alike are repeats of one experiment, in every table of records (the run
    # id behind each row is the table's, not a cell)
    tables = [(section, table) for section in report.sections for table in section.tables
              if table.row_runs]
    assert {section.title for section, _ in tables} >= {"Training"}
    for section, table in tables:
        alike: dict[tuple[str, ...], list[str]] = {}
        for row, run in zip(table.rows, table.row_runs, strict=True):
            alike.setdefault(tuple(row), []).append(run)
        assert_apart(alike.values(), f"report's {section.title} table {table.title}")


def test_report_by_machine_keeps_them_apart() -> None:
    from harness.report.machines import by_machine, cells
    from harness.report.markdown import render
    from harness.report.view import views_of

    views = views_of(RECORDS)
    found = cells(views)
    assert assert_apart(found.members.values(), "report --by machine") == LATEST
    text = render(by_machine(views, None, summary="", regenerate=""))
    throughput = text.split("### throughput (samples/s)")[1].split("###")[0]
    rows = [line for line in throughput.splitlines() if line.startswith("| hep")]
    # one row per experiment (the machine variant shares the base's row, in its column)
    assert len(rows) == len(LATEST) - 1 == len(set(rows))


def test_history_keeps_them_apart() -> None:
    from harness.compare.history import build_series

    series = build_series(RECORDS, "throughput")
    labels = [(one.machine, one.experiment) for one in series]
    assert len(series) == len(LATEST) == len(set(labels))
    assert all(len(point.values) == 2 for one in series for point in one.points)
    assert sorted(len(one.points) for one in series) == [1] * (len(LATEST) - 1) + [2]


def test_publish_keeps_them_apart(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for record in RECORDS:
        folder = store / record["machine"]["name"] / record["code"]["commit"][:12]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{record['run_id']}.json").write_text(json.dumps(record))
    assert main(["publish", str(store), "-o", str(tmp_path / "site")]) == 0
    page = (tmp_path / "site" / "machines" / "box.html").read_text()
    latest = page.split('id="latest"')[1].split("</table>")[0]
    rows = latest.split("<tbody>")[1].split("</tr>")[:-1]
    runs = [re.findall(r">(\d{8}T\d{6}Z-[a-z_]+-r1)<", row) for row in rows]
    # one row per experiment of the machine, each its newest run
    assert sorted(variant_of(run) for found in runs for run in found) == sorted(
        LATEST - {"machine"})


@pytest.mark.parametrize("newest", sorted(LATEST - {"machine"}))
def test_predicts_calibration_keeps_them_apart(newest: str) -> None:
    """Whichever variant is newest among those tied for compute, its runs alone calibrate (a
    batch sweep relates batches by design: the batch variant may join, at its own batch)."""
    from harness.predict.calibration import compute_from_records

    records = copy.deepcopy(RECORDS)
    for record in records:
        if variant_of(record["run_id"]) == newest:
            record["created_at"] = "2025-01-01T00:00:00Z"
    spec = RECORDS[0]["spec"]
    found = compute_from_records(records, workload=spec["workload"], size=spec["size"],
                                 precision=spec["precision"], backend=spec["backend"],
                                 threads=spec["threads"], batch=spec["batch_per_rank"])
    assert found is not None
    chosen = {variant_of(run) for run in found.run_ids} - {"batch_per_rank"}
    assert len(chosen) == 1, f"predict's calibration pools {sorted(chosen)}"
