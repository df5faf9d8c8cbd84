"""Issue 52's reproductions: records the schema of 1b3cb06 took (small edits of the golden
record, tests/harness/hostile_store.ISSUE_52, and FOUND_SINCE) that crashed a reader with a
traceback. Each reader that crashed now ends with an exit code and no traceback: a record the
schema now refuses is skipped with a warning naming its file, one it takes is shown, every
plot drawn."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hostile_store import CONTROL, FOUND_SINCE, GOLDEN, ISSUE_52, READERS, write_json

from harness.commands.cli import main
from harness.store.directory import record_folder

RECORDS = {**ISSUE_52, **FOUND_SINCE}
CASES = [(case, reader) for case, (_, _, readers) in RECORDS.items() for reader in readers]


def _store(records: list[dict[str, Any]], root: Path) -> tuple[Path, Path, Path]:
    """The golden record and `records` as files of a store; and twice the file of the first
    that holds losses, for --trajectory (compared with itself)."""
    store = root / "store"
    losses = []
    for record in [GOLDEN, *records]:
        write_json(store / record_folder(record) / f"{record['run_id']}.json", record)
        if "trajectory" in record:
            losses.append(write_json(root / f"{record['run_id']}.json", record))
    losses.append(store / record_folder(GOLDEN) / f"{GOLDEN['run_id']}.json")
    return store, losses[0], losses[0]


@pytest.mark.parametrize(("case", "reader"), CASES, ids=[f"{c}: {r}" for c, r in CASES])
def test_an_issue_52_record_crashes_no_reader(case: str, reader: str, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    records, taken, _ = RECORDS[case]
    store, a, b = _store(records, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(tmp_path)
    argv = dict(READERS)[reader]
    code = main([word.format(store=store, out=out, a=a, b=b) for word in argv])
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert code in (0, 1, 2, 3), shown[-2000:]
    assert "Traceback" not in shown and CONTROL.search(shown) is None
    pages = "".join(p.read_text(errors="replace") for p in out.rglob("*.html"))
    assert "could not be drawn" not in shown + pages
    for record in records:
        if taken:  # shown: no warning about it
            assert record["run_id"] not in captured.err
        elif argv[1] != "{a}":  # a --trajectory side: one line saying none is readable
            assert f"skipped {store}" in captured.err and record["run_id"] in captured.err


def test_a_loss_plot_is_drawn_from_losses_holding_null(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """A null loss (a rank's non-finite one) leaves a gap in the curve, never a TypeError."""
    records, _, _ = ISSUE_52["losses holding null"]
    store, _, _ = _store(records, tmp_path)
    assert main(["report", str(store), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "Training loss against samples" in page and "No record holds per-step" not in page
    capsys.readouterr()


def test_the_last_resort_traceback_is_filtered_for_the_terminal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A bug's traceback may quote a record's text (its escape sequences reached stderr raw):
    the handler masks passwords and filters it as every other output."""
    import sys

    from harness.commands import cli

    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test

    def crash() -> int:
        raise RuntimeError("record text \x1b]8;;https://evil.example\x07click\x1b]8;;\x07 "
                           "\x1b[2J\u202e pw-secret")

    monkeypatch.setattr(cli, "main", crash)
    monkeypatch.setattr("sys.argv", ["dtbench", "report", "postgresql://u:pw-secret@h/d"])
    with pytest.raises(RuntimeError) as raised:
        cli.entry_point()
    sys.excepthook(RuntimeError, raised.value, raised.value.__traceback__)
    err = capsys.readouterr().err
    assert "Traceback" in err and "record text" in err and "click" in err
    assert CONTROL.search(err) is None and "pw-secret" not in err


def test_a_record_of_too_many_metrics_is_refused_with_the_reason(tmp_path: Path) -> None:
    """200,000 metrics (6.5 MB) took compare 25 s and 527 MB: refused before any is read."""
    from harness.core.errors import SchemaError
    from harness.records.record import load_record

    path = write_json(tmp_path / "many.json", {**GOLDEN, "metrics": [
        {"name": f"m{i}", "unit": "s", "value": 1.0} for i in range(200_000)]})
    with pytest.raises(SchemaError, match="200000 metrics, more than the 1000"):
        load_record(path)
    assert json.loads(path.read_text())["metrics"][0]["name"] == "m0"
