"""`SqliteJobStore`: job records in heron's SQLite database (table `jobs`)."""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Iterator
from typing import Any

from heron._support.state import sqlite_errors, update_row
from heron._support.vocabulary import advance_status
from heron.always_on.jobs.store import FINAL_STATES, JOB_FIELDS, JobRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id               TEXT PRIMARY KEY,
    session          TEXT NOT NULL,
    call_id          TEXT,
    command          TEXT NOT NULL,
    cwd              TEXT NOT NULL,
    dir              TEXT NOT NULL,
    state            TEXT NOT NULL,
    supervisor_pid   INTEGER,
    supervisor_start INTEGER,
    child_pid        INTEGER,
    child_start      INTEGER,
    boot_id          TEXT NOT NULL DEFAULT '',
    cgroup           TEXT,
    started_at       REAL NOT NULL,
    timeout_s        REAL,
    deadline         REAL,
    ended_at         REAL,
    exit_code        INTEGER,
    signal           INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    timed_out        INTEGER NOT NULL DEFAULT 0,
    reported         INTEGER NOT NULL DEFAULT 0,
    detail           TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_session ON jobs (session, started_at);
"""
_COLUMNS = ", ".join(JOB_FIELDS)
_BOOLS = {"cancel_requested", "timed_out", "reported"}
_FINAL = ", ".join(f"'{state}'" for state in sorted(FINAL_STATES))


def _record(row: tuple[Any, ...]) -> JobRecord:
    values = dict(zip(JOB_FIELDS, row, strict=True))
    for name in _BOOLS:
        values[name] = bool(values[name])
    return JobRecord(**values)


@sqlite_errors
class SqliteJobStore:
    """`JobStore` on a connection from `heron._support.state.open_db` (the caller closes it).
    Not thread-safe: use it from the event loop's thread."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        with conn:
            conn.executescript(_SCHEMA)

    def insert(self, job: JobRecord) -> None:
        marks = ", ".join("?" * len(JOB_FIELDS))
        with self._conn:
            self._conn.execute(
                f"INSERT INTO jobs ({_COLUMNS}) VALUES ({marks})",
                [getattr(job, name) for name in JOB_FIELDS],
            )

    def update(self, job_id: str, **changes: Any) -> JobRecord:
        if "state" in changes:
            current = self.get(job_id)
            if current is None:
                raise KeyError(job_id)
            advance_status(current.state, changes["state"])
        update_row(self._conn, "jobs", job_id, changes, fields=JOB_FIELDS, what="job")
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return job

    def get(self, job_id: str) -> JobRecord | None:
        row = self._conn.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else _record(row)

    def list(self, session: str, *, limit: int = 50) -> builtins.list[JobRecord]:
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM jobs WHERE session = ?"
            " ORDER BY started_at DESC, rowid DESC LIMIT ?",
            (session, limit),
        )
        return [_record(row) for row in rows]

    def open_jobs(self, session: str) -> Iterator[JobRecord]:
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM jobs WHERE session = ?"
            f" AND (state NOT IN ({_FINAL}) OR reported = 0)"
            " ORDER BY started_at, rowid",
            (session,),
        ).fetchall()
        return (_record(row) for row in rows)
