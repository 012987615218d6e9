"""`SqliteMessageStore`: the `MessageStore` in heron's SQLite database (tables `messages` and
`message_deliveries`)."""

from __future__ import annotations

import builtins
import json
import sqlite3
from pathlib import Path
from typing import Any

from heron._support.state import open_db, sqlite_errors, transaction
from heron.collaboration.store import (
    COLUMNS,
    Delivery,
    StoredMessage,
    list_filter,
    message_of_row,
    message_row,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id           TEXT PRIMARY KEY,
    thread       TEXT NOT NULL,
    session      TEXT,
    kind         TEXT NOT NULL,
    recipient    TEXT NOT NULL,
    text         TEXT NOT NULL,
    card         TEXT,
    attachments  TEXT NOT NULL,
    urgency      TEXT NOT NULL,
    sender       TEXT NOT NULL,
    created      REAL NOT NULL,
    read_at      REAL,
    read_via     TEXT,
    answered_at  REAL,
    answered_via TEXT,
    due_at       REAL,
    pending      TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS messages_thread ON messages (thread, created);
CREATE INDEX IF NOT EXISTS messages_due ON messages (due_at) WHERE due_at IS NOT NULL;
CREATE TABLE IF NOT EXISTS message_deliveries (
    seq        INTEGER PRIMARY KEY,
    message_id TEXT NOT NULL REFERENCES messages (id),
    channel    TEXT NOT NULL,
    outcome    TEXT NOT NULL,
    at         REAL NOT NULL,
    ref        TEXT
);
CREATE INDEX IF NOT EXISTS message_deliveries_of ON message_deliveries (message_id, seq);
CREATE INDEX IF NOT EXISTS message_deliveries_ref ON message_deliveries (ref)
    WHERE ref IS NOT NULL;
"""


@sqlite_errors
class SqliteMessageStore:
    """`MessageStore` on one SQLite connection (explicit transactions)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.isolation_level = None  # explicit transactions, like the session store
        conn.executescript(_SCHEMA)
        self._conn = conn

    @classmethod
    def open(cls, state_dir: Path) -> SqliteMessageStore:
        """A store on `<state_dir>/heron.db`; close it with `close()`."""
        return cls(open_db(state_dir))

    def close(self) -> None:
        self._conn.close()

    def add(self, message: StoredMessage) -> None:
        with transaction(self._conn) as conn:
            conn.execute(
                f"INSERT INTO messages ({COLUMNS}) VALUES ({', '.join('?' * 17)})",
                message_row(message),
            )
            conn.executemany(
                "INSERT INTO message_deliveries (message_id, channel, outcome, at, ref)"
                " VALUES (?, ?, ?, ?, ?)",
                [(message.id, d.channel, d.outcome, d.at, d.ref) for d in message.deliveries],
            )

    def get(self, message_id: str) -> StoredMessage | None:
        row = self._conn.execute(
            f"SELECT {COLUMNS} FROM messages WHERE id = ?", (message_id,)
        ).fetchone()
        return None if row is None else self._message(row)

    def list(
        self,
        *,
        unread_only: bool = False,
        session: str | None = None,
        thread: str | None = None,
        limit: int = 100,
    ) -> builtins.list[StoredMessage]:
        clause, params = list_filter(
            "?", unread_only=unread_only, session=session, thread=thread, limit=limit
        )
        rows = self._conn.execute(
            f"SELECT {COLUMNS} FROM messages WHERE {clause}"
            " ORDER BY created DESC, rowid DESC LIMIT ?",
            params,
        ).fetchall()
        return [self._message(row) for row in reversed(rows)]

    def record_delivery(self, message_id: str, delivery: Delivery) -> None:
        with transaction(self._conn) as conn:
            if (
                conn.execute("SELECT 1 FROM messages WHERE id = ?", (message_id,)).fetchone()
                is None
            ):
                raise KeyError(message_id)
            conn.execute(
                "INSERT INTO message_deliveries (message_id, channel, outcome, at, ref)"
                " VALUES (?, ?, ?, ?, ?)",
                (message_id, delivery.channel, delivery.outcome, delivery.at, delivery.ref),
            )

    def find_by_ref(self, refs: builtins.list[str]) -> StoredMessage | None:
        for ref in refs:
            row = self._conn.execute(
                "SELECT message_id FROM message_deliveries WHERE ref = ? ORDER BY seq LIMIT 1",
                (ref,),
            ).fetchone()
            if row is not None:
                return self.get(str(row[0]))
        return None

    def mark_read(self, message_id: str, *, via: str, at: float) -> bool:
        with transaction(self._conn) as conn:
            cursor = conn.execute(
                "UPDATE messages SET read_at = ?, read_via = ?, due_at = NULL, pending = '[]'"
                " WHERE id = ? AND read_at IS NULL",
                (at, via, message_id),
            )
        return cursor.rowcount == 1

    def mark_answered(self, message_id: str, *, via: str, at: float) -> bool:
        with transaction(self._conn) as conn:
            cursor = conn.execute(
                "UPDATE messages SET answered_at = ?, answered_via = ?,"
                " read_at = COALESCE(read_at, ?), read_via = COALESCE(read_via, ?),"
                " due_at = NULL, pending = '[]' WHERE id = ? AND answered_at IS NULL",
                (at, via, at, via, message_id),
            )
        return cursor.rowcount == 1

    def schedule(self, message_id: str, *, pending: tuple[str, ...], due_at: float | None) -> None:
        with transaction(self._conn) as conn:
            cursor = conn.execute(
                "UPDATE messages SET pending = ?, due_at = ? WHERE id = ?",
                (json.dumps(list(pending)), due_at if pending else None, message_id),
            )
            if cursor.rowcount != 1:
                raise KeyError(message_id)

    def take_due(self, now: float) -> builtins.list[StoredMessage]:
        with transaction(self._conn) as conn:
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM messages WHERE due_at IS NOT NULL AND due_at <= ?"
                " AND read_at IS NULL ORDER BY due_at, rowid",
                (now,),
            ).fetchall()
            conn.executemany(
                "UPDATE messages SET due_at = NULL WHERE id = ?", [(row[0],) for row in rows]
            )
        return [self._message(row) for row in rows]

    def next_due(self) -> float | None:
        row = self._conn.execute(
            "SELECT MIN(due_at) FROM messages WHERE due_at IS NOT NULL AND read_at IS NULL"
        ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def _message(self, row: tuple[Any, ...]) -> StoredMessage:
        deliveries = self._conn.execute(
            "SELECT channel, outcome, at, ref FROM message_deliveries WHERE message_id = ?"
            " ORDER BY seq",
            (row[0],),
        )
        return message_of_row(row, deliveries)
