"""The PostgreSQL store against a real throw-away PostgreSQL 15 server: concurrent writers,
a writer killed mid-add, a server that goes away mid-suite, export/import, and the password
kept out of everything dtbench prints or writes.

The server runs as the `postgres` user (it refuses root) in a temporary directory, on a free
port of 127.0.0.1, with scram-sha-256 password authentication for TCP connections.
"""
from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
import time
from html import unescape
from pathlib import Path
from typing import Any

import pytest
from postgres import PASSWORD, ROLE, Server, free_port

from harness.commands.cli import main
from harness.records.record import check_record
from harness.store.directory import Store
from harness.store.url import redact, scrub

psycopg = pytest.importorskip("psycopg")

from harness.store.postgres import (  # noqa: E402 - needs psycopg
    TABLE,
    PostgresStore,
    RecordExists,
    StoreUnreachable,
)
from harness.store.targets import FallbackStore  # noqa: E402

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "record_v1.json").read_text())
REPO_ROOT = Path(__file__).resolve().parents[3]
WORKERS, PER_WORKER, SHARED = 4, 12, 4


def _record(run_id: str, **notes: Any) -> dict[str, Any]:
    record = copy.deepcopy(GOLDEN)
    record["run_id"] = f"20240102T030405Z-hep_cnn-{run_id}"
    record["notes"] = notes
    return record


WRITER = """
import json, sys
from harness.store.postgres import PostgresStore
store = PostgresStore(sys.argv[1])
records = [json.loads(line) for line in sys.stdin.readline().split("\\x1e")]
print("ready", flush=True)
sys.stdin.readline()  # released: every writer starts at once
for record in records:
    store.add(record)
"""


def _writer_records(worker: int) -> list[dict[str, Any]]:
    """Shared run_ids (the same record from every writer), then the writer's own."""
    return [_record(f"shared{s}") if s < SHARED else _record(f"w{worker}s{s:02d}", worker=worker)
            for s in range(PER_WORKER)]


def _rows(url: str) -> list[tuple[str, Any]]:
    """The stored (run_id, record) pairs; none before the first writer created the table."""
    with psycopg.connect(url) as connection:
        if connection.execute("SELECT to_regclass(%s)", (TABLE,)).fetchone()[0] is None:
            return []
        return connection.execute(f"SELECT run_id, record FROM {TABLE} ORDER BY run_id")\
            .fetchall()


def test_four_writers_at_once_lose_and_duplicate_nothing(url: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, url], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=env, text=True)
               for _ in range(WORKERS)]
    try:
        for worker, process in enumerate(writers):
            process.stdin.write("\x1e".join(json.dumps(r) for r in _writer_records(worker))
                                + "\n")  # type: ignore[union-attr]
            process.stdin.flush()  # type: ignore[union-attr]
        for process in writers:  # each has imported the store and read its records
            assert process.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
        for process in writers:
            process.stdin.write("go\n")  # type: ignore[union-attr]
            process.stdin.close()  # type: ignore[union-attr]
        codes = [process.wait(timeout=60) for process in writers]
    finally:
        for process in writers:
            process.kill()
    assert codes == [0] * WORKERS
    rows = _rows(url)
    expected = {f"20240102T030405Z-hep_cnn-shared{s}" for s in range(SHARED)} | {
        f"20240102T030405Z-hep_cnn-w{w}s{s:02d}" for w in range(WORKERS)
        for s in range(SHARED, PER_WORKER)}
    assert [run_id for run_id, _ in rows] == sorted(expected)
    for run_id, record in rows:
        assert check_record(record)["run_id"] == run_id
        if "-w" in run_id:
            assert record["notes"] == {"worker": int(run_id.split("-w")[1].split("s")[0])}
    store = PostgresStore(url)
    assert len(list(store.records())) == len(expected)
    assert store.count_success(GOLDEN["spec_key"]) == len(expected)


def test_an_existing_record_is_never_replaced(url: str) -> None:
    store = PostgresStore(url)
    store.add(_record("one", version=1))
    store.add(_record("one", version=1))  # the same record again: a retry, no change
    with pytest.raises(RecordExists, match="not replaced"):
        store.add(_record("one", version=2))
    assert [r["notes"] for _, r in _rows(url)] == [{"version": 1}]
    assert store.add_new([_record("one", version=3), _record("two")]) == (1, 1)



