"""`PostgresSubagentStore`: sub-agent records in the shared PostgreSQL database (table
`subagents`), in the SQLite store's row encoding (`heron.always_on.subagents.sqlite_store`:
usage and budget as JSON text, integer flags).

Every change of a record is one conditional `UPDATE` (the row lock orders two workers), so
`finish` and `claim_delivery` stay compare-and-sets across workers.
"""

from __future__ import annotations

import builtins
import json
from typing import Any

import psycopg

from heron._support.postgres import Pool, pg_errors, run
from heron._support.vocabulary import TERMINAL_STATUSES, Outcome, Status, advance_status
from heron.always_on.subagents.sqlite_store import _COLUMNS, _record, _row
from heron.always_on.subagents.store import SubagentRecord, Usage

__all__ = ["PostgresSubagentStore"]

_FINISHED = sorted(TERMINAL_STATUSES)
_MARKS = ", ".join(["%s"] * len(_COLUMNS.split(", ")))

Conn = psycopg.Connection[Any]


@pg_errors
class PostgresSubagentStore:
    """`SubagentStore` on a PostgreSQL pool (thread-safe)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def close(self) -> None:
        self._pool.close()

    def add(self, record: SubagentRecord) -> None:
        with self._pool.connection() as conn:
            conn.execute(f"INSERT INTO subagents ({_COLUMNS}) VALUES ({_MARKS})", _row(record))

    def get(self, subagent_id: str) -> SubagentRecord | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM subagents WHERE id = %s", (subagent_id,)
            ).fetchone()
        return None if row is None else _record(row)

    def list(
        self, *, root_session: str | None = None, active_only: bool = False
    ) -> builtins.list[SubagentRecord]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM subagents"
                " WHERE (%(root)s::text IS NULL OR root_session = %(root)s)"
                " AND (NOT %(active)s OR status <> ALL(%(finished)s)) ORDER BY seq",
                {"root": root_session, "active": active_only, "finished": _FINISHED},
            ).fetchall()
        return [_record(r) for r in rows]

    def advance(self, subagent_id: str, status: Status) -> SubagentRecord | None:
        def work(conn: Conn) -> SubagentRecord | None:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM subagents WHERE id = %s FOR UPDATE", (subagent_id,)
            ).fetchone()
            if row is None:
                return None
            record = _record(row)
            if record.finished:
                return record
            advance_status(record.status, status)
            updated = conn.execute(
                f"UPDATE subagents SET status = %s WHERE id = %s RETURNING {_COLUMNS}",
                (status, subagent_id),
            ).fetchone()
            assert updated is not None  # locked above
            return _record(updated)

        return run(self._pool, work)

    def finish(
        self,
        subagent_id: str,
        *,
        status: Status,
        outcome: Outcome | None,
        result: str,
        error: str,
        usage: Usage,
        ended_at: float,
    ) -> tuple[SubagentRecord, bool] | None:
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"{status!r} is not a finished status")
        with self._pool.connection() as conn:
            row = conn.execute(
                "UPDATE subagents SET status = %s, outcome = %s, result = %s, error = %s,"
                " usage = %s, ended_at = %s WHERE id = %s AND status <> ALL(%s)"
                f" RETURNING {_COLUMNS}",
                (
                    status,
                    outcome,
                    result,
                    error,
                    json.dumps(usage.to_data()),
                    ended_at,
                    subagent_id,
                    _FINISHED,
                ),
            ).fetchone()
        if row is not None:
            return _record(row), True
        record = self.get(subagent_id)
        return None if record is None else (record, False)

    def record_usage(self, subagent_id: str, usage: Usage) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                "UPDATE subagents SET usage = %s WHERE id = %s AND status <> ALL(%s)",
                (json.dumps(usage.to_data()), subagent_id, _FINISHED),
            )

    def claim_delivery(self, subagent_id: str) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "UPDATE subagents SET delivered = 1 WHERE id = %s AND delivered = 0"
                " AND status = ANY(%s)",
                (subagent_id, _FINISHED),
            )
        return cursor.rowcount == 1

    def request_cancel(self, subagent_id: str) -> bool:
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "UPDATE subagents SET cancel_requested = 1 WHERE id = %s AND status <> ALL(%s)",
                (subagent_id, _FINISHED),
            )
        return cursor.rowcount == 1

    def cancel_requests(self) -> builtins.list[str]:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT id FROM subagents WHERE cancel_requested = 1 AND status <> ALL(%s)"
                " ORDER BY seq",
                (_FINISHED,),
            ).fetchall()
        return [r[0] for r in rows]
