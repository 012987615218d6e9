"""The triggers' stores in the shared PostgreSQL database: timers (table `timers`), shell
monitors (`job_monitors`) and subscriptions (`subscriptions`), each on a pool (thread-safe).

Timers fire once across workers: only the worker holding a session's lease runs its timers,
and a fire is published with the idempotency key `timer:<id>:<slot>`, so even two workers
firing the same slot during a takeover store one event. A timer's `next_fire` and misfire
counts live here, so the misfire policy holds across a failover: the new owner sees the
slots the old one never fired as missed.
"""

from __future__ import annotations

import builtins
from typing import Any

import psycopg

from heron._support.postgres import Pool, columns, open_pool, pg_errors, run
from heron.always_on.jobs.postgres_store import PostgresJobStore
from heron.always_on.triggers.monitor import MONITOR_FIELDS, MonitorRecord
from heron.always_on.triggers.runtime import TriggerStores
from heron.always_on.triggers.subscriptions import Subscription, SubscriptionFilter
from heron.always_on.triggers.timers import TIMER_FIELDS, TimerRecord
from heron.sessions.postgres_store import PostgresSessionStore

Conn = psycopg.Connection[Any]

_TIMER_COLUMNS = columns(TIMER_FIELDS)
_MONITOR_COLUMNS = columns(MONITOR_FIELDS)


@pg_errors
class PostgresTimerStore:
    """`TimerStore` on PostgreSQL. With `fence` (the worker's session store), a timer's update
    is refused (`StaleEpochError`) once another worker took its session over, so a paused
    worker cannot move a timer back."""

    def __init__(self, pool: Pool, *, fence: PostgresSessionStore | None = None) -> None:
        self._pool = pool
        self._fence = fence

    def insert(self, timer: TimerRecord) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                f"INSERT INTO timers ({_TIMER_COLUMNS}) VALUES "
                f"({', '.join(['%s'] * len(TIMER_FIELDS))})",
                [getattr(timer, name) for name in TIMER_FIELDS],
            )

    def update(self, timer_id: str, **changes: Any) -> TimerRecord:
        unknown = set(changes) - set(TIMER_FIELDS)
        if unknown:
            raise ValueError(f"unknown timer fields: {sorted(unknown)}")

        def work(conn: Conn) -> TimerRecord:
            found = conn.execute(
                "SELECT session FROM timers WHERE id = %s FOR UPDATE", (timer_id,)
            ).fetchone()
            if found is None:
                raise KeyError(timer_id)
            if self._fence is not None:
                self._fence.check_fence(conn, found[0])
            sets = ", ".join(f'"{name}" = %s' for name in changes) or "id = id"
            row = conn.execute(
                f"UPDATE timers SET {sets} WHERE id = %s RETURNING {_TIMER_COLUMNS}",
                [*changes.values(), timer_id],
            ).fetchone()
            assert row is not None  # locked above
            return _timer(row)

        return run(self._pool, work)

    def get(self, session: str, timer_id: str) -> TimerRecord | None:
        rows = self._select("id = %s AND session = %s", (timer_id, session))
        return rows[0] if rows else None

    def timers(self, session: str, *, active_only: bool = True) -> list[TimerRecord]:
        where = "session = %s" + (" AND state = 'active'" if active_only else "")
        return self._select(where, (session,))

    def count_active(self, session: str) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT COUNT(*) FROM timers WHERE session = %s AND state = 'active'", (session,)
            ).fetchone()
        return int(row[0]) if row else 0

    def due(self, session: str, now: float) -> list[TimerRecord]:
        return self._select("session = %s AND state = 'active' AND next_fire <= %s", (session, now))

    def next_fire(self, session: str) -> float | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT MIN(next_fire) FROM timers WHERE session = %s AND state = 'active'",
                (session,),
            ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def unowned_due(self, now: float, *, limit: int = 100) -> builtins.list[str]:
        """Sessions with a timer due by `now` that no worker holds (no lease, or an expired or
        released one): the timers of a worker that died, which no other worker's alarm knows
        (`SessionHost`'s poller takes those sessions up)."""
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT t.session FROM timers t"
                " LEFT JOIN session_leases l ON l.session = t.session"
                " WHERE t.state = 'active' AND t.next_fire <= %s"
                " AND (l.session IS NULL OR l.expires_at <= %s) LIMIT %s",
                (now, now, limit),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def _select(self, where: str, params: tuple[Any, ...]) -> list[TimerRecord]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_TIMER_COLUMNS} FROM timers WHERE {where}"
                " ORDER BY next_fire IS NULL, next_fire, created_at, id",
                params,
            ).fetchall()
        return [_timer(row) for row in rows]


def _timer(row: tuple[Any, ...]) -> TimerRecord:
    return TimerRecord(**dict(zip(TIMER_FIELDS, row, strict=True)))


@pg_errors
class PostgresMonitorStore:
    """`MonitorStore` on PostgreSQL."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def insert(self, monitor: MonitorRecord) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                f"INSERT INTO job_monitors ({_MONITOR_COLUMNS}) VALUES "
                f"({', '.join(['%s'] * len(MONITOR_FIELDS))})",
                [getattr(monitor, name) for name in MONITOR_FIELDS],
            )

    def update(self, monitor_id: str, *, offset: int, done: bool = False) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                'UPDATE job_monitors SET "offset" = %s,'
                " state = CASE WHEN %s THEN 'done' ELSE state END WHERE id = %s",
                (offset, done, monitor_id),
            )

    def monitors(self, session: str, *, active_only: bool = True) -> list[MonitorRecord]:
        where = "session = %s" + (" AND state = 'active'" if active_only else "")
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_MONITOR_COLUMNS} FROM job_monitors WHERE {where}"
                " ORDER BY created_at, seq",
                (session,),
            ).fetchall()
        return [MonitorRecord(**dict(zip(MONITOR_FIELDS, row, strict=True))) for row in rows]


@pg_errors
class PostgresSubscriptionStore:
    """`SubscriptionStore` on PostgreSQL; the filter is stored as JSON text."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def insert(self, subscription: Subscription) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                "INSERT INTO subscriptions (id, session, source, filter, note, created_at)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                subscription.row(),
            )

    def remove(self, session: str, subscription_id: str) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "DELETE FROM subscriptions WHERE id = %s AND session = %s",
                (subscription_id, session),
            )
        return cursor.rowcount == 1

    def list(self, session: str) -> builtins.list[Subscription]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT id, source, filter, note, created_at FROM subscriptions"
                " WHERE session = %s ORDER BY created_at, seq",
                (session,),
            ).fetchall()
        return [
            Subscription(
                id=row[0],
                session=session,
                source=row[1],
                filter=SubscriptionFilter.model_validate_json(row[2]),
                note=row[3],
                created_at=row[4],
            )
            for row in rows
        ]


def open_pg_trigger_stores(url: str, *, fence: PostgresSessionStore | None = None) -> TriggerStores:
    """The PostgreSQL stores of the triggers (and jobs) on one pool; `TriggerStores.close`
    closes it. `fence`: see `PostgresTimerStore`."""
    pool = open_pool(url)
    return TriggerStores(
        jobs=PostgresJobStore(pool),
        timers=PostgresTimerStore(pool, fence=fence),
        monitors=PostgresMonitorStore(pool),
        subscriptions=PostgresSubscriptionStore(pool),
        close=pool.close,
    )
