"""Every reader and view over records generated from the schema (tests/harness/schema_records.py):
report (Markdown, HTML, CSV, --by machine), compare (text, Markdown, --trajectory), history,
publish, predict and its calibration, store import, called in-process on a directory store of
the generated records; on a PostgreSQL store too (with store export, and rows whose index
columns a writer forged) in the slow tier (70 stores). Whatever schema-valid records a store
holds, each command ends with an exit code (never a traceback), writes no control character to
the terminal, draws every plot (a plot left out would be a note in the page, never a crash),
ends within COMMAND_S seconds and keeps the process under MAX_RSS bytes.

The default tier tries 70 stores (244 records), derandomized (the same records on every run);
the slow tier twice as many, the long tier (`--matrix`) ten times as many. Run at 1b3cb06, it
found the crashes that docs/guide/reliability.md lists (now fixed cases:
tests/harness/hostile_store.FOUND_SINCE).
"""
from __future__ import annotations

import contextlib
import io
import re
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hostile_store import CONTROL, READERS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schema_records import records

from harness.commands.cli import main
from harness.records.record import check_record
from harness.store.directory import record_folder, record_text

# About 250 records in the default tier: 70 stores of 3 to 6 records (more records a store
# overrun hypothesis's buffer of choices and are drawn again).
STORES, FEWEST, MOST = 70, 3, 6
FUZZ = settings(max_examples=STORES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))
SLOW_FUZZ = settings(FUZZ, max_examples=2 * STORES)
LONG_FUZZ = settings(FUZZ, max_examples=10 * STORES)
STORE_OF_RECORDS = st.lists(records(), min_size=FEWEST, max_size=MOST)
# Each command's bounds: a hang or a blow-up, not a speed test (commands take a second here).
COMMAND_S = 120
MAX_RSS = 3 * 2**30
# What a page says where it left a plot out because drawing it failed.
NOT_DRAWN = re.compile(r"could not be drawn")
TRIED = {"stores": 0, "records": 0}


@dataclass
class Problem:
    """What went wrong in one command: a crash (the exception) or a broken promise."""

    command: str
    what: str
    exception: BaseException | None = None


