"""`SqliteSessionStore`: the `SessionStore` in heron's SQLite database (table `session_entries`).

The store sets `isolation_level = None` on its connection and opens its own explicit
transactions (`heron._support.state.transaction`), so the event bus, which shares the
connection, runs an append inside its own transaction (`append_in`) and commits both at once.
The head check of `append` runs inside a `BEGIN IMMEDIATE` transaction, so it cannot race a
writer in another process.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from heron._support.limits import model_json
from heron._support.state import open_db, sqlite_errors, transaction
from heron.messages import Message
from heron.sessions.store import (
    Companion,
    ConcurrentWriteError,
    SessionEntry,
    SessionExistsError,
    SessionInfo,
    TokenCounts,
    decode_history,
    reading_history,
)

_TAIL_CHUNK = 16
"""Rows read per step of `load_tail` (most tool rounds fit in one)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS session_entries (
    entry_id  INTEGER PRIMARY KEY AUTOINCREMENT,
    session   TEXT NOT NULL,
    parent_id INTEGER,
    ts        REAL NOT NULL,
    role      TEXT NOT NULL,
    message   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS session_entries_by_session ON session_entries (session, entry_id);
-- Derived: an entry's tokens as one counter counts them, by the entry's position in its
-- session (`TokenCounts`), apart from the entries so that reading them does not read the
-- messages: one range of the key per session and counter.
CREATE TABLE IF NOT EXISTS session_entry_tokens (
    session    TEXT NOT NULL,
    counted_by TEXT NOT NULL,
    position   INTEGER NOT NULL,
    tokens     INTEGER NOT NULL,
    PRIMARY KEY (session, counted_by, position)
) WITHOUT ROWID;
"""


@sqlite_errors
class SqliteSessionStore:
    """Append-only session histories over one SQLite connection (WAL, see
    `heron._support.state`)."""

    def __init__(self, conn: sqlite3.Connection, *, now: Callable[[], float] = time.time) -> None:
        conn.isolation_level = None  # explicit transactions only; see the module docstring
        conn.executescript(_SCHEMA)
        self._conn = conn
        self._now = now
        self.companions: list[Companion] = []
        """Run inside every append's transaction, after its rows, with `(conn, session,
        messages)`: rows of another store that must commit with the history or not at all
        (the gateway's turn log)."""

    @classmethod
    def open(cls, state_dir: Path) -> SqliteSessionStore:
        """A store on `<state_dir>/heron.db`; close it with `close()`."""
        return cls(open_db(state_dir))

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection, for SQLite stores that share this database and its transactions."""
        return self._conn

    def close(self) -> None:
        self._conn.close()

    def head(self, session: str) -> int:
        return _head(self._conn, session)

    def append(
        self,
        session: str,
        messages: Sequence[Message],
        *,
        expected_last_entry: int | None = None,
        tokens: TokenCounts | None = None,
    ) -> int:
        with transaction(self._conn) as conn:
            return self.append_in(
                conn, session, messages, expected_last_entry=expected_last_entry, tokens=tokens
            )

    def append_in(
        self,
        conn: sqlite3.Connection,
        session: str,
        messages: Sequence[Message],
        *,
        expected_last_entry: int | None = None,
        now: float | None = None,
        tokens: TokenCounts | None = None,
    ) -> int:
        """`append` inside a write transaction the caller opened on `conn` (this store's
        connection) and commits; `now` overrides the entries' timestamp."""
        head = _head(conn, session)
        if expected_last_entry is not None and head != expected_last_entry:
            raise ConcurrentWriteError(session, expected_last_entry, head)
        ts = self._now() if now is None else now
        for message in messages:
            cursor = conn.execute(
                "INSERT INTO session_entries (session, parent_id, ts, role, message)"
                " VALUES (?, ?, ?, ?, ?)",
                (session, head or None, ts, message.role, model_json(message)),
            )
            assert cursor.lastrowid is not None  # an INSERT into a rowid table always sets it
            head = cursor.lastrowid
        if tokens is not None:
            _add_token_counts(conn, session, tokens)
        if messages:
            for companion in self.companions:
                companion(conn, session, messages)
        return head

    def create(self, session: str, entries: Sequence[tuple[float, Message]]) -> tuple[int, int]:
        with transaction(self._conn) as conn:
            existing = conn.execute(
                "SELECT COUNT(*) FROM session_entries WHERE session = ?", (session,)
            ).fetchone()[0]
            if existing:
                raise SessionExistsError(session, existing)
            head = first = 0
            for timestamp, message in entries:
                head = self.append_in(conn, session, [message], now=timestamp)
                first = first or head
        return first, head

    def load(self, session: str) -> list[Message]:
        return self.load_with_head(session)[0]

    def load_with_head(self, session: str) -> tuple[list[Message], int]:
        # One statement reads one snapshot: the head is the last row's id, `MAX(entry_id)`,
        # with no transaction around a second query.
        with reading_history():
            rows = self._conn.execute(
                "SELECT entry_id, message FROM session_entries WHERE session = ? ORDER BY entry_id",
                (session,),
            ).fetchall()
            return decode_history(session, rows), int(rows[-1][0]) if rows else 0

    def load_tail(self, session: str) -> tuple[list[Message], int]:
        # Most tails fit in one chunk, and one statement reads one snapshot: no transaction.
        # A longer round is read again from its end, in one read transaction.
        tail = self._tail(session, one_chunk=True)
        if tail is None:
            self._conn.execute("BEGIN")
            try:
                tail = self._tail(session, one_chunk=False)
            finally:
                self._conn.execute("COMMIT")
        assert tail is not None
        return tail

    def _tail(self, session: str, *, one_chunk: bool) -> tuple[list[Message], int] | None:
        """`load_tail`'s reading; `None` when `one_chunk` and the tail is longer."""
        tail: list[tuple[int, str]] = []
        head = 0
        before = 2**63 - 1
        while True:
            # Rows are stepped one at a time: the reading stops at the round's start.
            cursor = self._conn.execute(
                "SELECT entry_id, role, message FROM session_entries"
                " WHERE session = ? AND entry_id < ? ORDER BY entry_id DESC LIMIT ?",
                (session, before, _TAIL_CHUNK),
            )
            rows, started = 0, False
            for entry_id, role, body in cursor:
                rows += 1
                head = head or entry_id
                tail.append((entry_id, body))
                before = entry_id
                if role != "tool":
                    started = True
                    break
            cursor.close()
            if started or rows < _TAIL_CHUNK:
                return decode_history(session, tail[::-1]), head
            if one_chunk:
                return None

    def entries(self, session: str) -> list[SessionEntry]:
        with reading_history():
            rows = self._conn.execute(
                "SELECT entry_id, parent_id, ts, message FROM session_entries"
                " WHERE session = ? ORDER BY entry_id",
                (session,),
            ).fetchall()
            return [
                SessionEntry(
                    entry_id=entry_id,
                    session=session,
                    parent_id=parent_id,
                    timestamp=ts,
                    message=message,
                )
                for (entry_id, parent_id, ts, _), message in zip(
                    rows, decode_history(session, rows), strict=True
                )
            ]

    def token_counts(self, session: str, counted_by: str) -> dict[int, int]:
        return dict(
            self._conn.execute(
                "SELECT position, tokens FROM session_entry_tokens"
                " WHERE session = ? AND counted_by = ?",
                (session, counted_by),
            ).fetchall()
        )

    def add_token_counts(self, session: str, tokens: TokenCounts) -> None:
        with transaction(self._conn) as conn:
            _add_token_counts(conn, session, tokens)

    def list_sessions(self) -> list[SessionInfo]:
        rows = self._conn.execute(
            "SELECT session, COUNT(*), MAX(entry_id), MAX(ts) FROM session_entries"
            " GROUP BY session ORDER BY MAX(entry_id) DESC"
        ).fetchall()
        return [
            SessionInfo(session=s, entries=n, last_entry=last, updated=ts)
            for s, n, last, ts in rows
        ]


def _head(conn: sqlite3.Connection, session: str) -> int:
    row = conn.execute(
        "SELECT MAX(entry_id) FROM session_entries WHERE session = ?", (session,)
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _add_token_counts(conn: sqlite3.Connection, session: str, tokens: TokenCounts) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO session_entry_tokens (session, counted_by, position, tokens)"
        " VALUES (?, ?, ?, ?)",
        [(session, tokens.counted_by, at, count) for at, count in tokens.tokens.items()],
    )
