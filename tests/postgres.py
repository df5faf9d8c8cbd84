"""A throw-away PostgreSQL 15 server for the tests of the PostgreSQL store: run as the
`postgres` user (it refuses root) in a temporary directory, on a free port of 127.0.0.1, with
scram-sha-256 password authentication for TCP connections. The `server` and `url` fixtures
(tests/harness/conftest.py) start one a session and give each test a database of its own."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

from infrastructure import failed_to_start

BIN = Path("/usr/lib/postgresql/15/bin")
PASSWORD = "Pw-7f3q!x9z"  # distinctive: any occurrence in output is a leak
ROLE = "dtbench"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """A PostgreSQL 15 cluster in a temporary directory, run as the postgres user."""

    def __init__(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="dtbench-pg-"))
        self.data, self.port = self.home / "data", free_port()
        self.admin_password = "admin-" + os.urandom(6).hex()

    def _as_postgres(self, *argv: str) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run([*prefix, *argv], capture_output=True, text=True, timeout=60,
                              check=False)

    def init(self) -> None:
        (self.home / "pwfile").write_text(self.admin_password + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.home, "postgres", "postgres")
            shutil.chown(self.home / "pwfile", "postgres", "postgres")
        done = self._as_postgres(str(BIN / "initdb"), "-D", str(self.data), "-U", "postgres",
                                 "-E", "UTF8", "--auth-local=trust",
                                 "--auth-host=scram-sha-256",
                                 f"--pwfile={self.home / 'pwfile'}")
        if done.returncode != 0:
            failed_to_start(f"initdb failed: {done.stderr[-500:]}")

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.home} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        done = self._as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
                                 "-l", str(self.home / "log"), "-w", "-t", "30", "start")
        if done.returncode != 0:
            log = (self.home / "log").read_text() if (self.home / "log").exists() else ""
            failed_to_start(f"pg_ctl start failed: {done.stderr[-300:]} {log[-500:]}")

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def admin(self, sql: str) -> None:
        import psycopg

        url = f"postgresql://postgres:{self.admin_password}@127.0.0.1:{self.port}/postgres"
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(sql)

    def url(self, database: str, password: bool = True) -> str:
        secret = f":{PASSWORD}" if password else ""
        return f"postgresql://{ROLE}{secret}@127.0.0.1:{self.port}/{database}"
