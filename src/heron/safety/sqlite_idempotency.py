"""`SqliteIdempotencyLedger`: idempotency keys and used confirmation tokens in heron's SQLite
database (tables `idempotency_keys` and `confirmation_tokens_used`).

Every operation opens its own short-lived connection (`heron._support.state`); a claim is one
`BEGIN IMMEDIATE` transaction, so two processes cannot both claim a key.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from heron._support.state import connect, sqlite_errors, write_transaction
from heron.safety.idempotency import KeyRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency_keys (
    tool TEXT NOT NULL,
    key TEXT NOT NULL,
    arguments_sha256 TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'done')),
    result TEXT,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    PRIMARY KEY (tool, key)
);
CREATE TABLE IF NOT EXISTS confirmation_tokens_used (
    nonce TEXT PRIMARY KEY,
    tool TEXT NOT NULL,
    expires REAL NOT NULL
);
"""


@sqlite_errors
class SqliteIdempotencyLedger:
    """`IdempotencyLedger` in `<state_dir>/heron.db`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        with connect(self.state_dir) as db:
            db.executescript(_SCHEMA)

    def claim(
        self, tool: str, key: str, arguments_sha256: str, *, now: float, expires: float
    ) -> KeyRecord | None:
        with write_transaction(self.state_dir) as db:
            record = _live(db, tool, key, now)
            if record is not None:
                return record
            db.execute(
                "INSERT OR REPLACE INTO idempotency_keys VALUES (?, ?, ?, 'running', NULL, ?, ?)",
                (tool, key, arguments_sha256, now, expires),
            )
        return None

    def get(self, tool: str, key: str, *, now: float) -> KeyRecord | None:
        with connect(self.state_dir) as db:
            return _live(db, tool, key, now)

    def complete(self, tool: str, key: str, result: str) -> None:
        with write_transaction(self.state_dir) as db:
            db.execute(
                "UPDATE idempotency_keys SET state = 'done', result = ? WHERE tool = ? AND key = ?",
                (result, tool, key),
            )

    def release(self, tool: str, key: str) -> None:
        with write_transaction(self.state_dir) as db:
            db.execute("DELETE FROM idempotency_keys WHERE tool = ? AND key = ?", (tool, key))

    def use_token(self, nonce: str, tool: str, expires: float) -> bool:
        with write_transaction(self.state_dir) as db:
            try:
                db.execute(
                    "INSERT INTO confirmation_tokens_used VALUES (?, ?, ?)", (nonce, tool, expires)
                )
            except sqlite3.IntegrityError:
                return False
        return True

    def purge_expired(self, now: float) -> int:
        with write_transaction(self.state_dir) as db:
            gone = db.execute("DELETE FROM idempotency_keys WHERE expires <= ?", (now,)).rowcount
            gone += db.execute(
                "DELETE FROM confirmation_tokens_used WHERE expires <= ?", (now,)
            ).rowcount
        return gone


def _live(db: sqlite3.Connection, tool: str, key: str, now: float) -> KeyRecord | None:
    row: tuple[Any, ...] | None = db.execute(
        "SELECT arguments_sha256, state, result, created FROM idempotency_keys "
        "WHERE tool = ? AND key = ? AND expires > ?",
        (tool, key, now),
    ).fetchone()
    if row is None:
        return None
    digest, state, result, created = row
    return KeyRecord(arguments_sha256=digest, state=state, result=result, created=created)
