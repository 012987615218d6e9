"""The triggers' stores in heron's SQLite database: timers (table `timers`), shell monitors
(`job_monitors`) and, from `heron.always_on.triggers.sqlite_subscriptions`, subscriptions
(`subscriptions`).

Each takes a connection from `heron._support.state.open_db` (the caller closes it);
`open_trigger_stores` gives all three, and the job store, one connection. Not thread-safe: use
them from the event loop's thread.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from heron._support.state import open_db, sqlite_errors, update_row
from heron.always_on.jobs.sqlite_store import SqliteJobStore
from heron.always_on.triggers.monitor import MONITOR_FIELDS, MonitorRecord
from heron.always_on.triggers.runtime import TriggerStores
from heron.always_on.triggers.sqlite_subscriptions import SqliteSubscriptionStore
from heron.always_on.triggers.timers import TIMER_FIELDS, TimerRecord

_TIMERS = """
CREATE TABLE IF NOT EXISTS timers (
    id         TEXT PRIMARY KEY,
    session    TEXT NOT NULL,
    call_id    TEXT,
    message    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    every_s    REAL,
    cron       TEXT,
    tz         TEXT NOT NULL,
    misfire    TEXT NOT NULL,
    next_fire  REAL,
    fires      INTEGER NOT NULL,
    missed     INTEGER NOT NULL,
    state      TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_fired REAL
);
CREATE INDEX IF NOT EXISTS timers_due ON timers (session, state, next_fire);
"""
_TIMER_COLUMNS = ", ".join(TIMER_FIELDS)

_MONITORS = """
CREATE TABLE IF NOT EXISTS job_monitors (
    id                 TEXT PRIMARY KEY,
    job_id             TEXT NOT NULL,
    session            TEXT NOT NULL,
    call_id            TEXT,
    pattern            TEXT,
    coalesce_s         REAL NOT NULL,
    max_events_per_min INTEGER NOT NULL,
    offset             INTEGER NOT NULL,
    state              TEXT NOT NULL,
    created_at         REAL NOT NULL
)
"""
# Each session reads its own at every wake: by session, not a scan of every session's.
_MONITORS_INDEX = "CREATE INDEX IF NOT EXISTS job_monitors_by_session ON job_monitors (session)"
_MONITOR_COLUMNS = ", ".join(MONITOR_FIELDS)


@sqlite_errors
class SqliteTimerStore:
    """`TimerStore` on SQLite."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        with conn:
            conn.executescript(_TIMERS)

    def insert(self, timer: TimerRecord) -> None:
        with self._conn:
            self._conn.execute(
                f"INSERT INTO timers ({_TIMER_COLUMNS}) VALUES "
                f"({', '.join('?' * len(TIMER_FIELDS))})",
                [getattr(timer, name) for name in TIMER_FIELDS],
            )

    def update(self, timer_id: str, **changes: Any) -> TimerRecord:
        update_row(self._conn, "timers", timer_id, changes, fields=TIMER_FIELDS, what="timer")
        row = self._conn.execute(
            f"SELECT {_TIMER_COLUMNS} FROM timers WHERE id = ?", (timer_id,)
        ).fetchone()
        if row is None:
            raise KeyError(timer_id)
        return _timer(row)

    def get(self, session: str, timer_id: str) -> TimerRecord | None:
        row = self._conn.execute(
            f"SELECT {_TIMER_COLUMNS} FROM timers WHERE id = ? AND session = ?",
            (timer_id, session),
        ).fetchone()
        return None if row is None else _timer(row)

    def timers(self, session: str, *, active_only: bool = True) -> list[TimerRecord]:
        query = f"SELECT {_TIMER_COLUMNS} FROM timers WHERE session = ?"
        if active_only:
            query += " AND state = 'active'"
        rows = self._conn.execute(query + " ORDER BY next_fire IS NULL, next_fire", (session,))
        return [_timer(row) for row in rows]

    def count_active(self, session: str) -> int:
        row = self._conn.execute(
            "SELECT COUNT(*) FROM timers WHERE session = ? AND state = 'active'", (session,)
        ).fetchone()
        return int(row[0])

    def due(self, session: str, now: float) -> list[TimerRecord]:
        rows = self._conn.execute(
            f"SELECT {_TIMER_COLUMNS} FROM timers WHERE session = ? AND state = 'active'"
            " AND next_fire <= ? ORDER BY next_fire",
            (session, now),
        ).fetchall()
        return [_timer(row) for row in rows]

    def next_fire(self, session: str) -> float | None:
        row = self._conn.execute(
            "SELECT MIN(next_fire) FROM timers WHERE session = ? AND state = 'active'",
            (session,),
        ).fetchone()
        return None if row[0] is None else float(row[0])


def _timer(row: tuple[Any, ...]) -> TimerRecord:
    return TimerRecord(**dict(zip(TIMER_FIELDS, row, strict=True)))


@sqlite_errors
class SqliteMonitorStore:
    """`MonitorStore` on SQLite."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        with conn:
            conn.execute(_MONITORS)
            conn.execute(_MONITORS_INDEX)

    def insert(self, monitor: MonitorRecord) -> None:
        with self._conn:
            self._conn.execute(
                f"INSERT INTO job_monitors ({_MONITOR_COLUMNS}) VALUES "
                f"({', '.join('?' * len(MONITOR_FIELDS))})",
                [getattr(monitor, name) for name in MONITOR_FIELDS],
            )

    def update(self, monitor_id: str, *, offset: int, done: bool = False) -> None:
        with self._conn:
            if done:
                self._conn.execute(
                    "UPDATE job_monitors SET offset = ?, state = 'done' WHERE id = ?",
                    (offset, monitor_id),
                )
            else:
                self._conn.execute(
                    "UPDATE job_monitors SET offset = ? WHERE id = ?", (offset, monitor_id)
                )

    def monitors(self, session: str, *, active_only: bool = True) -> list[MonitorRecord]:
        query = f"SELECT {_MONITOR_COLUMNS} FROM job_monitors WHERE session = ?"
        if active_only:
            query += " AND state = 'active'"
        rows = self._conn.execute(query + " ORDER BY created_at, rowid", (session,))
        return [MonitorRecord(**dict(zip(MONITOR_FIELDS, row, strict=True))) for row in rows]


def open_trigger_stores(state_dir: Path) -> TriggerStores:
    """The SQLite stores of the triggers (and jobs) on one connection to
    `<state_dir>/heron.db`; `TriggerStores.close` closes it."""
    conn = open_db(state_dir)
    try:
        return TriggerStores(
            jobs=SqliteJobStore(conn),
            timers=SqliteTimerStore(conn),
            monitors=SqliteMonitorStore(conn),
            subscriptions=SqliteSubscriptionStore(conn),
            close=conn.close,
        )
    except BaseException:
        conn.close()
        raise
