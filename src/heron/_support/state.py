"""heron's state directory and its SQLite database.

Every SQLite store implementation (the `sqlite_*` modules next to each store protocol) shares
one database, `<state_dir>/heron.db`. Each creates its own tables (`CREATE TABLE IF NOT
EXISTS`) on the connection returned by `open_db`, so this module knows nothing about their
schemas. It also holds what those implementations share: explicit write transactions
(`transaction`, `write_transaction`), the translation of `sqlite3` errors into
`heron.errors.StoreError` (`sqlite_errors`), and the schema versions of the database
(`migrate_sqlite`, `heron._support.migrations`).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from heron._support.migrations import SQLITE, Migration
from heron._support.store_errors import translate_errors


def default_state_dir() -> Path:
    """`$HERON_STATE_DIR`, else `$XDG_STATE_HOME/heron`, else `~/.local/state/heron`."""
    explicit = os.environ.get("HERON_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    # The XDG spec says relative values are invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "heron"
    return Path.home() / ".local" / "state" / "heron"


def open_db(state_dir: Path) -> sqlite3.Connection:
    """Open `<state_dir>/heron.db`, creating the directory (mode 0700) if needed.

    The connection uses WAL journaling (readers never block the writer), `synchronous=NORMAL`
    (durable across application crashes; a power loss may drop the last commits) and enforces
    foreign keys. The caller owns the connection and closes it.
    """
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = state_dir / "heron.db"
    if not path.exists():
        # Audit records and histories are private: create the file owner-only, whatever the umask.
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def connect(state_dir: Path) -> Iterator[sqlite3.Connection]:
    """A connection to `<state_dir>/heron.db` in autocommit mode, closed on exit."""
    db = open_db(state_dir)
    db.isolation_level = None  # transactions are explicit (`write_transaction`)
    try:
        yield db
    finally:
        db.close()


@contextmanager
def write_transaction(state_dir: Path) -> Iterator[sqlite3.Connection]:
    """A connection inside `BEGIN IMMEDIATE`: committed when the block ends, rolled back when
    it raises."""
    with connect(state_dir) as db, transaction(db):
        yield db


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """An explicit write transaction (`BEGIN IMMEDIATE` … `COMMIT`), rolled back on any error.

    `IMMEDIATE` takes the write lock at the start, so a read-check-write inside it (the head
    check of a session append) cannot race another process. Needs `isolation_level = None`.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def update_row(
    conn: sqlite3.Connection,
    table: str,
    row_id: str,
    changes: dict[str, Any],
    *,
    fields: Collection[str],
    what: str,
) -> None:
    """`UPDATE table SET <changes> WHERE id = row_id`, committed; `ValueError` (and nothing
    changed) when a name in `changes` is not one of `fields` of a `what` (`job`, `timer`)."""
    unknown = set(changes) - set(fields)
    if unknown:
        raise ValueError(f"unknown {what} fields: {sorted(unknown)}")
    sets = ", ".join(f"{name} = ?" for name in changes)
    with conn:
        conn.execute(f"UPDATE {table} SET {sets} WHERE id = ?", [*changes.values(), row_id])


sqlite_errors = translate_errors(sqlite3.Error)
"""Class decorator for a SQLite store: its public methods (sync, async and class methods)
raise `StoreError` where SQLite raised `sqlite3.Error`, so callers name no back end."""


def sqlite_versions(conn: sqlite3.Connection) -> set[int]:
    """The schema versions recorded in a SQLite database (`heron._support.migrations`)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    if exists is None:
        return set()
    return {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}


def migrate_sqlite(conn: sqlite3.Connection) -> list[Migration]:
    """Apply the SQLite migrations `conn`'s database lacks, in one transaction; returns them."""
    conn.isolation_level = None
    with transaction(conn):
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )
        applied = sqlite_versions(conn)
        done = [m for m in SQLITE if m.version not in applied]
        for migration in done:
            for statement in filter(str.strip, migration.script.split(";")):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, time.time()),
            )
    return done
