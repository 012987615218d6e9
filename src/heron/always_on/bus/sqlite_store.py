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

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from heron._support.limits import model_json
from heron._support.state import open_db, sqlite_errors, transaction
from heron.always_on.bus.model import STORED, BusEvent
from heron.always_on.bus.store import (
    AlreadyConsumedError,
    DeadLetter,
    EventCallback,
    StoredEvent,
    Unwatch,
)
from heron.always_on.bus.stored import decode_stored, event_epoch
from heron.messages import Message
from heron.sessions.sqlite_store import SqliteSessionStore

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
CREATE TABLE IF NOT EXISTS bus_failures (
    seq      INTEGER PRIMARY KEY,
    attempts INTEGER NOT NULL,
    error    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bus_dead (
    seq      INTEGER PRIMARY KEY,
    attempts INTEGER NOT NULL,
    error    TEXT NOT NULL,
    dead_at  REAL NOT NULL
);
"""
# The queue of unconsumed events is its own small table, in timeline order: deleting from it
# is several times cheaper than keeping a partial index on `bus_events` up to date. Failed
# attempts and dead letters are small side tables keyed by `seq`: a quarantined event keeps its
# row in `bus_events` (consumed_at stays NULL) and leaves `bus_pending`.


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
                ts = event_epoch(event.timestamp)
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO bus_events (id, session, idem_key, ts, kind, body)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        event.id,
                        event.session,
                        event.idempotency_key,
                        ts,
                        event.kind,
                        model_json(event),
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
        while True:
            rows = self._conn.execute(
                "SELECT e.seq, e.body FROM bus_pending p JOIN bus_events e ON e.seq = p.seq"
                " WHERE p.session = ? ORDER BY p.ts, p.seq LIMIT ?",
                (session, -1 if limit is None else limit),
            ).fetchall()
            events, unreadable = decode_stored(rows)
            if not unreadable:
                return [e for e in events if e is not None]
            # Stored by another version, or damaged: no attempt can ever read it.
            with transaction(self._conn) as conn:
                for seq, error in unreadable:
                    self._bury(conn, seq, 0, f"the stored event cannot be read: {error}")

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
                    f"SELECT seq, ts FROM bus_events WHERE id IN ({marks}) AND session = ?"
                    " AND consumed_at IS NULL AND seq NOT IN (SELECT seq FROM bus_dead)",
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
            # Failed attempts are rare: look before deleting per event.
            if conn.execute("SELECT 1 FROM bus_failures LIMIT 1").fetchone() is not None:
                conn.executemany("DELETE FROM bus_failures WHERE seq = ?", [(q,) for q, _ in found])
        return head

    async def fail(
        self, session: str, event_ids: Sequence[str], error: str, *, max_attempts: int
    ) -> list[str]:
        wanted = list(dict.fromkeys(event_ids))
        buried: list[str] = []
        with transaction(self._conn) as conn:
            for chunk in _chunks(wanted):
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
                    "SELECT e.seq, e.id, COALESCE(f.attempts, 0) FROM bus_events e"
                    " JOIN bus_pending p ON p.session = e.session AND p.ts = e.ts"
                    " AND p.seq = e.seq LEFT JOIN bus_failures f ON f.seq = e.seq"
                    f" WHERE e.id IN ({marks}) AND e.session = ?",
                    (*chunk, session),
                ).fetchall()
                for seq, event_id, attempts in rows:
                    if attempts + 1 >= max_attempts:
                        self._bury(conn, seq, attempts + 1, error)
                        buried.append(event_id)
                    else:
                        conn.execute(
                            "INSERT INTO bus_failures (seq, attempts, error) VALUES (?, ?, ?)"
                            " ON CONFLICT (seq) DO UPDATE SET attempts = excluded.attempts,"
                            " error = excluded.error",
                            (seq, attempts + 1, error),
                        )
        return [i for i in wanted if i in buried]

    def _bury(self, conn: sqlite3.Connection, seq: int, attempts: int, error: str) -> None:
        """Move one event from the queue to the dead letters (inside the caller's transaction)."""
        conn.execute("DELETE FROM bus_pending WHERE seq = ?", (seq,))
        conn.execute("DELETE FROM bus_failures WHERE seq = ?", (seq,))
        conn.execute(
            "INSERT OR REPLACE INTO bus_dead (seq, attempts, error, dead_at) VALUES (?, ?, ?, ?)",
            (seq, attempts, error, time.time()),
        )

    async def dead_letters(
        self, *, session: str | None = None, after: int | None = None, limit: int | None = None
    ) -> list[DeadLetter]:
        where: list[str] = ["1 = 1"]
        params: list[str | int] = []
        if session is not None:
            where.append("e.session = ?")
            params.append(session)
        if after is not None:
            where.append("d.seq > ?")
            params.append(after)
        # Ordered and bounded by the dead letters' own key, so SQLite walks them (a few) and
        # looks each event up, not every event since `after` (every wake of a session asks).
        rows = self._conn.execute(
            "SELECT e.seq, e.id, e.session, e.kind, e.body, d.attempts, d.error, d.dead_at"
            " FROM bus_dead d JOIN bus_events e ON e.seq = d.seq"
            f" WHERE {' AND '.join(where)} ORDER BY d.seq DESC LIMIT ?",
            [*params, -1 if limit is None else limit],
        ).fetchall()
        letters: list[DeadLetter] = []
        for seq, event_id, sess, kind, body, attempts, error, dead_at in reversed(rows):
            try:
                event: BusEvent | None = BusEvent.model_validate_json(body, context=STORED)
            except ValueError:
                event = None
            letters.append(
                DeadLetter(
                    seq=seq,
                    event_id=event_id,
                    session=sess,
                    kind=kind,
                    attempts=attempts,
                    error=error,
                    dead_at=dead_at,
                    event=event,
                    body=body,
                )
            )
        return letters

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
            where.append("consumed_at IS NULL AND seq NOT IN (SELECT seq FROM bus_dead)")
        if after is not None:
            where.append("seq > ?")
            params.append(after)
        rows = self._conn.execute(
            "SELECT seq, body, consumed_at, seq IN (SELECT seq FROM bus_dead) FROM bus_events"
            f" WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT ?",
            [*params, -1 if limit is None else limit],
        ).fetchall()
        rows.reverse()
        bodies, _ = decode_stored([(seq, body) for seq, body, _, _ in rows])
        # What cannot be read is left out here; `pending` quarantines it (see `dead_letters`).
        return [
            StoredEvent(seq=seq, event=event, consumed=consumed_at is not None, dead=bool(dead))
            for (seq, _, consumed_at, dead), event in zip(rows, bodies, strict=True)
            if event is not None
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