def unique(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records under run ids of their own (the generator draws any), each checked."""
    made = []
    for index, record in enumerate(found):
        record = {**record, "run_id": f"20240102T0304{index % 60:02d}Z-fuzz-{index}"}
        check_record(record, "generated")  # the generator keeps to the schema
        made.append(record)
    TRIED["stores"] += 1
    TRIED["records"] += len(made)
    return made


def store_of(found: list[dict[str, Any]], root: Path) -> tuple[Path, Path, Path]:
    """The records as files of a directory store (as anyone may write them) and as files of
    their own; the files of the first two that hold losses, for --trajectory."""
    store = root / "store"
    files = []
    for index, record in enumerate(found):
        text = record_text(record)
        folder = store / record_folder(record)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{record['run_id']}.json").write_text(text, encoding="utf-8")
        path = root / f"r{index}.json"
        path.write_text(text, encoding="utf-8")
        if (record.get("trajectory") or {}).get("losses"):
            files.append(path)
    files += [root / "r0.json"] * 2
    return store, files[0], files[1]


def run_readers(found: list[dict[str, Any]], readers: list[tuple[str, list[str]]] = READERS,
                store: str | None = None) -> list[Problem]:
    """Each reader over a store of `found` (a directory store, or the server `store` already
    holding them); the problems, none where all went well."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="dtbench-fuzz-") as folder:
        root = Path(folder)
        directory, a, b = store_of(found, root)
        for name, argv in readers:
            out = root / "out"
            out.mkdir(exist_ok=True)
            words = [w.format(store=store or directory, out=out, a=a, b=b) for w in argv]
            stdout, stderr = io.StringIO(), io.StringIO()
            started = time.monotonic()
            try:
                with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                    code = main(words)
            except Exception as exc:  # noqa: BLE001 - the crash is what the fuzz reports
                problems.append(Problem(name, f"{type(exc).__name__}: {exc}"[:300], exc))
                continue
            problems += _broken(name, code, stdout.getvalue() + stderr.getvalue(), out,
                                time.monotonic() - started)
    return problems


def _broken(name: str, code: int, shown: str, out: Path, seconds: float) -> list[Problem]:
    found = []
    if code not in (0, 1, 2, 3):
        found.append(Problem(name, f"exit {code}"))
    if "Traceback" in shown:
        found.append(Problem(name, "a traceback on the terminal: " + shown[-500:]))
    if CONTROL.search(shown):
        found.append(Problem(name, f"control character {CONTROL.search(shown)!r}"))
    pages = "".join(p.read_text(errors="replace") for p in out.rglob("*.html"))
    if (missed := NOT_DRAWN.search(pages + shown)) is not None:
        text = pages + shown
        found.append(Problem(name, "a plot was left out: "
                             + text[max(0, missed.start() - 200):missed.end() + 100]))
    if seconds > COMMAND_S:
        found.append(Problem(name, f"ran {seconds:.0f} s, more than {COMMAND_S}"))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if rss > MAX_RSS:
        found.append(Problem(name, f"the process grew to {rss} bytes"))
    return found


def check(problems: list[Problem]) -> None:
    if problems:
        first = next((p for p in problems if p.exception is not None), problems[0])
        if first.exception is not None:
            raise AssertionError(f"{first.command}: {first.what}") from first.exception
        raise AssertionError("; ".join(f"{p.command}: {p.what}" for p in problems))


@pytest.mark.timeout(1800)
@FUZZ
@given(found=STORE_OF_RECORDS)
def test_every_reader_takes_any_valid_record(found: list[dict[str, Any]]) -> None:
    check(run_readers(unique(found)))


@pytest.mark.slow
@pytest.mark.timeout(7200)
@SLOW_FUZZ
@given(found=STORE_OF_RECORDS)
def test_every_reader_takes_any_valid_record_longer(found: list[dict[str, Any]]) -> None:
    check(run_readers(unique(found)))


# Fourteen minutes on 2 cores: the long tier (--matrix), beside the full run matrix.
@pytest.mark.matrix
@pytest.mark.timeout(14400)
@LONG_FUZZ
@given(found=STORE_OF_RECORDS)
def test_every_reader_takes_any_valid_record_longest(found: list[dict[str, Any]]) -> None:
    check(run_readers(unique(found)))


# ---------------------------------------------------------------- PostgreSQL

SERVER_READERS = [(name, argv) for name, argv in READERS
                  if "{store}" in argv and argv[0] != "store"] + [
    ("store export", ["store", "export", "{store}", "-o", "{out}/snapshot"])]
# What a writer that bypasses dtbench may claim in a row's index columns.
TEXTS = st.text(st.characters(exclude_characters="\x00"), max_size=20)  # a text column's
FORGED = st.fixed_dictionaries({}, optional={
    "machine": TEXTS, "workload": st.sampled_from(["hep_cnn", "lstm"]) | TEXTS,
    "status": st.sampled_from(["success", "failed"]), "code_commit": TEXTS,
    "m_throughput": st.floats() | st.none(), "m_step_time": st.floats(),
    "world_size": st.integers(-2**63, 2**63 - 1), "created_at": TEXTS,
    "task": st.sampled_from(["train", "comm"]) | TEXTS})


@pytest.mark.timeout(14400)
@settings(FUZZ, max_examples=STORES)
@given(found=STORE_OF_RECORDS, forged=st.lists(FORGED, max_size=3))
def test_every_reader_takes_any_server_row(url: str, found: list[dict[str, Any]],
                                           forged: list[dict[str, Any]]) -> None:
    """The records in a PostgreSQL store, each added as dtbench adds it, and copies of some
    whose index columns a writer rewrote: every reader ends well, forged rows skipped."""
    psycopg = pytest.importorskip("psycopg")
    from harness.store.postgres import TABLE, PostgresStore

    made = unique(found)
    store = PostgresStore(url)
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"DROP TABLE IF EXISTS {TABLE}")
    store.add_new(made)
    with psycopg.connect(url, autocommit=True) as connection:
        for index, columns in enumerate(forged):
            if columns:
                values = ", ".join(f"{name} = %s" for name in columns)
                connection.execute(f"UPDATE {TABLE} SET {values} WHERE run_id = %s",
                                   (*columns.values(), made[index % len(made)]["run_id"]))
    check(run_readers(made, SERVER_READERS, store=url))
