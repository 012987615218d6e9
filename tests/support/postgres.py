"""A real PostgreSQL server for the tests: Debian's `postgresql` binaries, started by the tests.

`PostgresServer` runs `initdb` into a temporary directory and `pg_ctl` on a unix socket inside
it (no TCP port to collide on), and removes it all on `stop`. The `postgres_server` fixture
starts one per test process (so one per xdist worker) and migrates a template database once;
`postgres_url` gives every test a fresh database copied from that template (a file copy,
milliseconds), so tests never see each other's rows.

The binaries come from `scripts/bootstrap-system.sh` (`$HERON_PG_BIN` overrides where they
are looked for). When they are missing the fixture FAILS: CI must run these tests. Only
`HERON_TEST_POSTGRES=unavailable` turns that into a skip, for a machine that says so.

PostgreSQL refuses to run as root; as root (CI containers) the server runs as the `postgres`
user the Debian package creates.
"""

from __future__ import annotations

import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from heron._support.postgres import apply_migrations

TEMPLATE = "heron_template"
_SETTINGS = (
    # Test databases are thrown away: surviving an OS crash (fsync) proves nothing here. The
    # commit still reaches the WAL before it returns, so a killed server loses nothing.
    "-c fsync=off -c full_page_writes=off"
    " -c listen_addresses= -c max_connections=200 -c shared_buffers=32MB"
)


def pg_bin() -> Path | None:
    """The directory holding `initdb` and `pg_ctl`, or `None`."""
    explicit = os.environ.get("HERON_PG_BIN")
    candidates = [Path(explicit)] if explicit else []
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(Path(out.stdout.strip()))
    # Debian installs the server binaries outside PATH, one directory per major version.
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    return None


class PostgresServer:
    """One throwaway PostgreSQL cluster on a unix socket (see the module docstring)."""

    def __init__(self, bindir: Path, *, durable: bool = False) -> None:
        """`durable`: fsync as a production server does (the benches); tests do without."""
        self.bindir = bindir
        self.settings = "-c listen_addresses= -c max_connections=200" if durable else _SETTINGS
        self.root = Path(tempfile.mkdtemp(prefix="heron-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._runas: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._runas = ["runuser", "-u", "postgres", "--"]
        self._names = itertools.count(1)

    def _pg(self, *args: str) -> None:
        done = subprocess.run(
            [*self._runas, *args], capture_output=True, text=True, check=False, timeout=120
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}\n{log}")

    def start(self) -> PostgresServer:
        if not self.data.exists():
            self._pg(
                str(self.bindir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "heron",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            )
        self._pg(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-w",
            "-o",
            f"-k {self.root} {self.settings}",
            "start",
        )
        return self

    def stop(self, *, mode: str = "fast") -> None:
        """Stop the server (`immediate`: as if it crashed); the data stays for `start`."""
        self._pg(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-m", mode, "stop")

    def restart(self) -> None:
        self.stop(mode="immediate")
        self.start()

    def destroy(self) -> None:
        try:
            self.stop(mode="immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://heron@/{database}?host={quote(str(self.root), safe='')}"

    def create_template(self) -> None:
        """The migrated database every test database is copied from."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        with psycopg.connect(self.url(TEMPLATE), autocommit=True) as conn:
            apply_migrations(conn)

    def fresh_database(self) -> str:
        """A new database copied from the template; returns its URL."""
        name = f"heron_test_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a database `fresh_database` or `empty_database` made (its connections too)."""
        name = url.split("/")[-1].split("?")[0]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def empty_database(self) -> str:
        """A new database with no schema at all (for the migration tests); returns its URL."""
        name = f"heron_empty_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


def require_server() -> PostgresServer:
    """A started server, or a loud failure (a skip only when the machine says so)."""
    bindir = pg_bin()
    if bindir is None:
        if os.environ.get("HERON_TEST_POSTGRES") == "unavailable":
            pytest.skip("HERON_TEST_POSTGRES=unavailable: no PostgreSQL on this machine")
        pytest.fail(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: run "
            "scripts/bootstrap-system.sh, set HERON_PG_BIN, or set "
            "HERON_TEST_POSTGRES=unavailable to skip the PostgreSQL tests"
        )
    server = PostgresServer(bindir).start()
    try:
        server.create_template()
    except BaseException:
        server.destroy()
        raise
    return server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for this test process, with the migrated template database."""
    server = require_server()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, migrated database of its own for one test, dropped after it."""
    url = postgres_server.fresh_database()
    yield url
    postgres_server.drop_database(url)
