"""`SessionStore`: append-only conversation histories in heron's SQLite database.

Each entry is one `Message` (user, assistant, tool result) with its own id, the id of the entry
before it in the same session (`parent_id`), a timestamp and the role. Entries are never
updated or deleted, so a history can be read back exactly as the model saw it.

Write before show: callers append a message before they display it, so whatever a user saw
survives a crash.

Concurrent writers are refused, never interleaved: `append(..., expected_last_entry=head)`
checks, inside the write transaction, that the session still ends at the entry the writer last
saw, and raises `ConcurrentWriteError` otherwise. A writer that owns a session keeps the head
`append` returns and passes it on its next call; `0` means "the session must still be empty".

The store sets `isolation_level = None` on its connection and opens its own explicit
transactions (`transaction`), so other stores sharing the connection (the event bus) can run
an `append` inside their transaction (`conn_tx=`) and commit both at once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter

from heron._support.state import open_db
from heron.errors import HeronError
from heron.messages import Message

MESSAGE: TypeAdapter[Message] = TypeAdapter(Message)
"""Validates and serialises one history message (the `role` field discriminates)."""
_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])
_TAIL_CHUNK = 16

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
"""


class ConcurrentWriteError(HeronError, RuntimeError):
    """Another writer appended to the session since this writer last saw it."""

    def __init__(self, session: str, expected: int, actual: int) -> None:
        self.session = session
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"session {session!r} was written by someone else: expected it to end at entry "
            f"{expected}, it ends at entry {actual}; refusing to interleave"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionEntry:
    """One stored history message."""

    entry_id: int
    session: str
    parent_id: int | None
    """The previous entry of the same session; `None` for the first."""
    timestamp: float
    """Seconds since the epoch, when the entry was written."""
    message: Message


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionInfo:
    session: str
    entries: int
    last_entry: int
    updated: float


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """An explicit write transaction (`BEGIN IMMEDIATE` … `COMMIT`), rolled back on any error.

    `IMMEDIATE` takes the write lock at the start, so a read-check-write inside it (the head
    check of `append`) cannot race another process. Needs `isolation_level = None`.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


class SessionStore:
    """Append-only session histories over one SQLite connection (WAL, see
    `heron._support.state`)."""

    def __init__(self, conn: sqlite3.Connection, *, now: Callable[[], float] = time.time) -> None:
        conn.isolation_level = None  # explicit transactions only; see the module docstring
        conn.executescript(_SCHEMA)
        self._conn = conn
        self._now = now

    @classmethod
    def open(cls, state_dir: Path) -> SessionStore:
        """A store on `<state_dir>/heron.db`; close it with `close()`."""
        return cls(open_db(state_dir))

    @property
    def conn(self) -> sqlite3.Connection:
        """The connection, for stores that share this database and its transactions."""
        return self._conn

    def close(self) -> None:
        self._conn.close()

    def head(self, session: str) -> int:
        """The id of the session's last entry; `0` when it has none."""
        return _head(self._conn, session)

    def append(
        self,
        session: str,
        messages: Sequence[Message],
        *,
        expected_last_entry: int | None = None,
        conn_tx: sqlite3.Connection | None = None,
    ) -> int:
        """Append `messages` in order and return the session's new head.

        `expected_last_entry` (when not `None`) must equal the current head, else
        `ConcurrentWriteError` and nothing is written. `conn_tx` is a connection with a write
        transaction already open: the entries join it and the caller commits.
        """
        if conn_tx is None:
            with transaction(self._conn) as conn:
                return self._append(conn, session, messages, expected_last_entry)
        return self._append(conn_tx, session, messages, expected_last_entry)

    def _append(
        self,
        conn: sqlite3.Connection,
        session: str,
        messages: Sequence[Message],
        expected: int | None,
    ) -> int:
        head = _head(conn, session)
        if expected is not None and head != expected:
            raise ConcurrentWriteError(session, expected, head)
        now = self._now()
        for message in messages:
            cursor = conn.execute(
                "INSERT INTO session_entries (session, parent_id, ts, role, message)"
                " VALUES (?, ?, ?, ?, ?)",
                (session, head or None, now, message.role, message.model_dump_json()),
            )
            assert cursor.lastrowid is not None  # an INSERT into a rowid table always sets it
            head = cursor.lastrowid
        return head

    def load(self, session: str) -> list[Message]:
        """The session's history, oldest first (empty for an unknown session)."""
        rows = self._conn.execute(
            "SELECT message FROM session_entries WHERE session = ? ORDER BY entry_id", (session,)
        ).fetchall()
        # One validation call for the whole history is several times faster than one per row.
        return _MESSAGES.validate_json("[" + ",".join(r[0] for r in rows) + "]")

    def load_with_head(self, session: str) -> tuple[list[Message], int]:
        """The history and its head, read from one snapshot: what a new writer starts from."""
        self._conn.execute("BEGIN")
        try:
            return self.load(session), self.head(session)
        finally:
            self._conn.execute("COMMIT")

    def load_tail(self, session: str) -> tuple[list[Message], int]:
        """The end of the history and its head, read from one snapshot, without reading the
        rest: the last message that is not a tool result and every message after it (its
        last tool round, when it is an assistant message with calls). What a writer needs to
        repair a session and decide whether it waits for the model; the cost does not grow
        with the history's length."""
        tail: list[str] = []
        head = 0
        self._conn.execute("BEGIN")
        try:
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
                    tail.append(body)
                    before = entry_id
                    if role != "tool":
                        started = True
                        break
                cursor.close()
                if started or rows < _TAIL_CHUNK:
                    break
        finally:
            self._conn.execute("COMMIT")
        return _MESSAGES.validate_json("[" + ",".join(reversed(tail)) + "]"), head

    def entries(self, session: str) -> list[SessionEntry]:
        """The session's entries with their ids, parents and timestamps, oldest first."""
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
                message=MESSAGE.validate_json(body),
            )
            for entry_id, parent_id, ts, body in rows
        ]

    def list_sessions(self) -> list[SessionInfo]:
        """Every session with at least one entry, most recently written first."""
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
