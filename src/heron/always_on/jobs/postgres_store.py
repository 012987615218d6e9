"""`PostgresJobStore`: job records in the shared PostgreSQL database (table `jobs`).

A job is a process on one host: the record names that host's boot (`boot_id`), and only the
worker on that host can watch or re-attach to it. The rule for a host that dies is in
docs/deployment.md: its jobs are reported `lost`.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Any

from heron._support.postgres import Pool, columns, pg_errors, update_row
from heron._support.vocabulary import advance_status
from heron.always_on.jobs.store import FINAL_STATES, JOB_FIELDS, JobRecord

_COLUMNS = columns(JOB_FIELDS)
_FINAL = sorted(FINAL_STATES)


@pg_errors
class PostgresJobStore:
    """`JobStore` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def insert(self, job: JobRecord) -> None:
        marks = ", ".join(["%s"] * len(JOB_FIELDS))
        with self._pool.connection() as conn:
            conn.execute(
                f"INSERT INTO jobs ({_COLUMNS}) VALUES ({marks})",
                [getattr(job, name) for name in JOB_FIELDS],
            )

    def update(self, job_id: str, **changes: Any) -> JobRecord:
        if "state" in changes:
            current = self.get(job_id)
            if current is None:
                raise KeyError(job_id)
            advance_status(current.state, changes["state"])
        if not update_row(self._pool, "jobs", job_id, changes, fields=JOB_FIELDS, what="job"):
            raise KeyError(job_id)
        job = self.get(job_id)
        if job is None:
            raise KeyError(job_id)
        return job

    def get(self, job_id: str) -> JobRecord | None:
        with self._pool.connection() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = %s", (job_id,)).fetchone()
        return None if row is None else _record(row)

    def list(self, session: str, *, limit: int = 50) -> builtins.list[JobRecord]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM jobs WHERE session = %s"
                " ORDER BY started_at DESC, seq DESC LIMIT %s",
                (session, limit),
            ).fetchall()
        return [_record(row) for row in rows]

    def open_jobs(self, session: str) -> Iterator[JobRecord]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM jobs WHERE session = %s"
                " AND (state <> ALL(%s) OR NOT reported) ORDER BY started_at, seq",
                (session, _FINAL),
            ).fetchall()
        return (_record(row) for row in rows)


def _record(row: tuple[Any, ...]) -> JobRecord:
    return JobRecord(**dict(zip(JOB_FIELDS, row, strict=True)))
