"""`SqliteBusStore`: the embedded event bus, in the same SQLite database as the sessions.

`consume` is one SQLite transaction on the connection it shares with its
`SqliteSessionStore`: the history append (`SqliteSessionStore.append_in`) and the consumption
marks commit together or not at all.

Durability level (the default, `synchronous=NORMAL` in WAL mode, set by
`heron._support.state.open_db`):
a `publish` that returned survives a crash or `kill -9` of the process — the commit is in the
write-ahead log before `publish` returns. A power loss or OS crash may drop the last few
commits but never corrupts the database. `SqliteBusStore.open(..., synchronous="FULL")` also
survives power loss, at the price of an fsync per commit.

Throughput comes from group commit, not from weaker guarantees: `publish_many` writes a burst
in one transaction and acknowledges every event in it at once; `consume` marks a whole batch
consumed in the same transaction that appends its history messages.

One store object per thread (SQLite connections are not shared across threads). `watch`
callbacks fire for publishes through this object; events written by other processes or
connections are found by `pending` (the event loop polls for them).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import TypeAdapter

from heron._support.state import open_db, sqlite_errors, transaction
from heron.always_on.bus.model import BusEvent
from heron.always_on.bus.store import AlreadyConsumedError, EventCallback, StoredEvent, Unwatch
from heron.messages import Message
from heron.sessions.sqlite_store import SqliteSessionStore

_EVENTS: TypeAdapter[list[BusEvent]] = TypeAdapter(list[BusEvent])
_ID_CHUNK = 500  # stays far below SQLite's limit on bound parameters per statement

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bus_events (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    session     TEXT NOT NULL,
    idem_key    TEXT,
    ts          REAL NOT NULL,
    kind        TEXT NOT NULL,
    body        TEXT NOT NULL,
    consumed_at REAL,
    entry_id    INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS bus_events_idem
    ON bus_events (session, idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS bus_events_by_key ON bus_events (idem_key) WHERE idem_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS bus_pending (
    session TEXT NOT NULL,
    ts      REAL NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (session, ts, seq)
) WITHOUT ROWID;
"""
# The queue of unconsumed events is its own small table, in timeline order: deleting from it
# is several times cheaper than keeping a partial index on `bus_events` up to date.


