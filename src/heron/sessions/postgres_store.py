"""`PostgresSessionStore`: the `SessionStore` on a shared PostgreSQL database.

Tables `session_entries` (the append-only entries), `session_heads` (one row per session,
its head) and `session_entry_tokens` (entries' token counts, see `heron.sessions.store`).
Every append locks the session's head row (`FOR UPDATE`) inside its transaction, so the head
check and the write are one step whichever worker writes; the event bus runs the same append
inside its own transaction (`append_in`), so consumption and history commit together.

Fencing: a store told a session's lease (`fence`) checks in every append of that session that
the lease's epoch is still the stored one, under a share lock of the lease row (a takeover
waits for the write, or the write sees the takeover), and raises
`heron.sessions.lease.StaleEpochError` otherwise. A sub-agent's session is fenced by its root
session's lease (`fence(lease, session=child)`): it has no lease of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from heron._support.limits import model_json
from heron._support.postgres import Pool, open_pool, pg_errors, run
from heron.messages import Message
from heron.sessions.lease import Lease, StaleEpochError
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

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresSessionStore:
    """Append-only session histories on a PostgreSQL connection pool."""

    def __init__(self, pool: Pool, *, now: Callable[[], float] = time.time) -> None:
        self._pool = pool
        self._now = now
        self._epochs: dict[str, tuple[str, int]] = {}
        """Per fenced session: the session whose lease fences it, and that lease's epoch."""
        self.companions: list[Companion] = []
        """Run inside every append's transaction, after its rows (see
        `heron.sessions.store.Companion`); on the thread that
        appends."""

    @classmethod
    def open(cls, url: str) -> PostgresSessionStore:
        """A store on its own pool to `url`; close it with `close()`."""
        return cls(open_pool(url))

    @property
    def pool(self) -> Pool:
        """The pool, for PostgreSQL stores that share this database and its transactions."""
        return self._pool

    def close(self) -> None:
        self._pool.close()

    # -- fencing ----------------------------------------------------------------------------

    def fence(self, lease: Lease, *, session: str | None = None) -> None:
        """From now on, write `session` (by default `lease.session`) only while `lease.epoch`
        is the current epoch of `lease.session`."""
        self._epochs[session or lease.session] = (lease.session, lease.epoch)

    def unfence(self, session: str) -> None:
        """Stop checking the session's epoch (its lease was released)."""
        self._epochs.pop(session, None)

    def check_fence(self, conn: Conn, session: str) -> None:
        """Raise `StaleEpochError` when this store holds an epoch for `session` that is no
        longer current; inside the caller's write transaction."""
        fenced = self._epochs.get(session)
        if fenced is None:
            return
        leased, epoch = fenced
        row = conn.execute(
            "SELECT epoch FROM session_leases WHERE session = %s FOR SHARE", (leased,)
        ).fetchone()
        current = None if row is None else int(row[0])
        if current != epoch:
            raise StaleEpochError(session, epoch, current)

    # -- SessionStore -----------------------------------------------------------------------

    def head(self, session: str) -> int:
        with self._pool.connection() as conn:
            return _head(conn, session)

    def append(
        self,
        session: str,
        messages: Sequence[Message],
        *,
        expected_last_entry: int | None = None,
        tokens: TokenCounts | None = None,
    ) -> int:
        return run(
            self._pool,
            lambda conn: self.append_in(
                conn, session, messages, expected_last_entry=expected_last_entry, tokens=tokens
            ),
        )

    def append_in(
        self,
        conn: Conn,
        session: str,
        messages: Sequence[Message],
        *,
        expected_last_entry: int | None = None,
        now: float | None = None,
        tokens: TokenCounts | None = None,
    ) -> int:
        """`append` inside a transaction the caller opened on `conn` (of this store's pool)
        and commits; `now` overrides the entries' timestamp."""
        self.check_fence(conn, session)
        conn.execute(
            "INSERT INTO session_heads (session, head) VALUES (%s, 0) ON CONFLICT DO NOTHING",
            (session,),
        )
        row = conn.execute(
            "SELECT head FROM session_heads WHERE session = %s FOR UPDATE", (session,)
        ).fetchone()
        head = int(row[0]) if row else 0
        if expected_last_entry is not None and head != expected_last_entry:
            raise ConcurrentWriteError(session, expected_last_entry, head)
        if not messages:
            return head
        ts = self._now() if now is None else now
        for message in messages:
            inserted = conn.execute(
                "INSERT INTO session_entries (session, parent_id, ts, role, message)"
                " VALUES (%s, %s, %s, %s, %s) RETURNING entry_id",
                (session, head or None, ts, message.role, model_json(message)),
            ).fetchone()
            assert inserted is not None  # RETURNING of a one-row INSERT
            head = int(inserted[0])
        conn.execute("UPDATE session_heads SET head = %s WHERE session = %s", (head, session))
        if tokens is not None:
            _add_token_counts(conn, session, tokens)
        for companion in self.companions:
            companion(conn, session, messages)
        return head

    def create(self, session: str, entries: Sequence[tuple[float, Message]]) -> tuple[int, int]:
        def work(conn: Conn) -> tuple[int, int]:
            head = self.append_in(conn, session, [], expected_last_entry=None)
            if head:
                count = conn.execute(
                    "SELECT COUNT(*) FROM session_entries WHERE session = %s", (session,)
                ).fetchone()
                raise SessionExistsError(session, int(count[0]) if count else 0)
            first = last = 0
            for timestamp, message in entries:
                last = self.append_in(conn, session, [message], now=timestamp)
                first = first or last
            return first, last

        return run(self._pool, work)

    def load(self, session: str) -> list[Message]:
        with self._pool.connection() as conn:
            return _load(conn, session)

    def load_with_head(self, session: str) -> tuple[list[Message], int]:
        with self._pool.connection() as conn, _snapshot(conn):
            return _load(conn, session), _head(conn, session)

    def load_tail(self, session: str) -> tuple[list[Message], int]:
        with self._pool.connection() as conn, _snapshot(conn):
            # The last entry that is not a tool result starts the tail (an index scan backwards
            # that stops there): the cost does not grow with the history.
            start = conn.execute(
                "SELECT entry_id FROM session_entries WHERE session = %s AND role <> 'tool'"
                " ORDER BY entry_id DESC LIMIT 1",
                (session,),
            ).fetchone()
            rows = conn.execute(
                "SELECT entry_id, message FROM session_entries WHERE session = %s"
                " AND entry_id >= %s ORDER BY entry_id",
                (session, int(start[0]) if start else 0),
            ).fetchall()
            head = _head(conn, session)
        return decode_history(session, rows), head

    def entries(self, session: str) -> list[SessionEntry]:
        with reading_history(), self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT entry_id, parent_id, ts, message FROM session_entries"
                " WHERE session = %s ORDER BY entry_id",
                (session,),
            ).fetchall()
            return [
                SessionEntry(
                    entry_id=int(entry_id),
                    session=session,
                    parent_id=None if parent_id is None else int(parent_id),
                    timestamp=float(ts),
                    message=message,
                )
                for (entry_id, parent_id, ts, _), message in zip(
                    rows, decode_history(session, rows), strict=True
                )
            ]

    def token_counts(self, session: str, counted_by: str) -> dict[int, int]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT position, tokens FROM session_entry_tokens"
                " WHERE session = %s AND counted_by = %s",
                (session, counted_by),
            ).fetchall()
        return {int(at): int(count) for at, count in rows}

    def add_token_counts(self, session: str, tokens: TokenCounts) -> None:
        run(self._pool, lambda conn: _add_token_counts(conn, session, tokens))

    def list_sessions(self) -> list[SessionInfo]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT session, COUNT(*), MAX(entry_id), MAX(ts) FROM session_entries"
                " GROUP BY session ORDER BY MAX(entry_id) DESC"
            ).fetchall()
        return [
            SessionInfo(session=s, entries=int(n), last_entry=int(last), updated=float(ts))
            for s, n, last, ts in rows
        ]


class _snapshot:
    """A read-only REPEATABLE READ transaction: several reads of one consistent state."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def __exit__(self, *exc: object) -> None:
        self._conn.execute("COMMIT")


def _load(conn: Conn, session: str) -> list[Message]:
    with reading_history():
        rows = conn.execute(
            "SELECT entry_id, message FROM session_entries WHERE session = %s ORDER BY entry_id",
            (session,),
        ).fetchall()
        return decode_history(session, rows)


def _add_token_counts(conn: Conn, session: str, tokens: TokenCounts) -> None:
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO session_entry_tokens (session, counted_by, position, tokens)"
            " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            [(session, tokens.counted_by, at, count) for at, count in tokens.tokens.items()],
        )


def _head(conn: Conn, session: str) -> int:
    row = conn.execute("SELECT head FROM session_heads WHERE session = %s", (session,)).fetchone()
    return int(row[0]) if row else 0
