"""`PostgresBusStore`: the event bus on a shared PostgreSQL database, with its sessions.

`consume` is one transaction on the pool it shares with its `PostgresSessionStore`: the
history append (`PostgresSessionStore.append_in`, with its head lock and fencing check) and the
consumption marks commit together or not at all, across machines. The pending events are
locked (`FOR UPDATE`) first, so two workers consuming the same event cannot both succeed: the
second finds it consumed and raises `AlreadyConsumedError`.

Wake-ups: every publish notifies channel `heron_bus` in its transaction (delivered on commit).
A store with watchers listens on that channel with a connection of its own (a thread), so an
event published by another worker reaches this one's watchers within milliseconds; when the
listening connection is lost (the server restarted), it reconnects, and the host's poller
(`pending_sessions`) covers the gap. Its own publishes it announces directly.

The storage methods run their short transactions on a worker thread (`asyncio.to_thread`), so
a networked round trip never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from heron._support.limits import model_json
from heron._support.postgres import open_pool, pg_errors, run
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
from heron.sessions.postgres_store import PostgresSessionStore

_T = TypeVar("_T")
CHANNEL = "heron_bus"
_RECONNECT_S = 1.0
_STOP_CHECK_S = 0.05
"""How often the listener looks whether its store is closing (no round trip: a socket wait)."""

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresBusStore:
    """`BusStore` on PostgreSQL. Shares the pool (and transactions) of its session store."""

    def __init__(self, sessions: PostgresSessionStore) -> None:
        self._sessions = sessions
        self._pool = sessions.pool
        self._watchers: list[EventCallback] = []
        self._token = uuid.uuid4().hex[:12]
        self._listener: _Listener | None = None

    @classmethod
    def open(cls, url: str) -> PostgresBusStore:
        """A bus (and its session store) on a pool of its own; close with `close()`."""
        return cls(PostgresSessionStore(open_pool(url)))

    @property
    def sessions(self) -> PostgresSessionStore:
        """The session store whose histories `consume` appends to."""
        return self._sessions

    def close(self) -> None:
        if self._listener is not None:
            self._listener.stop()
            self._listener = None
        self._sessions.close()

    async def _run(self, work: Callable[[Conn], _T]) -> _T:
        return await asyncio.to_thread(run, self._pool, work)

    async def _read(self, work: Callable[[Conn], _T]) -> _T:
        def read() -> _T:
            with self._pool.connection() as conn:
                return work(conn)

        return await asyncio.to_thread(read)

    # -- BusStore ---------------------------------------------------------------------------

    async def publish(self, event: BusEvent) -> bool:
        return (await self.publish_many((event,)))[0]

    async def publish_many(self, events: Sequence[BusEvent]) -> list[bool]:
        def work(conn: Conn) -> list[bool]:
            rows = [
                (
                    e.id,
                    e.session,
                    e.idempotency_key,
                    event_epoch(e.timestamp),
                    e.kind,
                    model_json(e),
                )
                for e in events
            ]
            seqs: list[int] = []
            stored: list[bool] = []
            with conn.cursor() as cursor:
                # One round trip for the burst (pipelined), a result set per event.
                cursor.executemany(
                    "INSERT INTO bus_events (id, session, idem_key, ts, kind, body)"
                    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING seq",
                    rows,
                    returning=True,
                )
                while True:
                    row = cursor.fetchone()
                    stored.append(row is not None)
                    if row is not None:
                        seqs.append(int(row[0]))
                    if not cursor.nextset():
                        break
            if seqs:
                conn.execute(
                    "SELECT pg_notify(%s, %s || ' ' || seq) FROM unnest(%s::bigint[]) AS seq",
                    (CHANNEL, self._token, seqs),
                )
            return stored

        stored = await self._run(work)
        for event, new in zip(events, stored, strict=True):
            if new:
                for callback in tuple(self._watchers):
                    callback(event)
        return stored

    async def pending(self, session: str, *, limit: int | None = None) -> list[BusEvent]:
        def work(conn: Conn) -> list[BusEvent]:
            while True:
                rows = conn.execute(
                    "SELECT seq, body FROM bus_events WHERE session = %s"
                    " AND consumed_at IS NULL AND dead_at IS NULL ORDER BY ts, seq LIMIT %s",
                    (session, limit),
                ).fetchall()
                events, unreadable = decode_stored([(int(s), b) for s, b in rows])
                if not unreadable:
                    return [e for e in events if e is not None]
                # Stored by another version, or damaged: no attempt can ever read it.
                with conn.transaction():
                    for seq, error in unreadable:
                        _bury(conn, seq, 0, f"the stored event cannot be read: {error}")

        return await self._read(work)

    async def consume(
        self,
        session: str,
        event_ids: Sequence[str],
        messages: Sequence[Message],
        *,
        expected_last_entry: int | None = None,
    ) -> int:
        wanted = list(dict.fromkeys(event_ids))

        def work(conn: Conn) -> int:
            found = conn.execute(
                "SELECT seq FROM bus_events WHERE id = ANY(%s) AND session = %s"
                " AND consumed_at IS NULL AND dead_at IS NULL ORDER BY seq FOR UPDATE",
                (wanted, session),
            ).fetchall()
            if len(found) != len(wanted):
                raise AlreadyConsumedError(session, _not_pending(conn, session, wanted))
            head = self._sessions.append_in(
                conn, session, messages, expected_last_entry=expected_last_entry
            )
            conn.execute(
                "UPDATE bus_events SET consumed_at = %s, entry_id = %s, attempts = 0,"
                " error = NULL WHERE seq = ANY(%s)",
                (time.time(), head or None, [int(r[0]) for r in found]),
            )
            return head

        return await self._run(work)

    async def fail(
        self, session: str, event_ids: Sequence[str], error: str, *, max_attempts: int
    ) -> list[str]:
        wanted = list(dict.fromkeys(event_ids))

        def work(conn: Conn) -> list[str]:
            # A worker whose lease was taken over counts no failures against the new owner's.
            self._sessions.check_fence(conn, session)
            rows = conn.execute(
                "SELECT seq, id, attempts FROM bus_events WHERE id = ANY(%s) AND session = %s"
                " AND consumed_at IS NULL AND dead_at IS NULL FOR UPDATE",
                (wanted, session),
            ).fetchall()
            buried: set[str] = set()
            for seq, event_id, attempts in rows:
                if attempts + 1 >= max_attempts:
                    _bury(conn, int(seq), attempts + 1, error)
                    buried.add(event_id)
                else:
                    conn.execute(
                        "UPDATE bus_events SET attempts = %s, error = %s WHERE seq = %s",
                        (attempts + 1, error, seq),
                    )
            return [i for i in wanted if i in buried]

        return await self._run(work)

    async def dead_letters(
        self, *, session: str | None = None, after: int | None = None, limit: int | None = None
    ) -> list[DeadLetter]:
        def work(conn: Conn) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT seq, id, session, kind, body, attempts, error, dead_at FROM bus_events"
                " WHERE dead_at IS NOT NULL AND (%(s)s::text IS NULL OR session = %(s)s)"
                " AND (%(a)s::bigint IS NULL OR seq > %(a)s) ORDER BY seq DESC LIMIT %(n)s",
                {"s": session, "a": after, "n": limit},
            ).fetchall()

        letters: list[DeadLetter] = []
        for seq, event_id, sess, kind, body, attempts, error, dead_at in reversed(
            await self._read(work)
        ):
            try:
                event: BusEvent | None = BusEvent.model_validate_json(body, context=STORED)
            except ValueError:
                event = None
            letters.append(
                DeadLetter(
                    seq=int(seq),
                    event_id=event_id,
                    session=sess,
                    kind=kind,
                    attempts=int(attempts),
                    error=error or "",
                    dead_at=float(dead_at),
                    event=event,
                    body=body,
                )
            )
        return letters

    def watch(self, callback: EventCallback) -> Unwatch:
        self._watchers.append(callback)
        if self._listener is None:
            self._listener = _Listener(self, asyncio.get_running_loop())

        def unwatch() -> None:
            if callback in self._watchers:
                self._watchers.remove(callback)

        return unwatch

    def _read_event(self, seq: int) -> BusEvent | None:
        """Event `seq` as stored (`None` when it cannot be read); on the listener's thread."""
        with self._pool.connection() as conn:
            row = conn.execute("SELECT body FROM bus_events WHERE seq = %s", (seq,)).fetchone()
        return None if row is None else decode_stored([(seq, row[0])])[0][0]

    def _announce(self, event: BusEvent) -> None:
        """Another store published `event`: tell the watchers (on the event loop)."""
        for callback in tuple(self._watchers):
            callback(event)

    async def pending_sessions(self) -> list[str]:
        def work(conn: Conn) -> list[str]:
            # A skip scan over the queue's index: one seek per session with pending events.
            rows = conn.execute(
                "WITH RECURSIVE s(name) AS ("
                " SELECT MIN(session) FROM bus_events"
                "  WHERE consumed_at IS NULL AND dead_at IS NULL"
                " UNION ALL"
                " SELECT (SELECT MIN(session) FROM bus_events WHERE session > s.name"
                "  AND consumed_at IS NULL AND dead_at IS NULL) FROM s WHERE s.name IS NOT NULL)"
                " SELECT name FROM s WHERE name IS NOT NULL"
            ).fetchall()
            return [r[0] for r in rows]

        return await self._read(work)

    async def key_session(self, idempotency_key: str) -> str | None:
        def work(conn: Conn) -> str | None:
            row = conn.execute(
                "SELECT session FROM bus_events WHERE idem_key = %s ORDER BY seq LIMIT 1",
                (idempotency_key,),
            ).fetchone()
            return None if row is None else str(row[0])

        return await self._read(work)

    # -- inspection -------------------------------------------------------------------------

    async def consumed_into(self, event_id: str) -> int | None:
        def work(conn: Conn) -> int | None:
            row = conn.execute(
                "SELECT entry_id FROM bus_events WHERE id = %s AND consumed_at IS NOT NULL",
                (event_id,),
            ).fetchone()
            return None if row is None else int(row[0] or 0)

        return await self._read(work)

    async def events(
        self,
        *,
        session: str | None = None,
        pending_only: bool = False,
        after: int | None = None,
        limit: int | None = None,
    ) -> list[StoredEvent]:
        def work(conn: Conn) -> list[tuple[Any, ...]]:
            return conn.execute(
                "SELECT seq, body, consumed_at, dead_at FROM bus_events"
                " WHERE (%(s)s::text IS NULL OR session = %(s)s)"
                " AND (NOT %(p)s OR (consumed_at IS NULL AND dead_at IS NULL))"
                " AND (%(a)s::bigint IS NULL OR seq > %(a)s) ORDER BY seq DESC LIMIT %(n)s",
                {"s": session, "p": pending_only, "a": after, "n": limit},
            ).fetchall()

        rows = list(reversed(await self._read(work)))
        bodies, _ = decode_stored([(int(seq), body) for seq, body, _, _ in rows])
        # What cannot be read is left out here; `pending` quarantines it (see `dead_letters`).
        return [
            StoredEvent(
                seq=int(seq), event=event, consumed=consumed is not None, dead=dead is not None
            )
            for (seq, _, consumed, dead), event in zip(rows, bodies, strict=True)
            if event is not None
        ]


