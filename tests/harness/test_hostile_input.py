"""A store someone hands a user is untrusted input: every reading command over a generated
hostile store (tests/harness/hostile_store.py) ends in bounded time, with no traceback, shows
only the valid records, each text made safe for its medium, and writes nothing outside its
output. The PostgreSQL side (rows any writer inserts, export, import) is in
tests/harness/store/test_pgstore_hostile.py."""
from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from hostile_store import (
    CONTROL,
    ESCAPES,
    GOLDEN,
    MARKDOWN,
    SECRET,
    TRAVERSING_IDS,
    escape_records,
    hostile_store,
    payload_records,
    record,
    snapshot,
    write_json,
)

from harness.commands.cli import main
from harness.core.outputs import csv_text, markdown_text, terminal_stream_text
from harness.store.directory import Store
from harness.store.sources import load_inputs

OUT = "out"
# (name, arguments after the store, the output it writes: None for stdout)
COMMANDS = [
    ("report", ["report", "{store}"], None),
    ("report html", ["report", "{store}", "-o", "{out}/r.html"], "r.html"),
    ("report csv", ["report", "{store}", "-o", "{out}/r.csv"], "r.csv"),
    ("report by machine md", ["report", "{store}", "--by", "machine"], None),
    ("report by machine csv", ["report", "{store}", "--by", "machine", "-o", "{out}/m.csv"],
     "m.csv"),
    ("compare", ["compare", "{store}", "{store}"], None),
    ("compare md", ["compare", "{store}", "{store}", "--format", "md"], None),
    ("history", ["history", "{store}", "-o", "{out}/h.html", "--json", "{out}/h.json"],
     "h.html"),
    ("publish", ["publish", "{store}", "-o", "{out}/site"], "site"),
    ("predict", ["predict", "hep_cnn", "--size", "tiny", "--calibrate-from", "{store}",
                 "--network", "10GbE", "--nodes", "1,2", "-o", "{out}/p.md"], "p.md"),
    ("predict calibration", ["predict", "--calibration", "--calibrate-from", "{store}"], None),
    ("store import", ["store", "import", "{store}", "--to",
                      "postgresql://u:pw-x1@127.0.0.1:1/db"], None),
]
MARKDOWN_OUTPUTS = {"report", "report by machine md", "compare md", "predict"}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hostile_store(tmp_path_factory.mktemp("hostile"))


def _written(out: Path) -> str:
    """Every file a command wrote under `out`, as text."""
    return "".join(p.read_text(errors="replace") for p in sorted(out.rglob("*")) if p.is_file())


def _no_live_markdown(text: str) -> None:
    """No link, image, autolink or HTML from a record survives in Markdown."""
    assert re.search(r"(?<!\\)\]\(", text) is None  # only an escaped \] may precede (
    assert "<img" not in text and "<a " not in text
    assert "://" not in text and "www.evil" not in text and "@evil" not in text
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        return
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert "<a " not in html and "<img" not in html


