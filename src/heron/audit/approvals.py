"""The approval audit trail: who decided what about which tool call, and when.

Approval is pre-execution control; this trail records each decision durably (SQLite in the state
directory) or, for embedders and tests without a state directory, in memory. Receipts are a
separate concern and live in `heron.turn.receipts`.
"""

from __future__ import annotations

import builtins
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, Protocol, cast, get_args

from heron._support.timefmt import utc_rfc3339

Decision = Literal[
    "yes", "always", "no", "replace", "timeout", "unavailable", "policy_deny", "auto"
]
"""How an approval request ended.

`yes`/`always`/`no`/`replace` are operator answers (`replace` = deny with a replacement result);
`timeout` and `unavailable` are denials the runtime made because no operator answered;
`policy_deny` is a configured rule; `auto` is an approval that needed no prompt.
"""

_DECISIONS: Final = frozenset(get_args(Decision))
_RFC3339_UTC_RE: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?Z"
)


def audit_timestamp(clock: Callable[[], float] = time.time) -> str:
    """The clock's current time as RFC 3339 UTC with millisecond precision and a `Z` suffix."""
    return utc_rfc3339(clock(), precision="milliseconds")


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditRecord:
    """One approval decision."""

    timestamp: str
    """RFC 3339 UTC with a `Z` suffix, e.g. `2024-03-15T14:30:00.000Z` (see `audit_timestamp`)."""
    tool: str
    arguments_summary: str
    """Already redacted by the caller; the store writes it as given."""
    decision: Decision
    decided_by: str
    """`operator:cli`, `backchannel:<name>`, `policy`, `autonomy:<level>`, ..."""
    request_id: str
    turn_id: str | None = None
    session_id: str | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.decision not in _DECISIONS:
            raise ValueError(f"unknown approval decision: {self.decision!r}")
        if _RFC3339_UTC_RE.fullmatch(self.timestamp) is None:
            raise ValueError(
                f"audit timestamp must be RFC 3339 UTC ending in 'Z': {self.timestamp!r}"
            )


class AuditLog(Protocol):
    """What the approval gate needs from an audit trail; `AuditStore` and `MemoryAuditStore` fit."""

    def record(self, record: AuditRecord) -> None:
        """Append one decision."""
        ...

    def list(self, *, tool: str | None = None, limit: int = 100) -> builtins.list[AuditRecord]:
        """The latest `limit` decisions (optionally for one tool), oldest first."""
        ...


_COLUMNS: Final = (
    "timestamp, tool, arguments_summary, decision, decided_by, request_id, turn_id, session_id, "
    "reason"
)

_SCHEMA: Final = (
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
        reason TEXT
    )
    """,
    "CREATE INDEX IF NOT EXISTS approval_audit_tool ON approval_audit (tool, id)",
)


def _check_limit(limit: int) -> None:
    # SQLite treats a negative LIMIT as "no limit"; refuse it instead of silently returning all.
    if limit < 0:
        raise ValueError(f"limit must not be negative: {limit}")


class AuditStore:
    """The approval audit trail in the `approval_audit` table of a heron database.

    Takes a connection from `heron._support.state.open_db`; the caller keeps ownership and closes
    it.
    Order is insertion order (the row id), not the recorded timestamp, so a clock step cannot
    reorder the trail.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.commit()

    def record(self, record: AuditRecord) -> None:
        """Insert one decision and commit it."""
        self._conn.execute(
            f"INSERT INTO approval_audit ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            ),
        )
        self._conn.commit()

    def list(self, *, tool: str | None = None, limit: int = 100) -> builtins.list[AuditRecord]:
        """The latest `limit` decisions (optionally only for `tool`), oldest first."""
        _check_limit(limit)
        where, params = ("WHERE tool = ?", (tool,)) if tool is not None else ("", ())
        rows = self._conn.execute(
            f"SELECT {_COLUMNS} FROM approval_audit {where} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        ).fetchall()
        return [_from_row(row) for row in reversed(rows)]


def _from_row(row: tuple[object, ...]) -> AuditRecord:
    ts, tool, summary, decision, decided_by, request_id, turn_id, session_id, reason = row
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
    )


class MemoryAuditStore:
    """The same trail kept in process memory, for embedders and tests with no state directory."""

    def __init__(self) -> None:
        self._records: builtins.list[AuditRecord] = []

    def record(self, record: AuditRecord) -> None:
        """Append one decision."""
        self._records.append(record)

    def list(self, *, tool: str | None = None, limit: int = 100) -> builtins.list[AuditRecord]:
        """The latest `limit` decisions (optionally only for `tool`), oldest first."""
        _check_limit(limit)
        matching = [r for r in self._records if tool is None or r.tool == tool]
        return matching[-limit:] if limit else []
