"""`SqliteNotificationStore`: notifications in heron's SQLite database (table
`notifications`)."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path

from heron._support.state import open_db, sqlite_errors, transaction
from heron.collaboration.notify import Notification

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    id        TEXT PRIMARY KEY,
    created   REAL NOT NULL,
    text      TEXT NOT NULL,
    priority  TEXT NOT NULL,
    delivered TEXT NOT NULL,
    read_at   REAL
);
"""


@sqlite_errors
class SqliteNotificationStore:
    """`NotificationStore` on one SQLite connection (explicit transactions)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.isolation_level = None  # explicit transactions, like the session store
        conn.executescript(_SCHEMA)
        self._conn = conn

    @classmethod
    def open(cls, state_dir: Path) -> SqliteNotificationStore:
        """A store on `<state_dir>/heron.db`; close it with `close()`."""
        return cls(open_db(state_dir))

    def close(self) -> None:
        self._conn.close()

    def record(self, text: str, priority: str) -> str:
        note_id = uuid.uuid4().hex[:12]
        with transaction(self._conn) as conn:
            conn.execute(
                "INSERT INTO notifications (id, created, text, priority, delivered)"
                " VALUES (?, ?, ?, ?, '{}')",
                (note_id, time.time(), text, priority),
            )
        return note_id

    def delivered(self, note_id: str, outcomes: dict[str, str]) -> None:
        with transaction(self._conn) as conn:
            conn.execute(
                "UPDATE notifications SET delivered = ? WHERE id = ?",
                (json.dumps(outcomes, sort_keys=True), note_id),
            )

    def mark_read(self, note_id: str) -> bool:
        with transaction(self._conn) as conn:
            cursor = conn.execute(
                "UPDATE notifications SET read_at = ? WHERE id = ? AND read_at IS NULL",
                (time.time(), note_id),
            )
        return cursor.rowcount == 1

    def notifications(self, *, unread_only: bool = False) -> list[Notification]:
        where = " WHERE read_at IS NULL" if unread_only else ""
        rows = self._conn.execute(
            "SELECT id, created, text, priority, delivered, read_at FROM notifications"
            f"{where} ORDER BY created, rowid"
        ).fetchall()
        return [
            Notification(
                id=i, created=c, text=t, priority=p, delivered=json.loads(d), read=r is not None
            )
            for i, c, t, p, d, r in rows
        ]
