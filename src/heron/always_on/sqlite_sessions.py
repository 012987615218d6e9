"""`SqliteHostIndex`: the `HostIndex` of `heron.always_on.sessions` in heron's SQLite database
(table `serve_sessions`)."""

from __future__ import annotations

import sqlite3

from heron._support.state import sqlite_errors, transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS serve_sessions (
    host        TEXT NOT NULL,
    session     TEXT NOT NULL,
    first_seen  REAL NOT NULL,
    last_active REAL NOT NULL,
    PRIMARY KEY (host, session)
) WITHOUT ROWID
"""


@sqlite_errors
class SqliteHostIndex:
    """`HostIndex` on a connection to `<state_dir>/heron.db` (the caller closes it). The index
    sets `isolation_level = None` and opens explicit transactions, like the session store it
    shares the server's connection with."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.isolation_level = None  # explicit transactions only
        conn.execute(_SCHEMA)
        self._conn = conn

    def add(self, host: str, session: str, *, now: float) -> bool:
        with transaction(self._conn) as conn:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO serve_sessions (host, session, first_seen, last_active)"
                " VALUES (?, ?, ?, ?)",
                (host, session, now, now),
            )
        return cursor.rowcount == 1

    def sessions(self, host: str) -> list[str]:
        rows = self._conn.execute(
            "SELECT session FROM serve_sessions WHERE host = ? ORDER BY first_seen, session",
            (host,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def touch(self, host: str, session: str, *, now: float) -> None:
        # One statement commits on its own (autocommit): no `BEGIN` / `COMMIT` around it.
        self._conn.execute(
            "UPDATE serve_sessions SET last_active = ? WHERE host = ? AND session = ?",
            (now, host, session),
        )