class _Listener:
    """`LISTEN heron_bus` on a connection of its own, in a daemon thread (see the module
    docstring); reconnects after a lost connection."""

    def __init__(self, store: PostgresBusStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop
        self._stopped = threading.Event()
        conninfo = store._pool.conninfo
        assert isinstance(conninfo, str)  # heron opens its pools from a URL
        self._conninfo = conninfo
        self._thread = threading.Thread(target=self._listen, name="heron-bus-listen", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        try:  # wake the listening connection now instead of at its next timeout
            with self._store._pool.connection() as conn:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{self._store._token} stop"))
        except (psycopg.Error, PoolTimeout):
            pass  # the server is gone: the thread sees `_stopped` within its timeout
        self._thread.join(timeout=5)

    def _listen(self) -> None:
        while not self._stopped.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    while not self._stopped.is_set():
                        for note in conn.notifies(timeout=_STOP_CHECK_S):
                            self._received(note.payload)
            except psycopg.Error:
                # The server went away: the poller covers the gap until it is back.
                self._stopped.wait(_RECONNECT_S)

    def _received(self, payload: str) -> None:
        token, _, seq = payload.partition(" ")
        if token == self._store._token or not seq.isdigit():
            return  # its own publish (already announced) or not heron's
        try:
            event = self._store._read_event(int(seq))
        except (psycopg.Error, PoolTimeout):
            return  # the poller finds it
        if event is not None and not self._stopped.is_set():
            self._loop.call_soon_threadsafe(self._store._announce, event)


def _bury(conn: Conn, seq: int, attempts: int, error: str) -> None:
    """Quarantine one event (inside the caller's transaction)."""
    conn.execute(
        "UPDATE bus_events SET attempts = %s, error = %s, dead_at = %s WHERE seq = %s",
        (attempts, error, time.time(), seq),
    )


def _not_pending(conn: Conn, session: str, ids: list[str]) -> list[str]:
    rows = conn.execute(
        "SELECT id FROM bus_events WHERE id = ANY(%s) AND session = %s"
        " AND consumed_at IS NULL AND dead_at IS NULL",
        (ids, session),
    ).fetchall()
    pending = {r[0] for r in rows}
    return [i for i in ids if i not in pending]
