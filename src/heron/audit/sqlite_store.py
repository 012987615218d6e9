"""The two durable audit trails in heron's SQLite database: approval decisions (table
`approval_audit`, `SqliteApprovalAudit`, the engine's `AuditLog`) and executed tool calls
(table `tool_executions`, `SqliteExecutionStore`).

Both take a connection from `heron._support.state.open_db`; the caller keeps ownership and
closes it. Order is insertion order (the row id), not a recorded time, so a clock step cannot
reorder a trail.
"""

from __future__ import annotations

import builtins
import sqlite3
from collections.abc import Sequence
from typing import Any, Final, cast

from heron._support.state import sqlite_errors
from heron.audit.executions import Execution
from heron.turn.approval_audit import AuditRecord, Decision, check_limit

# -- approvals ---------------------------------------------------------------------------------

_APPROVAL_COLUMNS: Final = (
    "timestamp, tool, arguments_summary, decision, decided_by, request_id, turn_id, session_id, "
    "reason, risk"
)

_APPROVAL_SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS approval_audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        timestamp TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments_summary TEXT NOT NULL,
        decision TEXT NOT NULL,
        decided_by TEXT NOT NULL,
        request_id TEXT NOT NULL,
        turn_id TEXT,
        session_id TEXT,
        reason TEXT,
        risk TEXT
    )
    """,
    "CREATE INDEX IF NOT EXISTS approval_audit_tool ON approval_audit (tool, id)",
)


def _add_column(conn: sqlite3.Connection, table: str, column: str) -> None:
    """Add a nullable TEXT column to a table created by an older heron."""
    known = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    if column not in known:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} TEXT")


@sqlite_errors
class SqliteApprovalAudit:
    """The approval audit trail (`heron.turn.approval_audit.AuditLog`) on SQLite."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        for statement in _APPROVAL_SCHEMA:
            conn.execute(statement)
        _add_column(conn, "approval_audit", "risk")
        conn.commit()

    def record(self, record: AuditRecord) -> None:
        """Insert one decision and commit it."""
        self._conn.execute(
            f"INSERT INTO approval_audit ({_APPROVAL_COLUMNS}) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.timestamp,
                record.tool,
                record.arguments_summary,
                record.decision,
                record.decided_by,
                record.request_id,
                record.turn_id,
                record.session_id,
                record.reason,
                record.risk,
            ),
        )
        self._conn.commit()

    def list(self, *, tool: str | None = None, limit: int = 100) -> builtins.list[AuditRecord]:
        """The latest `limit` decisions (optionally only for `tool`), oldest first."""
        check_limit(limit)
        where, params = ("WHERE tool = ?", (tool,)) if tool is not None else ("", ())
        rows = self._conn.execute(
            f"SELECT {_APPROVAL_COLUMNS} FROM approval_audit {where} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        ).fetchall()
        return [_approval(row) for row in reversed(rows)]


def _approval(row: tuple[object, ...]) -> AuditRecord:
    ts, tool, summary, decision, decided_by, request_id, turn_id, session_id, reason, risk = row
    return AuditRecord(
        timestamp=cast(str, ts),
        tool=cast(str, tool),
        arguments_summary=cast(str, summary),
        decision=cast(Decision, decision),
        decided_by=cast(str, decided_by),
        request_id=cast(str, request_id),
        turn_id=cast("str | None", turn_id),
        session_id=cast("str | None", session_id),
        reason=cast("str | None", reason),
        risk=cast("str | None", risk),
    )


# -- executions --------------------------------------------------------------------------------

_SCHEMA: Final = (
    """
    CREATE TABLE IF NOT EXISTS tool_executions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        started REAL NOT NULL,
        ended REAL,
        tool TEXT NOT NULL,
        call_id TEXT NOT NULL,
        session TEXT,
        turn_id TEXT NOT NULL,
        agent TEXT,
        parent_agent TEXT,
        channel TEXT,
        operator TEXT,
        approved_by TEXT,
        owner TEXT NOT NULL,
        why TEXT,
        arguments TEXT NOT NULL,
        status TEXT NOT NULL,
        success INTEGER,
        duration_ms REAL,
        result TEXT,
        risk TEXT
    )
    """,
    "CREATE INDEX IF NOT EXISTS tool_executions_by_tool ON tool_executions (tool, id)",
    "CREATE INDEX IF NOT EXISTS tool_executions_by_session ON tool_executions (session, id)",
    "CREATE INDEX IF NOT EXISTS tool_executions_by_start ON tool_executions (started)",
)
_COLUMNS: Final = (
    "started, ended, tool, call_id, session, turn_id, agent, parent_agent, channel, operator, "
    "approved_by, owner, why, arguments, status, success, duration_ms, result, risk"
)


@sqlite_errors
class SqliteExecutionStore:
    """`ExecutionStore` on SQLite; each write commits at once."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        for statement in _SCHEMA:
            conn.execute(statement)
        _add_column(conn, "tool_executions", "risk")
        conn.commit()

    def start(self, execution: Execution) -> int:
        values = tuple(getattr(execution, name) for name in _COLUMNS.split(", "))
        cursor = self._conn.execute(
            f"INSERT INTO tool_executions ({_COLUMNS}) VALUES ({', '.join('?' * len(values))})",
            values,
        )
        self._conn.commit()
        assert cursor.lastrowid is not None  # an INSERT into a rowid table always sets it
        return cursor.lastrowid

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
        self._conn.execute(
            "UPDATE tool_executions SET ended = ?, status = ?, success = ?, duration_ms = ?,"
            " result = ? WHERE id = ?",
            (ended, status, int(success), duration_ms, result, row),
        )
        self._conn.commit()

    def mark_lost(self, session: str, call_ids: Sequence[str]) -> int:
        if not call_ids:
            return 0
        marks = ", ".join("?" * len(call_ids))
        cursor = self._conn.execute(
            f"UPDATE tool_executions SET status = 'lost', success = 0 WHERE session = ?"
            f" AND status = 'running' AND call_id IN ({marks})",
            (session, *call_ids),
        )
        self._conn.commit()
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
        clauses: list[str] = []
        params: list[Any] = []
        for clause, value in (
            ("tool = ?", tool),
            ("session = ?", session),
            ("started >= ?", since),
        ):
            if value is not None:
                clauses.append(clause)
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM tool_executions {where} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        ).fetchall()
        return [_from_row(row) for row in reversed(rows)]


def _from_row(row: Sequence[Any]) -> Execution:
    (
        started,
        ended,
        tool,
        call_id,
        session,
        turn_id,
        agent,
        parent_agent,
        channel,
        operator,
        approved_by,
        owner,
        why,
        arguments,
        status,
        success,
        duration_ms,
        result,
        risk,
    ) = row
    return Execution(
        started=started,
        ended=ended,
        tool=tool,
        call_id=call_id,
        session=session,
        turn_id=turn_id,
        agent=agent,
        parent_agent=parent_agent,
        channel=channel,
        operator=operator,
        approved_by=approved_by,
        owner=owner,
        why=why,
        arguments=arguments,
        status=status,
        success=None if success is None else bool(success),
        duration_ms=duration_ms,
        result=result,
        risk=risk,
    )
