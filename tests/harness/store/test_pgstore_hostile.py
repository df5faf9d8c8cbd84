"""A PostgreSQL store every runner writes is as untrusted as a shared folder: any role with
INSERT can add a row directly. Against a live server (tests/postgres.py): such rows are
skipped with a warning by every reader, export writes only inside its target, a NUL is refused
before it reaches the server, readers create nothing, and no page, report or message shows
the password. Issue 52: rows whose index columns disagree with their record, hold NaN or a
text where a number belongs are skipped by every summary too, and the table's upgrade never
stops on one bad row."""
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
    assert "imported 1 record(s)" in captured.out and "a control character" in captured.err
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


def _forge(url: str, run_id: str, document: str, **columns: Any) -> None:
    """A row as a writer that bypasses dtbench adds it, index columns of its own choosing."""
    names = ["run_id", "path", "status", "record", *columns]
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"INSERT INTO {TABLE} ({', '.join(names)}) VALUES "
                           f"({', '.join(['%s'] * len(names))})",
                           (run_id, f"{run_id}.json", "success", document, *columns.values()))


def _throughput(run_id: str, commit: str, value: float) -> dict[str, Any]:
    made = _record(run_id)
    made["code"] = {**made["code"], "commit": commit}
    made["metrics"] = [*made["metrics"], {"name": "throughput", "unit": "samples/s",
                                          "value": value, "higher_is_better": True}]
    return made


def test_rows_whose_columns_disagree_with_their_record_are_never_summarised(
        url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 52: a row whose record is [1,2,3] while its columns claim the machine
    FORGED-MACHINE and a throughput of 1e9 (three commits of them): history drew three forged
    points without a warning, publish built a page and a trend for the forged machine."""
    store = PostgresStore(url)
    for index in range(4):
        store.add(_throughput(f"good{index}", f"{index + 1}" * 40, 100.0 + index))
    for index in range(3):
        _forge(url, f"forged{index}", "[1, 2, 3]", machine="FORGED-MACHINE",
               m_throughput=1e9, workload="hep_cnn", code_commit=f"{index + 5}" * 40,
               created_at=f"2024-01-0{index + 1}T00:00:00Z")
    assert main(["history", url, "--json", str(tmp_path / "h.json")]) == 0
    captured = capsys.readouterr()
    series = json.loads((tmp_path / "h.json").read_text())
    assert [s["machine"] for s in series] == ["Intel Ice Lake, 80 cores"]
    assert len(series[0]["points"]) == 4 and "FORGED" not in captured.out
    assert all(captured.err.count(f"forged{i}") == 1 for i in range(3)), captured.err
    assert main(["publish", url, "-o", str(tmp_path / "site")]) == 0
    captured = capsys.readouterr()
    assert "FORGED" not in _files(tmp_path / "site").upper()
    assert all(captured.err.count(f"forged{i}") == 1 for i in range(3)), captured.err


def test_non_finite_or_mistyped_index_values_are_refused(url: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    """Issue 52: NaN in m_throughput crashed history and publish; a row with an index value
    its record does not hold is skipped with a warning, the others shown."""
    store = PostgresStore(url)
    for index in range(4):
        store.add(_throughput(f"good{index}", f"{index + 1}" * 40, 100.0))
    store.add(_throughput("nan", "5" * 40, 100.0))
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"UPDATE {TABLE} SET m_throughput = 'NaN'::float8 WHERE run_id "
                           "LIKE '%-nan'")
    for argv in (["history", url], ["publish", url, "-o", str(tmp_path / "site")]):
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert "-nan: its index column m_throughput holds nan" in err, err


def test_a_table_made_beforehand_with_text_columns_crashes_no_reader(
        url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 52: a table someone created with text columns (m_throughput = 'x') crashed
    history and publish on float('x'): its rows are refused, with a warning each."""
    from harness.store.directory import COLUMNS

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE {TABLE} ({', '.join(f'{c} text' for c in COLUMNS)}, "
                           "record json NOT NULL, stored_at timestamptz DEFAULT now())")
    made = _throughput("text", "1" * 40, 100.0)
    _forge(url, made["run_id"], json.dumps(made), m_throughput="x", workload="hep_cnn",
           machine="Intel Ice Lake, 80 cores", world_size="1")
    for argv in (["history", url], ["publish", url, "-o", str(tmp_path / "site")]):
        assert main(argv) in (0, 2, 3)  # 2: publish finds no record to show
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err and "-text: its index column" in captured.err


def test_one_bad_row_never_blocks_the_upgrade_of_an_older_table(
        url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 52: an older table (no world_size column) holding one record whose world_size is
    past bigint's range (the schema of the time took it): the upgrade's cast failed, so every
    reader exited 2 and every writer 1 until an administrator deleted the row."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE TABLE {TABLE} (run_id text PRIMARY KEY, path text, "
                           "created_at text, status text, workload text, record json NOT NULL,"
                           " stored_at timestamptz NOT NULL DEFAULT now())")
    huge = _record("huge")
    huge["spec"] = {**huge["spec"], "world_size": 2**70}
    _forge(url, huge["run_id"], json.dumps(huge), workload="hep_cnn")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_record("good")))
    assert main(["store", "import", str(good), "--to", url]) == 0
    assert main(["report", url]) == 0
    captured = capsys.readouterr()
    assert "imported 1 record(s)" in captured.out and "-huge: " in captured.err
    with psycopg.connect(url) as connection:
        assert connection.execute(f"SELECT world_size FROM {TABLE} ORDER BY run_id"
                                  ).fetchall() == [(1,), (None,)]
