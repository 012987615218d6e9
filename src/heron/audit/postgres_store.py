"""The two durable audit trails in the shared PostgreSQL database: approval decisions (table
`approval_audit`, `PostgresApprovalAudit`) and executed tool calls (table `tool_executions`,
`PostgresExecutionStore`). Order is insertion order (the identity column), as in SQLite."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Sequence
from typing import Any

from heron._support.postgres import Pool, pg_errors
from heron.audit.executions import Execution
from heron.turn.approval_audit import AuditRecord, check_limit

_APPROVAL_FIELDS = tuple(f.name for f in dataclasses.fields(AuditRecord))
_EXECUTION_FIELDS = tuple(f.name for f in dataclasses.fields(Execution))


@pg_errors
class PostgresApprovalAudit:
    """The approval audit trail (`heron.turn.approval_audit.AuditLog`) on PostgreSQL."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def record(self, record: AuditRecord) -> None:
        """Insert one decision (committed)."""
        with self._pool.connection() as conn:
            conn.execute(
                f"INSERT INTO approval_audit ({', '.join(_APPROVAL_FIELDS)})"
                f" VALUES ({', '.join(['%s'] * len(_APPROVAL_FIELDS))})",
                [getattr(record, name) for name in _APPROVAL_FIELDS],
            )

    def list(self, *, tool: str | None = None, limit: int = 100) -> builtins.list[AuditRecord]:
        """The latest `limit` decisions (optionally only for `tool`), oldest first."""
        check_limit(limit)
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {', '.join(_APPROVAL_FIELDS)} FROM approval_audit"
                " WHERE %(tool)s::text IS NULL OR tool = %(tool)s ORDER BY id DESC LIMIT %(n)s",
                {"tool": tool, "n": limit},
            ).fetchall()
        return [AuditRecord(**dict(zip(_APPROVAL_FIELDS, r, strict=True))) for r in rows[::-1]]


@pg_errors
class PostgresExecutionStore:
    """`ExecutionStore` on PostgreSQL; each write commits at once."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    def start(self, execution: Execution) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(
                f"INSERT INTO tool_executions ({', '.join(_EXECUTION_FIELDS)})"
                f" VALUES ({', '.join(['%s'] * len(_EXECUTION_FIELDS))}) RETURNING id",
                [getattr(execution, name) for name in _EXECUTION_FIELDS],
            ).fetchone()
        assert row is not None  # RETURNING of a one-row INSERT
        return int(row[0])

    def end(
        self,
        row: int,
        *,
        ended: float,
        status: str,
        success: bool,
        duration_ms: float | None,
        result: str | None,
    ) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                "UPDATE tool_executions SET ended = %s, status = %s, success = %s,"
                " duration_ms = %s, result = %s WHERE id = %s",
                (ended, status, success, duration_ms, result, row),
            )

    def mark_lost(self, session: str, call_ids: Sequence[str]) -> int:
        if not call_ids:
            return 0
        with self._pool.connection() as conn:
            cursor = conn.execute(
                "UPDATE tool_executions SET status = 'lost', success = FALSE WHERE session = %s"
                " AND status = 'running' AND call_id = ANY(%s)",
                (session, list(call_ids)),
            )
        return cursor.rowcount

    def query(
        self,
        *,
        tool: str | None = None,
        session: str | None = None,
        since: float | None = None,
        limit: int = 100,
    ) -> list[Execution]:
        check_limit(limit)
        with self._pool.connection() as conn:
            rows = conn.execute(
                f"SELECT {', '.join(_EXECUTION_FIELDS)} FROM tool_executions"
                " WHERE (%(tool)s::text IS NULL OR tool = %(tool)s)"
                " AND (%(session)s::text IS NULL OR session = %(session)s)"
                " AND (%(since)s::float8 IS NULL OR started >= %(since)s)"
                " ORDER BY id DESC LIMIT %(n)s",
                {"tool": tool, "session": session, "since": since, "n": limit},
            ).fetchall()
        return [_execution(row) for row in rows[::-1]]


def _execution(row: Sequence[Any]) -> Execution:
    return Execution(**dict(zip(_EXECUTION_FIELDS, row, strict=True)))
