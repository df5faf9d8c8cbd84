"""A store on a PostgreSQL server, shared by many CI runners: one row per record, with the
directory store's index columns (harness/store/directory.py) and the record's JSON text as the
writer stored it (type json: a jsonb document is rendered anew on every read, which cost a
100,000-record publish 5.6 s of the server's CPU; a table an older dtbench made as jsonb is
read the same way).

Each add is one transaction (a writer killed mid-add leaves nothing); run_id is the primary
key and an existing record is never replaced. Every operation opens its own connection, so a
server that restarts between two runs is simply used again. Errors never show the password:
their text goes through url.scrub.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from harness.core.errors import SchemaError, UsageError
from harness.core.outputs import clean_text
from harness.core.text import one_line
from harness.records.record import MAX_RECORD_BYTES, check_record, validate_record
from harness.records.summary import REAL_SUMMARY
from harness.spec.specs import RunSpec
from harness.store.contract import choose_baseline
from harness.store.directory import (
    BASELINE_COLUMNS,
    COLUMNS,
    STAMP_COLUMNS,
    index_cells,
    record_text,
)
from harness.store.server_rows import (
    INTEGER_COLUMNS,
    STAMP_SQL,
    RowCache,
    cell,
    cells_of,
    verify,
)
from harness.store.url import check_url, redact, scrub

TABLE = "dtbench_runs"
CONNECT_TIMEOUT_S = 10
# The largest record text read from the server (a directory store's limit, harness/records/record).
_TEXT = f"CASE WHEN octet_length(record::text) <= {MAX_RECORD_BYTES} THEN record::text END"
_CREATE: Any = object()  # _run's `absent` for writers: the table is made where missing
# An arbitrary constant: the advisory lock that serializes creating and upgrading the table.
_SCHEMA_LOCK = 0x64746265
# Connection failures that are the caller's to fix, not a server that is away.
_CONFIG_PHRASES = ("password authentication failed", "no password supplied", "does not exist",
                   "pg_hba.conf", "permission denied", "authentication", "invalid ")


class StoreUnreachable(OSError):
    """The server cannot be reached, or went away during an operation."""


class StoreError(RuntimeError):
    """The server refused an operation (a record it cannot hold, missing privileges)."""


class RecordExists(StoreError):
    """A different record with the same run_id is already stored."""


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise UsageError("a postgresql:// store needs psycopg: "
                         "python3 -m pip install 'psycopg[binary]>=3.1'") from None
    return psycopg


def _column_type(name: str) -> str:
    if name in REAL_SUMMARY:
        return "double precision"
    return "bigint" if name in INTEGER_COLUMNS else "text"


def row_of(record: dict[str, Any]) -> tuple[Any, ...]:
    """The index cells of a record, in COLUMNS order (path: the file name export gives it)."""
    return tuple(cells_of(record).values())


class PostgresStore:
    """The interface of harness.store.directory.Store, on a server named by a URL."""

    def __init__(self, url: str) -> None:
        check_url(url)
        self.url = url
        self.shown = redact(url)
        self._ready = False
        self._skipped: set[str] = set()  # rows warned about: once a command

    def __repr__(self) -> str:
        return f"PostgresStore({self.shown!r})"

    # -- connections and errors

    def _failure(self, exc: Exception, doing: str) -> Exception:
        """The exception to raise for a psycopg error, its message scrubbed of the password."""
        psycopg = _psycopg()
        message = " ".join(scrub(str(exc), self.url).split()) or type(exc).__name__
        text = f"store {self.shown}: {doing} failed: {message}"
        if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
            if any(phrase in message.lower() for phrase in _CONFIG_PHRASES):
                return UsageError(text)
            return StoreUnreachable(text)
        # Class 08: the connection broke; 57: the server is shutting down or restarting.
        if isinstance(exc, psycopg.InterfaceError) or (exc.sqlstate or "")[:2] in ("08", "57"):
            return StoreUnreachable(text)
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return UsageError(text)
        return StoreError(text)

    def _connect(self, create: bool = True) -> Any:
        """A connection, with the table ready: created if missing where `create` (a writer),
        else left absent (a reader writes nothing: it finds no records)."""
        psycopg = _psycopg()
        options: dict[str, Any] = {}
        if "connect_timeout" not in self.url:
            options["connect_timeout"] = CONNECT_TIMEOUT_S
        try:
            connection = psycopg.connect(self.url, **options)
        except psycopg.ProgrammingError as exc:  # a malformed URL or option
            raise UsageError(f"store {self.shown}: {scrub(str(exc), self.url)}") from None
        except psycopg.Error as exc:
            raise self._failure(exc, "connecting") from None
        except ValueError as exc:  # a malformed URL, found before any connection
            raise UsageError(f"store {self.shown}: {scrub(str(exc), self.url)}") from None
        try:
            if not self._ready and (create or connection.execute(
                    "SELECT to_regclass(%s)", (TABLE,)).fetchone()[0] is not None):
                self._create(connection)
                self._ready = True
        except psycopg.Error as exc:
            connection.close()
            raise self._failure(exc, "connecting") from None
        except BaseException:
            connection.close()
            raise
        return connection

    def _run(self, doing: str, work: Any, absent: Any = _CREATE) -> Any:
        """work(connection) on a fresh connection; psycopg errors become ours, scrubbed. A
        reader gives `absent`: what it returns where the server holds no table (none is
        made)."""
        psycopg = _psycopg()
        connection = self._connect(create=absent is _CREATE)
        try:
            if not self._ready:
                return absent
            return work(connection)
        except psycopg.Error as exc:
            raise self._failure(exc, doing) from None
        finally:
            connection.close()

    def _create(self, connection: Any) -> None:
        """The table, created if missing; columns this version indexes and an older table
        lacks are added and filled from the stored records (nothing is dropped)."""
        psycopg = _psycopg()
        definitions = ", ".join(f"{name} {_column_type(name)}" for name in COLUMNS
                                if name != "run_id")
        try:
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                connection.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (run_id text PRIMARY "
                                   f"KEY, {definitions}, record json NOT NULL, stored_at "
                                   "timestamptz NOT NULL DEFAULT now())")
                present = {row[0] for row in connection.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "AND table_schema = current_schema()", (TABLE,))}
                added = [n for n in COLUMNS if n not in present]
                for name in added:
                    connection.execute(f"ALTER TABLE {TABLE} ADD COLUMN {name} "
                                       f"{_column_type(name)}")
                if present and added:
                    self._fill(connection, [n for n in added if n not in STAMP_COLUMNS])
                connection.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_spec_key "
                                   f"ON {TABLE} (spec_key, status)")
        except psycopg.Error as exc:
            raise self._failure(exc, "creating the table") from None

    @staticmethod
    def _fill(connection: Any, names: list[str]) -> None:
        """The columns `names` of a table an older dtbench wrote, from its records, as a
        writer derives them (a row whose record is no JSON object keeps them empty; a value
        a column cannot hold is left out: one row never stops the upgrade)."""
        run_ids = [row[0] for row in connection.execute(f"SELECT run_id FROM {TABLE}")]
        assignments = ", ".join(f"{name} = %s" for name in names)
        for start in range(0, len(run_ids), 1000):
            updates = []
            for run_id, text in connection.execute(
                    f"SELECT run_id, {_TEXT} FROM {TABLE} WHERE run_id = ANY(%s)",
                    (run_ids[start:start + 1000],)).fetchall():
                try:
                    document = json.loads(text) if text is not None else None
                except (ValueError, RecursionError):
                    continue
                if isinstance(document, dict):
                    values = index_cells({**document, "run_id": run_id}, f"{run_id}.json")
                    updates.append((*(cell(name, values.get(name)) for name in names), run_id))
            with connection.cursor() as cursor:
                cursor.executemany(f"UPDATE {TABLE} SET {assignments} WHERE run_id = %s",
                                   updates)

    # -- the Store interface

    def ensure_writable(self) -> None:
        """Connect, create the table if missing and check this role may add rows; raises
        StoreUnreachable (server away) or UsageError (credentials, privileges) before any run."""
        def check(connection: Any) -> None:
            allowed = connection.execute("SELECT has_table_privilege(%s, 'INSERT')",
                                         (TABLE,)).fetchone()[0]
            if not allowed:
                raise UsageError(f"--out {self.shown}: this role may not add rows to {TABLE}")

        self._run("checking privileges", check)

    def reconcile_index(self) -> int:
        """Nothing to reconcile: the row is the record."""
        return 0

    def _insert(self, connection: Any, record: dict[str, Any]) -> bool:
        """One record in one transaction; False when its run_id is already stored."""
        marks = ", ".join(["%s"] * (len(COLUMNS) + 1))
        with connection.transaction():
            cursor = connection.execute(
                f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}, record) VALUES ({marks}) "
                "ON CONFLICT (run_id) DO NOTHING RETURNING run_id",
                (*row_of(record), record_text(record)))
            return cursor.fetchone() is not None

    def add(self, record: dict[str, Any]) -> None:
        """Store a new record. Adding the same record again changes nothing (a retry after a
        lost connection); a different record under a stored run_id raises RecordExists."""
        validate_record(record)

        def add(connection: Any) -> None:
            if self._insert(connection, record):
                return
            stored = connection.execute(f"SELECT record FROM {TABLE} WHERE run_id = %s",
                                        (record["run_id"],)).fetchone()
            if stored is None or stored[0] != json.loads(json.dumps(record)):
                raise RecordExists(f"store {self.shown}: run {record['run_id']} is already "
                                   "stored with other content; it is not replaced")

        self._run("adding a record", add)

    def add_new(self, records: Iterable[dict[str, Any]]) -> tuple[int, int]:
        """Add the records whose run_id is not stored yet, each in a transaction of its own,
        over one connection; (added, already present)."""
        def add_all(connection: Any) -> tuple[int, int]:
            added = present = 0
            for record in records:
                validate_record(record)
                if self._insert(connection, record):
                    added += 1
                else:
                    present += 1
            return added, present

        return self._run("importing records", add_all)

    def run_ids(self) -> set[str]:
        return self._run("listing records", lambda connection: {
            row[0] for row in connection.execute(f"SELECT run_id FROM {TABLE}")}, set())

    def _parsed(self, run_id: Any, text: str | None) -> dict[str, Any]:
        """A row's record, validated as a file's is (any writer can insert any row); a
        SchemaError naming the run otherwise."""
        source = f"{self.shown} run {clean_text(run_id, 200)}"
        if text is None:
            raise SchemaError(f"{source}: more than the {MAX_RECORD_BYTES}-byte limit")
        try:
            document = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise SchemaError(f"{source}: unreadable record ({one_line(str(exc), 120)})") \
                from None
        return check_record(document, source)

    def records(self, warnings: list[str] | None = None) -> Iterator[dict[str, Any]]:
        """Every readable record, oldest first; rows that are not valid records are reported
        in `warnings` and skipped."""
        def fetch(connection: Any) -> list[tuple[str, Any]]:
            with connection.transaction(), connection.cursor(name="dtbench_records") as cursor:
                cursor.itersize = 200
                cursor.execute(f"SELECT run_id, {_TEXT} FROM {TABLE} ORDER BY path, run_id")
                return list(cursor)

        for run_id, text in self._run("reading records", fetch, []):
            try:
                yield self._parsed(run_id, text)
            except SchemaError as exc:
                self._skip(warnings, run_id, str(exc))

    def _skip(self, warnings: list[str] | None, run_id: Any, why: str) -> None:
        """A row left out, said once a command however many of its steps read the row."""
        if str(run_id) in self._skipped:
            return
        self._skipped.add(str(run_id))
        if warnings is not None:
            source = f"{self.shown} run {clean_text(run_id, 200)}"
            warnings.append(f"skipped {why if why.startswith(source) else f'{source}: {why}'}")

    def _identity(self, connection: Any) -> str:
        """The table, as the cache of verified rows knows it: the cluster's identifier where
        the role may read it, else the URL (without its password)."""
        try:
            with connection.transaction():
                cluster = connection.execute("SELECT system_identifier::text FROM "
                                             "pg_control_system()").fetchone()[0]
        except _psycopg().Error:
            cluster = self.shown
        database, schema = connection.execute("SELECT current_database(), current_schema()"
                                              ).fetchone()
        return f"{cluster} {database} {schema} {TABLE}"

    def _verified(self, where: str, values: tuple[Any, ...], warnings: list[str] | None
                  ) -> list[dict[str, Any]]:
        """The rows matching `where` whose record validates and agrees with their columns
        (harness/store/server_rows), by column; the others reported and skipped."""
        def read(connection: Any) -> tuple[str, list[dict[str, Any]]]:
            found = connection.execute(f"SELECT {STAMP_SQL}, {', '.join(COLUMNS)} FROM "
                                       f"{TABLE}{where}", values).fetchall()
            return self._identity(connection), [dict(zip(("stamp", *COLUMNS), row,
                                                         strict=True)) for row in found]

        identity, rows = self._run("reading the index", read, ("", []))
        if not rows:
            return []
        cache = RowCache(identity)
        try:
            return verify(rows, cache, self._texts, self._parsed,
                          lambda run_id, why: self._skip(warnings, run_id, why))
        finally:
            cache.close()

    def summary_rows(self, warnings: list[str] | None = None) -> list[dict[str, Any]]:
        """Every stored record as its row of index columns (columns by name): only rows whose
        record validates and agrees with its columns; the others are reported in `warnings`
        and skipped (any writer with INSERT can add a row that claims anything)."""
        return self._verified("", (), warnings)

    def _texts(self, run_ids: list[str]) -> list[tuple[str, str | None]]:
        """(run_id, stored text or None past MAX_RECORD_BYTES) of the stored runs among
        run_ids, one query."""
        return self._run("reading records", lambda connection: connection.execute(
            f"SELECT run_id, {_TEXT} FROM {TABLE} WHERE run_id = ANY(%s)",
            (run_ids,)).fetchall(), [])

    def load_rows(self, rows: Iterable[dict[str, Any]], warnings: list[str] | None = None
                  ) -> Iterator[dict[str, Any]]:
        """The records of index rows, in full, each validated: add and add_new validate what
        dtbench writes, but any writer with INSERT can add a row directly."""
        wanted = [row["run_id"] for row in rows]
        for start in range(0, len(wanted), 1000):
            chunk = wanted[start:start + 1000]
            texts = dict(self._texts(chunk))
            for run_id in chunk:
                try:
                    if run_id not in texts:
                        raise SchemaError(f"{self.shown} run {clean_text(run_id, 200)}: gone "
                                          "from the server")
                    yield self._parsed(run_id, texts[run_id])
                except SchemaError as exc:
                    self._skip(warnings, run_id, str(exc))

    def record_texts(self, run_ids: list[str]) -> Iterator[tuple[str, str]]:
        """(run_id, the record as JSON text) of each stored run among run_ids of at most
        MAX_RECORD_BYTES, a thousand a query over one connection (a connection each cost
        publish 2.8 s at 100,000 records: every one authenticates anew)."""
        psycopg = _psycopg()
        connection = self._connect(create=False)
        try:
            for start in range(0, len(run_ids) if self._ready else 0, 1000):
                yield from ((run_id, text) for run_id, text in connection.execute(
                    f"SELECT run_id, {_TEXT} FROM {TABLE} WHERE run_id = ANY(%s)",
                    (run_ids[start:start + 1000],)).fetchall() if text is not None)
        except psycopg.Error as exc:
            raise self._failure(exc, "reading records") from None
        finally:
            connection.close()

    def find_baseline(self, spec: RunSpec) -> dict[str, Any] | None:
        """The newest successful world_size=1 record of the same experiment: same per-rank
        batch (weak scaling) preferred, else a batch equal to spec's global batch (strong)."""
        wanted = {"status": "success", "world_size": 1,
                  **{name: cell(name, getattr(spec, name)) for name in BASELINE_COLUMNS}}
        where = " AND ".join(f"{name} = %s" for name in wanted)
        rows = self._run("finding a baseline", lambda connection: connection.execute(
            f"SELECT run_id, {_TEXT} FROM {TABLE} WHERE {where} ORDER BY created_at DESC",
            tuple(wanted.values())).fetchall())
        return choose_baseline(self._checked(rows, wanted), spec)

    def _checked(self, rows: Iterable[tuple[Any, str | None]], wanted: dict[str, Any]
                 ) -> Iterator[dict[str, Any]]:
        """The stored rows that are valid records and whose record has the `wanted` cells (a
        row's columns may claim them falsely), lazily; others are passed over."""
        for run_id, text in rows:
            try:
                record = self._parsed(run_id, text)
            except SchemaError:
                continue
            cells = cells_of(record)
            if all(cells[name] == value for name, value in wanted.items()):
                yield record

    def count_success(self, spec_key: str) -> int:
        """Successful records of one spec (for --resume): verified rows only, as summaries."""
        return sum(row["spec_key"] == spec_key and row["status"] == "success" for row in
                   self._verified(" WHERE spec_key = %s AND status = 'success'", (spec_key,),
                                  None))