@sqlite_errors
class SqliteBusStore:
    """`BusStore` on SQLite. Shares the connection (and transactions) of its session store."""

    def __init__(self, sessions: SqliteSessionStore) -> None:
        self._sessions = sessions
        self._conn = sessions.conn
        self._conn.executescript(_SCHEMA)
        self._watchers: list[EventCallback] = []

    @classmethod
    def open(
        cls, state_dir: Path, *, synchronous: Literal["NORMAL", "FULL"] = "NORMAL"
    ) -> SqliteBusStore:
        """A bus (and its session store) on `<state_dir>/heron.db`; close with `close()`."""
        conn = open_db(state_dir)
        conn.execute(f"PRAGMA synchronous={synchronous}")
        return cls(SqliteSessionStore(conn))

    @property
    def sessions(self) -> SqliteSessionStore:
        """The session store whose histories `consume` appends to."""
        return self._sessions

    def close(self) -> None:
        self._conn.close()

    # -- BusStore ---------------------------------------------------------------------------

    async def publish(self, event: BusEvent) -> bool:
        return (await self.publish_many((event,)))[0]

    async def publish_many(self, events: Sequence[BusEvent]) -> list[bool]:
        stored: list[bool] = []
        with transaction(self._conn) as conn:
            for event in events:
                ts = _epoch(event.timestamp)
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO bus_events (id, session, idem_key, ts, kind, body)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        event.id,
                        event.session,
                        event.idempotency_key,
                        ts,
                        event.kind,
                        event.model_dump_json(),
                    ),
                )
                new = cursor.rowcount == 1
                if new:
                    conn.execute(
                        "INSERT INTO bus_pending (session, ts, seq) VALUES (?, ?, ?)",
                        (event.session, ts, cursor.lastrowid),
                    )
                stored.append(new)
        for event, new in zip(events, stored, strict=True):
            if new:
                for callback in tuple(self._watchers):
                    callback(event)
        return stored

    async def pending(self, session: str, *, limit: int | None = None) -> list[BusEvent]:
        rows = self._conn.execute(
            "SELECT e.body FROM bus_pending p JOIN bus_events e ON e.seq = p.seq"
            " WHERE p.session = ? ORDER BY p.ts, p.seq LIMIT ?",
            (session, -1 if limit is None else limit),
        ).fetchall()
        return _EVENTS.validate_json("[" + ",".join(r[0] for r in rows) + "]")

    async def consume(
        self,
        session: str,
        event_ids: Sequence[str],
        messages: Sequence[Message],
        *,
        expected_last_entry: int | None = None,
    ) -> int:
        wanted = list(dict.fromkeys(event_ids))
        with transaction(self._conn) as conn:
            found: list[tuple[int, float]] = []
            for chunk in _chunks(wanted):
                marks = ",".join("?" * len(chunk))
                found += conn.execute(
                    f"SELECT seq, ts FROM bus_events WHERE id IN ({marks})"
                    " AND session = ? AND consumed_at IS NULL",
                    (*chunk, session),
                ).fetchall()
            if len(found) != len(wanted):
                raise AlreadyConsumedError(session, self._not_pending(session, wanted))
            head = self._sessions.append_in(
                conn, session, messages, expected_last_entry=expected_last_entry
            )
            now = time.time()
            conn.executemany(
                "UPDATE bus_events SET consumed_at = ?, entry_id = ? WHERE seq = ?",
                [(now, head or None, seq) for seq, _ in found],
            )
            conn.executemany(
                "DELETE FROM bus_pending WHERE session = ? AND ts = ? AND seq = ?",
                [(session, ts, seq) for seq, ts in found],
            )
        return head

    def watch(self, callback: EventCallback) -> Unwatch:
        self._watchers.append(callback)

        def unwatch() -> None:
            if callback in self._watchers:
                self._watchers.remove(callback)

        return unwatch

    async def pending_sessions(self) -> list[str]:
        # A skip scan over the queue's primary key: one index seek per session with pending
        # events, however many events wait in each.
        rows = self._conn.execute(
            "WITH RECURSIVE s(name) AS ("
            " SELECT MIN(session) FROM bus_pending"
            " UNION ALL"
            " SELECT (SELECT MIN(session) FROM bus_pending WHERE session > s.name) FROM s"
            " WHERE s.name IS NOT NULL)"
            " SELECT name FROM s WHERE name IS NOT NULL"
        ).fetchall()
        return [r[0] for r in rows]

    async def key_session(self, idempotency_key: str) -> str | None:
        row = self._conn.execute(
            "SELECT session FROM bus_events WHERE idem_key = ? ORDER BY seq LIMIT 1",
            (idempotency_key,),
        ).fetchone()
        return None if row is None else str(row[0])

    # -- inspection -------------------------------------------------------------------------

    async def consumed_into(self, event_id: str) -> int | None:
        row = self._conn.execute(
            "SELECT entry_id FROM bus_events WHERE id = ? AND consumed_at IS NOT NULL",
            (event_id,),
        ).fetchone()
        return None if row is None else int(row[0] or 0)

    async def events(
        self,
        *,
        session: str | None = None,
        pending_only: bool = False,
        after: int | None = None,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        where: list[str] = ["1 = 1"]
        params: list[str | int] = []
        if session is not None:
            where.append("session = ?")
            params.append(session)
        if pending_only:
            where.append("consumed_at IS NULL")
        if after is not None:
            where.append("seq > ?")
            params.append(after)
        rows = self._conn.execute(
            f"SELECT seq, body, consumed_at FROM bus_events WHERE {' AND '.join(where)}"
            " ORDER BY seq DESC LIMIT ?",
            [*params, -1 if limit is None else limit],
        ).fetchall()
        bodies = _EVENTS.validate_json("[" + ",".join(r[1] for r in reversed(rows)) + "]")
        return [
            StoredEvent(seq=seq, event=event, consumed=consumed_at is not None)
            for (seq, _, consumed_at), event in zip(reversed(rows), bodies, strict=True)
        ]

    def _not_pending(self, session: str, ids: list[str]) -> list[str]:
        """The ids among `ids` that are not pending in `session`."""
        pending: set[str] = set()
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            rows = self._conn.execute(
                f"SELECT id, session, consumed_at FROM bus_events WHERE id IN ({marks})", chunk
            ).fetchall()
            pending.update(i for i, s, consumed in rows if s == session and consumed is None)
        return [i for i in ids if i not in pending]


def _chunks(ids: list[str]) -> list[list[str]]:
    return [ids[i : i + _ID_CHUNK] for i in range(0, len(ids), _ID_CHUNK)]


def _epoch(timestamp: str) -> float:
    """Sort key of an ISO 8601 timestamp; a naive one is read as UTC, a broken one as now."""
    try:
        parsed = datetime.fromisoformat(timestamp)
    except ValueError:
        return time.time()
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()
