"""A PostgreSQL store every runner writes is as untrusted as a shared folder: any role with
INSERT can add a row directly. Against a live server (tests/postgres.py): such rows are
skipped with a warning by every reader, export writes only inside its target, a NUL is refused
before it reaches the server, readers create nothing, and no page, report or message shows
the password."""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from postgres import PASSWORD

from harness.commands.cli import main
from harness.store.directory import Store

psycopg = pytest.importorskip("psycopg")

from harness.store.postgres import TABLE, PostgresStore  # noqa: E402 - needs psycopg

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "record_v1.json")
                    .read_text())


def _record(run_id: str, **changes: Any) -> dict[str, Any]:
    made = copy.deepcopy(GOLDEN)
    made.update(run_id=f"20240102T030405Z-hep_cnn-{run_id}", **changes)
    return made


def _insert(url: str, run_id: str, document: str) -> None:
    """A row as a writer that bypasses dtbench would add it."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"INSERT INTO {TABLE} (run_id, path, status, record) VALUES "
                           "(%s, %s, 'success', %s)", (run_id, f"{run_id}.json", document))


def _files(root: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


@pytest.fixture
def hostile_server(url: str) -> str:
    """A server with one good record and rows dtbench never wrote: not a record, a record
    whose run_id traverses, one nested too deep for a parser."""
    PostgresStore(url).add(_record("good"))
    _insert(url, "list", "[1, 2, 3]")
    _insert(url, "traverse", json.dumps({**_record("x"), "run_id": "../../outside/pwned"}))
    _insert(url, "deep", "[" * 5000 + "]" * 5000)
    return url


@pytest.mark.parametrize("argv", [
    ["report", "{url}"], ["report", "{url}", "--by", "machine"],
    ["compare", "{url}", "{url}"], ["history", "{url}", "--metric", "step_time"],
    ["publish", "{url}", "-o", "{out}/site"],
    ["predict", "hep_cnn", "--size", "tiny", "--calibrate-from", "{url}", "--network", "10GbE"]],
    ids=lambda argv: " ".join(argv[:3]))
def test_rows_written_around_dtbench_are_skipped_by_every_reader(
        argv: list[str], hostile_server: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([w.format(url=hostile_server, out=tmp_path) for w in argv]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and PASSWORD not in captured.out + captured.err
    if argv[0] in ("report", "publish", "compare"):
        assert "skipped" in captured.err and "traverse" in captured.err.replace("\\", "")


def test_export_writes_only_inside_its_target(hostile_server: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert main(["store", "export", hostile_server, "--out", "snap"]) == 0
    captured = capsys.readouterr()
    assert "exported 1 record(s)" in captured.out and "Traceback" not in captured.err
    written = [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) == 1 and written[0].startswith("a/b/snap/")
    assert not list(tmp_path.rglob("pwned*"))


def test_a_nul_never_reaches_the_server_and_blocks_nothing(url: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    """A record file holding \\u0000 (valid JSON, which a jsonb column refuses and a text
    column strips) is skipped with a warning; the other records are imported, now and later."""
    PostgresStore(url).add(_record("first"))
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"ALTER TABLE {TABLE} ALTER COLUMN record TYPE jsonb "
                           "USING record::jsonb")
    folder = tmp_path / "pending"
    folder.mkdir()
    (folder / "nul.json").write_text(json.dumps(_record("nul", error="a\u0000b")))
    (folder / "ok.json").write_text(json.dumps(_record("ok")))
    assert main(["store", "import", str(folder), "--to", url]) == 0
    captured = capsys.readouterr()
    assert "imported 1 record(s)" in captured.out and "NUL" in captured.err
    (folder / "later.json").write_text(json.dumps(_record("later")))
    assert main(["store", "import", str(folder), "--to", url]) == 0
    assert "imported 1 record(s)" in capsys.readouterr().out
    assert {r["run_id"].rsplit("-", 1)[1] for r in PostgresStore(url).records()} == {
        "first", "ok", "later"}


def test_readers_create_nothing_on_an_empty_server(url: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["report", url], ["publish", url, "-o", str(tmp_path / "site")],
                 ["history", url], ["compare", url, url]):
        assert main(argv) in (2, 3)
        captured = capsys.readouterr()
        assert PASSWORD not in captured.out + captured.err
    with psycopg.connect(url) as connection:
        assert connection.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()[0] is None


def test_no_page_report_or_message_shows_the_password(url: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """The "Regenerate with" lines and page footers that showed the full URL."""
    monkeypatch.chdir(tmp_path)
    store = PostgresStore(url)
    for index in range(3):
        store.add(_record(f"p{index}"))
    out = tmp_path / "out"
    out.mkdir()
    for argv in (["publish", url, "-o", str(out / "site")],
                 ["history", url, "--metric", "step_time", "-o", str(out / "h.html")],
                 ["report", url, "-o", str(out / "r.html")],
                 ["report", url, "--by", "machine", "-o", str(out / "m.md")],
                 ["predict", "hep_cnn", "--size", "tiny", "--calibrate-from", url,
                  "--network", "10GbE", "-o", str(out / "p.md")],
                 ["store", "export", url, "--out", str(out / "snap")]):
        assert main(argv) == 0, argv
    captured = capsys.readouterr()
    written = _files(out)
    assert "Regenerate with" in written and "***" in written
    assert PASSWORD not in written + captured.out + captured.err
    assert len(list(Store(out / "snap").records())) == 3
