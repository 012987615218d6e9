"""`SqliteThreadIndex`: the `ThreadIndex` of `heron.always_on.channels.mail_inbound` in heron's
SQLite database (table `mail_threads`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from heron._support.state import sqlite_errors, transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mail_threads (
    message_id  TEXT PRIMARY KEY,
    session     TEXT NOT NULL,
    recorded_at REAL NOT NULL
) WITHOUT ROWID
"""


@sqlite_errors
class SqliteThreadIndex:
    """`ThreadIndex` on a connection to `<state_dir>/heron.db` (the caller closes it). The index
    sets `isolation_level = None` and opens explicit transactions, like the session store it
    shares the server's connection with; `record` called while a transaction is open on the
    connection joins it (it commits with the caller's writes)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.isolation_level = None  # explicit transactions only
        conn.execute(_SCHEMA)
        self._conn = conn

    def session_of(self, message_ids: Sequence[str]) -> str | None:
        for message_id in message_ids:
            row = self._conn.execute(
                "SELECT session FROM mail_threads WHERE message_id = ?", (message_id,)
            ).fetchone()
            if row is not None:
                return str(row[0])
        return None

    def record(self, pairs: Iterable[tuple[str, str]], *, now: float) -> None:
        rows = [(m, s, now) for m, s in pairs if m]
        if not rows:
            return
        insert = (
            "INSERT OR IGNORE INTO mail_threads (message_id, session, recorded_at) VALUES (?, ?, ?)"
        )
        if self._conn.in_transaction:  # joins the caller's transaction
            self._conn.executemany(insert, rows)
            return
        with transaction(self._conn) as conn:
            conn.executemany(insert, rows)