def test_a_record_the_server_refuses_is_kept_locally(url: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    PostgresStore(url).add(_record("taken", version=1))
    store = FallbackStore(url, tmp_path / "pending")
    store.ensure_writable()
    store.add(_record("taken", version=2))
    store.add(_record("fresh"))
    assert "already stored with other content" in capsys.readouterr().err
    assert [r["notes"] for r in Store(tmp_path / "pending").records()] == [{"version": 2}]
    assert [run_id[-5:] for run_id, _ in _rows(url)] == ["fresh", "taken"]
    assert "1 record(s) kept in" in store.destination()


KILLED_WRITER = """
import contextlib, sys, time
from harness.store import postgres as pgstore
real = pgstore.PostgresStore._insert

def paused(self, connection, record):
    # The INSERT has run; the transaction is not committed when the writer is killed.
    begin = connection.transaction
    @contextlib.contextmanager
    def transaction():
        with begin() as tx:
            yield tx
            print("inserted", flush=True)
            time.sleep(120)
    connection.transaction = transaction
    return real(self, connection, record)

pgstore.PostgresStore._insert = paused
import json
pgstore.PostgresStore(sys.argv[1]).add(json.loads(sys.stdin.readline()))
"""


def test_a_writer_killed_mid_add_leaves_no_partial_record(url: str) -> None:
    record = _record("killed", writer="child")
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        child.stdin.write(json.dumps(record) + "\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        assert child.stdout.readline().strip() == "inserted"  # type: ignore[union-attr]
        assert _rows(url) == []  # not visible before commit
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert _rows(url) == []
    # The killed transaction holds nothing: the same run_id can be stored, with other content.
    PostgresStore(url).add(_record("killed", writer="parent"))
    assert [r["notes"] for _, r in _rows(url)] == [{"writer": "parent"}]


def test_export_and_import_round_trip(url: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    source = Store(tmp_path / "source")
    originals = [_record(f"r{i}", index=i) for i in range(3)]
    for record in originals:
        source.add(record)
    assert main(["store", "import", str(source.root), "--to", url]) == 0
    assert main(["store", "import", str(source.root), "--to", url]) == 0
    out = capsys.readouterr().out
    assert "imported 3 record(s)" in out and "skipped 0" in out
    assert "imported 0 record(s)" in out and "skipped 3 already there" in out
    assert main(["store", "export", url, "--out", str(tmp_path / "copy")]) == 0
    assert "exported 3 record(s)" in capsys.readouterr().out
    exported = sorted(Store(tmp_path / "copy").records(), key=lambda r: r["run_id"])
    assert exported == originals
    assert main(["report", url]) == 0
    report = capsys.readouterr()
    shown = unescape(report.out.replace("\\", ""))  # Markdown escapes _ * : @ (no autolink)
    assert "hep_cnn" in shown and "dtbench:***@127.0.0.1" in shown
    assert PASSWORD not in report.out + report.err


def test_a_server_gone_mid_suite_loses_no_run(server: Server, url: str, tmp_path: Path,
                                              seeded_cache_dir: Path) -> None:
    env = {**os.environ, "DTBENCH_CACHE_DIR": str(seeded_cache_dir),
           "PYTHONPATH": str(REPO_ROOT), "DTBENCH_PENDING": str(tmp_path / "pending")}
    run = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "-w", "hep_cnn", "--size", "tiny", "--steps",
         "2", "--warmup", "1", "--threads", "1", "-q", "--repeat", "2", "--out", url],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stopped = False
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and run.poll() is None and not _rows(url):
            time.sleep(0.05)
        assert len(_rows(url)) == 1, "the first run's record should reach the server"
        server.stop()
        stopped = True
        out, err = run.communicate(timeout=90)
    finally:
        run.kill()
        if stopped:
            server.start()
    assert run.returncode == 0, err[-2000:]
    pending = Store(tmp_path / "pending")
    assert len(list(pending.records())) == 1
    command = f"dtbench store import {pending.root} --to {redact(url)}"
    assert command in err.splitlines()[-1]
    written = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert PASSWORD not in out + err + "".join(written)
    assert main(["store", "import", str(pending.root), "--to", url]) == 0
    assert len(_rows(url)) == 2


def test_a_server_down_at_start_keeps_records_locally(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    down = f"postgresql://{ROLE}:{PASSWORD}@127.0.0.1:{free_port()}/bench"
    store = FallbackStore(down, tmp_path / "pending")
    store.ensure_writable()
    store.add(_record("offline"))
    assert store.count_success(GOLDEN["spec_key"]) == 1
    assert [r["run_id"] for r in Store(tmp_path / "pending").records()] == \
        ["20240102T030405Z-hep_cnn-offline"]
    shown = store.destination()
    err = capsys.readouterr().err
    assert "1 record(s) kept in" in shown and "dtbench store import" in shown
    assert "could not take them" in shown and "Connection refused" in err
    assert PASSWORD not in shown + err
    with pytest.raises(StoreUnreachable) as raised:
        PostgresStore(down).count_success("x")
    assert PASSWORD not in str(raised.value) and "***" in str(raised.value)


def test_wrong_password_is_a_usage_error_without_the_password(
        server: Server, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    wrong = url.replace(PASSWORD, "Wr0ng-" + PASSWORD[::-1])
    assert main(["report", wrong]) == 2
    err = capsys.readouterr().err
    assert "password authentication failed" in err
    assert PASSWORD[::-1] not in err and "***" in err


def test_password_comes_from_pgpassword(server: Server, url: str,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    bare = url.replace(f":{PASSWORD}@", "@")
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    store = PostgresStore(bare)
    store.add(_record("env"))
    assert [r["run_id"] for r in store.records()] == ["20240102T030405Z-hep_cnn-env"]
    assert store.shown == bare


@pytest.mark.parametrize("text", [
    f"postgresql://u:{PASSWORD}@h/db",
    f"connection to postgres://u:{PASSWORD}@h:5/db failed",
    f"host=h password={PASSWORD} dbname=db",
    f"postgresql://u@h/db?password={PASSWORD}&sslmode=require",
])
def test_scrub_hides_every_form_of_the_password(text: str) -> None:
    shown = scrub(text, f"postgresql://u:{PASSWORD.replace('!', '%21')}@h/db")
    assert PASSWORD not in shown and "***" in shown


@pytest.mark.parametrize(("argv", "fragment"), [
    (["store", "import", "somewhere", "--to", "results"], "not a store URL"),
    (["store", "export", "results", "--out", "copy"], "not a store URL"),
    (["store", "import", "absent", "--to", f"postgresql://u:{PASSWORD}@127.0.0.1:1/d"],
     "absent: no such file or directory"),
    (["store", "export", "postgresql://u@h/d", "--out", "postgresql://u@h/e"],
     "--out postgresql://u@h/e: name a directory"),
])
def test_bad_store_usage_is_one_line(argv: list[str], fragment: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert fragment in err and err.count("\n") == 1 and PASSWORD not in err


def test_whole_store_commands_read_the_index_and_load_only_chosen_records(
        url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """summary_rows come from the columns, load_rows and record_texts give the documents; a
    report and a history over the server match those over a directory holding the same."""
    from harness.records.summary import summary_cells

    store = PostgresStore(url)
    records = [_record(f"s{i}") for i in range(3)]
    for record in records:
        store.add(record)
    rows = {row["run_id"]: row for row in store.summary_rows()}
    for record in records:
        cells = summary_cells(record)
        assert {name: rows[record["run_id"]][name] for name in cells} == cells
    chosen = [rows[records[1]["run_id"]]]
    assert list(store.load_rows(chosen)) == [records[1]]
    assert [json.loads(text) for _, text in store.record_texts([records[2]["run_id"]])] == \
        [records[2]]
    directory = Store(tmp_path / "dir")
    for record in records:
        directory.add(record)
    for target in (url, str(directory.root)):
        assert main(["history", target, "--metric", "step_time"]) == 0
    from_server, from_directory = capsys.readouterr().out.split("\n", 1)
    assert from_server + "\n" == from_directory


def test_a_table_of_an_older_version_gets_its_summary_columns_filled(url: str) -> None:
    from harness.records.summary import SUMMARY_COLUMNS

    PostgresStore(url).add(_record("old"))
    with psycopg.connect(url, autocommit=True) as connection:
        for name in SUMMARY_COLUMNS:
            connection.execute(f"ALTER TABLE {TABLE} DROP COLUMN {name}")
    (row,) = PostgresStore(url).summary_rows()
    assert row["machine"] and row["m_step_time"] is not None


@pytest.mark.parametrize("column", ["json", "jsonb"])
def test_publish_from_the_server_writes_every_record_as_stored(
        url: str, column: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's records reach the site in chunks written by the page workers: all of
    them, each its stored document: unchanged (the directory store's text) where the table
    holds json (this version's), the same document where an older version made it jsonb."""
    import harness.publish.records as published
    from harness.store.directory import record_text

    monkeypatch.setattr(published, "CHUNK", 2)  # a commit a file: three chunks for five
    store = PostgresStore(url)
    records = [_record(f"p{i}") for i in range(5)]
    for i, record in enumerate(records):
        record["code"] = {"commit": f"{i + 1}" * 40, "branch": "main", "dirty": False,
                          "ci_url": None}
    store.add(records[0])
    with psycopg.connect(url, autocommit=True) as connection:
        made = connection.execute("SELECT data_type FROM information_schema.columns WHERE "
                                  "table_name = %s AND column_name = 'record'", (TABLE,))
        assert made.fetchone()[0] == "json"
        if column == "jsonb":
            connection.execute(f"ALTER TABLE {TABLE} ALTER COLUMN record TYPE jsonb "
                               "USING record::jsonb")
    for record in records[1:]:
        store.add(record)
    assert main(["publish", url, "-o", str(tmp_path / "site")]) == 0
    pages = sorted((tmp_path / "site" / "records").rglob("*.html"))
    assert len(pages) == 5
    texts = [unescape(text) for page in pages
             for text in re.findall(r"<pre>(.*?)</pre>", page.read_text(), re.S)]
    assert sorted((json.loads(text) for text in texts), key=lambda r: r["run_id"]) == records
    if column == "json":
        assert sorted(texts) == sorted(record_text(record) for record in records)
    assert sorted(store.records(), key=lambda r: r["run_id"]) == records
