"""`SqliteTurnLog`: the `TurnLog` of `heron.gateway.eventlog` in heron's SQLite database
(tables `gateway_turn_events` and `gateway_meta`), on the connection of the session store
whose appends it joins (`append_in`)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from heron._support.state import open_db, sqlite_errors, transaction
from heron.gateway.eventlog import LoggedEvent

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS gateway_turn_events (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        session TEXT NOT NULL,
        type    TEXT NOT NULL,
        body    TEXT NOT NULL,
        at      REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS gateway_turn_events_session ON gateway_turn_events (session, seq)",
    """CREATE TABLE IF NOT EXISTS gateway_meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID""",
)


@sqlite_errors
class SqliteTurnLog:
    """`TurnLog` on a connection to `<state_dir>/heron.db`: the session store's, so that
    `append_in` is part of an append's transaction (the caller closes it)."""

    def __init__(self, conn: sqlite3.Connection, *, owned: bool = False) -> None:
        conn.isolation_level = None  # explicit transactions only
        with transaction(conn):
            for statement in _SCHEMA:
                conn.execute(statement)
            conn.execute(
                "INSERT OR IGNORE INTO gateway_meta (key, value) VALUES ('epoch', ?)",
                (uuid.uuid4().hex[:12],),
            )
        self._conn = conn
        self._owned = owned
        row = conn.execute("SELECT value FROM gateway_meta WHERE key = 'epoch'").fetchone()
        self._epoch = str(row[0])

    @classmethod
    def open(cls, state_dir: Path) -> SqliteTurnLog:
        """A log on a connection of its own (closed by `close()`)."""
        return cls(open_db(state_dir), owned=True)

    @property
    def epoch(self) -> str:
        return self._epoch

    def append(self, session: str, records: Sequence[tuple[str, dict[str, Any]]], at: float) -> int:
        with transaction(self._conn) as conn:
            return self.append_in(conn, session, records, at)

    def append_in(
        self,
        conn: sqlite3.Connection,
        session: str,
        records: Sequence[tuple[str, dict[str, Any]]],
        at: float,
    ) -> int:
        seq = 0
        for kind, body in records:
            cursor = conn.execute(
                "INSERT INTO gateway_turn_events (session, type, body, at) VALUES (?, ?, ?, ?)",
                (session, kind, json.dumps(body, ensure_ascii=False), at),
            )
            seq = int(cursor.lastrowid or 0)
        return seq

    def after(self, session: str, seq: int, *, limit: int) -> list[LoggedEvent]:
        rows = self._conn.execute(
            "SELECT seq, type, body, at FROM gateway_turn_events"
            " WHERE session = ? AND seq > ? ORDER BY seq LIMIT ?",
            (session, seq, limit),
        ).fetchall()
        return [
            LoggedEvent(
                seq=int(r[0]),
                session=session,
                type=str(r[1]),
                body=json.loads(r[2]),
                at=float(r[3]),
            )
            for r in rows
        ]

    def last(self, session: str) -> int:
        row = self._conn.execute(
            "SELECT MAX(seq) FROM gateway_turn_events WHERE session = ?", (session,)
        ).fetchone()
        return int(row[0] or 0)

    def close(self) -> None:
        if self._owned:
            self._conn.close()
