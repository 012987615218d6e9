"""`PostgresLeases`: session leases with fencing epochs in table `session_leases`.

See `heron.sessions.lease` for the model. Taking a session is one conditional upsert (free, or
its lease expired → a new epoch), so two workers racing for it cannot both win. `claim` finds
sessions with pending events and no living owner and locks their lease rows with
`FOR UPDATE SKIP LOCKED`: workers claiming at the same moment split the sessions between them
instead of queueing behind each other's locks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg

from heron._support.postgres import Pool, pg_errors, run
from heron.sessions.lease import Lease

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresLeases:
    """Leases of one worker (`owner`) on a shared PostgreSQL store."""

    def __init__(
        self, pool: Pool, *, owner: str, ttl_s: float, now: Callable[[], float] = time.time
    ) -> None:
        self._pool = pool
        self.owner = owner
        self.ttl_s = ttl_s
        self._now = now

    def acquire(self, session: str) -> Lease | None:
        now = self._now()

        def work(conn: Conn) -> Lease | None:
            before = conn.execute(
                "SELECT owner FROM session_leases WHERE session = %s FOR UPDATE", (session,)
            ).fetchone()
            row = conn.execute(
                "INSERT INTO session_leases AS l (session, owner, epoch, expires_at)"
                " VALUES (%s, %s, 1, %s) ON CONFLICT (session) DO UPDATE"
                " SET owner = excluded.owner, epoch = l.epoch + 1,"
                " expires_at = excluded.expires_at WHERE l.expires_at <= %s"
                " RETURNING epoch, expires_at",
                (session, self.owner, now + self.ttl_s, now),
            ).fetchone()
            if row is None:
                return None
            taken_over = before is not None and before[0] not in ("", self.owner)
            return self._lease(session, row, taken_over=taken_over)

        return run(self._pool, work)

    def claim(self, limit: int) -> list[Lease]:
        now = self._now()

        def work(conn: Conn) -> list[Lease]:
            # Sessions that never had a lease get an expired one to lock, so one locking query
            # covers both kinds.
            conn.execute(
                "INSERT INTO session_leases (session, owner, epoch, expires_at)"
                " SELECT DISTINCT session, '', 0, 0 FROM bus_events"
                " WHERE consumed_at IS NULL AND dead_at IS NULL ON CONFLICT DO NOTHING"
            )
            free = conn.execute(
                "SELECT session, owner FROM session_leases l WHERE expires_at <= %s AND EXISTS"
                " (SELECT 1 FROM bus_events e WHERE e.session = l.session"
                "  AND e.consumed_at IS NULL AND e.dead_at IS NULL)"
                " ORDER BY session LIMIT %s FOR UPDATE SKIP LOCKED",
                (now, limit),
            ).fetchall()
            leases = []
            for session, previous in free:
                row = conn.execute(
                    "UPDATE session_leases SET owner = %s, epoch = epoch + 1, expires_at = %s"
                    " WHERE session = %s RETURNING epoch, expires_at",
                    (self.owner, now + self.ttl_s, session),
                ).fetchone()
                assert row is not None  # the row is locked by this transaction
                leases.append(
                    self._lease(session, row, taken_over=previous not in ("", self.owner))
                )
            return leases

        return run(self._pool, work)

    def renew(self, lease: Lease) -> Lease | None:
        now = self._now()

        def work(conn: Conn) -> Lease | None:
            row = conn.execute(
                "UPDATE session_leases SET expires_at = %s"
                " WHERE session = %s AND owner = %s AND epoch = %s RETURNING epoch, expires_at",
                (now + self.ttl_s, lease.session, self.owner, lease.epoch),
            ).fetchone()
            return None if row is None else self._lease(lease.session, row, taken_over=False)

        return run(self._pool, work)

    def release(self, lease: Lease) -> None:
        run(
            self._pool,
            lambda conn: conn.execute(
                "UPDATE session_leases SET expires_at = 0"
                " WHERE session = %s AND owner = %s AND epoch = %s",
                (lease.session, self.owner, lease.epoch),
            ),
        )

    def current(self, session: str) -> Lease | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT owner, epoch, expires_at FROM session_leases WHERE session = %s",
                (session,),
            ).fetchone()
        if row is None:
            return None
        return Lease(session=session, owner=row[0], epoch=int(row[1]), expires_at=float(row[2]))

    def _lease(self, session: str, row: tuple[Any, ...], *, taken_over: bool) -> Lease:
        return Lease(
            session=session,
            owner=self.owner,
            epoch=int(row[0]),
            expires_at=float(row[1]),
            taken_over=taken_over,
        )
