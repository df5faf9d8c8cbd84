"""Fixtures shared by the tests under tests/harness: a PostgreSQL server (tests/postgres.py)."""
from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator

import pytest
from postgres import BIN, PASSWORD, ROLE, Server


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    pytest.importorskip("psycopg")
    if not (BIN / "initdb").is_file():
        pytest.skip(f"no PostgreSQL 15 binaries in {BIN}")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        pytest.skip("root without runuser: cannot start PostgreSQL as the postgres user")
    pg = Server()
    try:
        pg.init()
        pg.start()
        pg.admin(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
        yield pg
    finally:
        pg.stop("immediate")  # the cluster is thrown away: no shutdown checkpoint
        shutil.rmtree(pg.home, ignore_errors=True)


@pytest.fixture
def url(server: Server, request: pytest.FixtureRequest) -> str:
    """A fresh database of its own for each test, owned by the test role."""
    name = "t_" + "".join(c if c.isalnum() else "_" for c in request.node.name)[:40].lower() \
        + "_" + hashlib.sha1(request.node.name.encode()).hexdigest()[:8]  # parameters
    server.admin(f"CREATE DATABASE {name} OWNER {ROLE}")
    return server.url(name)