def _no_formula(text: str) -> None:
    for row in csv.reader(io.StringIO(text)):
        for cell in row:
            if cell[:1] in ("=", "+", "-", "@") and cell != "-":
                float(cell)  # only a number may start so


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("name", "argv", "output"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_hostile_store_through_every_reading_command(
        name: str, argv: list[str], output: str | None, hostile: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = hostile.parent
    out = tmp_path / OUT
    out.mkdir()
    monkeypatch.chdir(tmp_path)
    before = snapshot(root)
    code = main([word.format(store=hostile, out=out) for word in argv])
    captured = capsys.readouterr()
    shown = captured.out + captured.err
    assert code in (0, 1, 2, 3), shown[-2000:]
    assert "Traceback" not in shown
    assert snapshot(root) == before  # the store and everything beside it unchanged
    assert sorted(p.name for p in tmp_path.iterdir()) == [OUT]  # nothing written beside out
    assert not list(root.rglob("pwned*")) and not list(tmp_path.rglob("pwned*"))
    assert CONTROL.search(shown) is None, repr(CONTROL.search(shown))
    assert SECRET not in shown and SECRET not in _written(out)
    assert "pw-x1" not in shown
    assert len(shown) < 400_000  # 60,000-character fields are cut
    if name in MARKDOWN_OUTPUTS:
        _no_live_markdown(captured.out if output is None else (out / output).read_text())
    if output is not None and output.endswith(".csv"):
        _no_formula((out / output).read_text())
    if output is not None and output.endswith(".html"):
        page = (out / output).read_text()
        assert re.search(r"(href|src)=\"https?://", page) is None
        assert CONTROL.search(page) is None


def test_only_the_valid_records_load_and_each_refusal_names_its_file(hostile: Path) -> None:
    loaded = load_inputs([str(hostile)])
    expected = {GOLDEN["run_id"], *(r["run_id"] for r in payload_records())}
    assert {r["run_id"] for r in loaded.records} == expected
    warned = " ".join(loaded.warnings)
    for name in ("fifo.json", "zero.json", "creds.json", "linked.json", "huge.json",
                 "deep.json", *(f"traversal{i}.json" for i in range(len(TRAVERSING_IDS))),
                 *(f"escape{i}.json" for i in range(len(escape_records())))):
        assert name in warned, name
    assert "a FIFO" in warned and "a link to outside" in warned
    assert "exceeds the 67108864-byte limit" in warned and "a control character" in warned
    assert Store(hostile).summary_rows() and {
        row["run_id"] for row in Store(hostile).summary_rows()} == expected


def test_a_traversing_run_id_never_names_a_file(tmp_path: Path) -> None:
    """The schema keeps run ids to a file name's characters: a store refuses to write any
    other (the directory and the server alike), before any file exists."""
    store = Store(tmp_path / "store")
    for run_id in TRAVERSING_IDS:
        with pytest.raises(ValueError, match="run_id"):
            store.add(record(run_id))
    assert not list(tmp_path.rglob("*.json"))


def test_a_nul_is_refused_on_write(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"a control character \('\\x00'\)"):
        Store(tmp_path).add(record("20240102T030405Z-x-nul", error="a\x00b"))
    assert not list(tmp_path.rglob("*.json"))


def test_an_oversized_record_is_refused_on_write(tmp_path: Path) -> None:
    """What every reader would skip (over 64 MiB) is never written."""
    from harness.records.record import MAX_RECORD_BYTES

    texts = {f"t{i}": "z" * 60_000 for i in range(MAX_RECORD_BYTES // 60_000 + 1)}
    with pytest.raises(ValueError, match="byte limit"):
        Store(tmp_path).add(record("20240102T030405Z-x-big", notes=texts))
    assert not list(tmp_path.rglob("*.json"))


def test_a_symlinked_index_in_a_store_is_never_opened(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """An index.sqlite linked to another database: an older dtbench dropped that database's
    `runs` table, made its own and switched the file to WAL."""
    import hashlib
    import sqlite3

    other = tmp_path / "other.db"
    connection = sqlite3.connect(other)
    connection.execute("CREATE TABLE runs (theirs)")
    connection.commit()
    connection.close()
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    store = tmp_path / "store"
    write_json(store / "m" / "c" / "golden.json", GOLDEN)
    (store / "index.sqlite").symlink_to(other)
    for argv in (["history", str(store), "--metric", "step_time"], ["report", str(store)]):
        assert main(argv) == 0
    capsys.readouterr()
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db", "store"]


def test_a_symlinked_machine_folder_is_refused_for_writing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from harness.core.errors import UsageError
    from harness.store.directory import record_folder

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store = Store(tmp_path / "store")
    machine = record_folder(GOLDEN).split("/")[0]
    store.root.mkdir()
    (store.root / machine).symlink_to(elsewhere)
    with pytest.raises(UsageError, match="symbolic link"):
        store.ensure_writable()
    with pytest.raises(UsageError, match="symbolic link"):
        store.add(GOLDEN)
    assert list(elsewhere.iterdir()) == []


def test_the_filters_leave_nothing_live() -> None:
    hostile_text = f"{ESCAPES} {MARKDOWN}"
    assert CONTROL.search(terminal_stream_text(hostile_text + "\n")) is None
    _no_live_markdown(markdown_text(hostile_text))
    assert csv_text("=1+1") == "'=1+1" and csv_text("-1.5") == "-1.5"
    assert csv_text("@SUM(1)").startswith("'") and csv_text("+cmd").startswith("'")


def test_a_store_import_of_nothing_valid_exits_2(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bad = write_json(tmp_path / "bad.json", {"not": "a record"})
    assert main(["store", "import", str(bad), "--to", "postgresql://u@127.0.0.1:1/d"]) == 2
    assert "no record to import" in capsys.readouterr().err


@pytest.mark.parametrize("url", [
    "postgresql://u:pw@127.0.0.1:99999/d", "postgresql://u:pw@127.0.0.1:5432/d?sslmode=bogus",
    "postgresql://u:pw@x@127.0.0.1/d", "postgresql://u:pw@127.0.0.1:port/d"])
def test_a_malformed_server_url_is_a_usage_error(url: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Not 'server down': run would otherwise exit 0 with its records in the pending store."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", "-w", "hep_cnn", "--size", "tiny", "--out", url, "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtbench run: error: store postgresql://u:***@") and err.count("\n") == 1
    assert not (tmp_path / "dtbench-pending").exists()
    assert json.dumps(err).find("pw@") == -1
