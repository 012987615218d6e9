"""The execution audit trail: every executed tool call, who ran it, in what context and why.

`ExecutionAuditTrail` is an `Observer` (one start and one end record per executed call) fed
with two more things a front end already has:

- the messages the loop appends (`note_messages`, from `TurnState.on_append`): the assistant
  message that made a call holds the text that preceded it in that response — the *why*;
- the turn events (`see_event`, a tap on the event sink): an approval decision names the
  operator or back-channel that let the call run.

A row is written when the call starts (status `running`) and completed when it ends, so a
process that dies mid-call still leaves a trace; resuming the session marks such rows
`lost`. Rows live in the `tool_executions` table of the state database. Arguments, reasons and
results are scrubbed of credentials and bounded before they are stored.

This is not the approval audit (`heron.audit.approvals`, what was decided before a call) and not a
receipt (`heron.turn.receipts`, proof of a result): it is what actually ran.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from heron.audit.approvals import audit_timestamp
from heron.messages import AssistantMessage, Message
from heron.turn.bounds import render_bounded
from heron.turn.events import ApprovalDecisionEvent, BaseEvent
from heron.turn.observer import ToolCallRecord, ToolCallStartRecord

WHY_MAX_CHARS: Final = 2_000
RESULT_MAX_CHARS: Final = 500

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
        result TEXT
    )
    """,
    "CREATE INDEX IF NOT EXISTS tool_executions_by_tool ON tool_executions (tool, id)",
    "CREATE INDEX IF NOT EXISTS tool_executions_by_session ON tool_executions (session, id)",
    "CREATE INDEX IF NOT EXISTS tool_executions_by_start ON tool_executions (started)",
)
_COLUMNS: Final = (
    "started, ended, tool, call_id, session, turn_id, agent, parent_agent, channel, operator, "
    "approved_by, owner, why, arguments, status, success, duration_ms, result"
)

_log = logging.getLogger("heron.audit.approvals")


@dataclass(frozen=True, kw_only=True, slots=True)
class Execution:
    """One executed tool call as the trail recorded it."""

    started: float
    """Seconds since the epoch."""
    ended: float | None
    tool: str
    call_id: str
    session: str | None
    turn_id: str
    agent: str | None
    parent_agent: str | None
    channel: str | None
    operator: str | None
    """Who runs the front end (the local user for the CLI), when known."""
    approved_by: str | None
    """Who approved this call when a prompt was needed (`operator:cli`, `backchannel:…`)."""
    owner: str
    why: str | None
    """The assistant text that preceded the call in the response that made it."""
    arguments: str
    status: str
    """`running` until the call ends; `lost` when its process ended first; else the outcome."""
    success: bool | None
    duration_ms: float | None
    result: str | None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with RFC 3339 UTC times."""
        ended = self.ended
        return {
            "started": audit_timestamp(lambda: self.started),
            "ended": audit_timestamp(lambda: ended) if ended is not None else None,
            "tool": self.tool,
            "call_id": self.call_id,
            "session": self.session,
            "turn_id": self.turn_id,
            "agent": self.agent,
            "parent_agent": self.parent_agent,
            "channel": self.channel,
            "operator": self.operator,
            "approved_by": self.approved_by,
            "owner": self.owner,
            "why": self.why,
            "arguments": self.arguments,
            "status": self.status,
            "success": self.success,
            "duration_ms": self.duration_ms,
            "result": self.result,
        }


def create_schema(conn: sqlite3.Connection) -> None:
    """Create the `tool_executions` table and its indexes if they are missing."""
    for statement in _SCHEMA:
        conn.execute(statement)
    conn.commit()


class ExecutionAuditTrail:
    """Records executed tool calls; use it as the agent's observer (see the module docstring).

    To keep an observer the agent already had, combine both in a `FanOutObserver`
    (`heron.turn.observer`); `default_agent` names the agent when records carry no agent name.
    Write failures are logged and never break a tool call.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        session: str | None = None,
        operator: str | None = None,
        default_agent: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        create_schema(conn)
        self._conn = conn
        self.session = session
        self.operator = operator
        self.default_agent = default_agent
        self._clock = clock
        self._why: dict[str, str] = {}
        self._approved_by: dict[str, str] = {}
        self._rows: dict[tuple[str, str], int] = {}

    def note_messages(self, messages: Iterable[Message]) -> None:
        """Remember the text behind each tool call of newly appended assistant messages."""
        for message in messages:
            if isinstance(message, AssistantMessage) and message.tool_calls:
                why = message.text.strip()
                for call in message.tool_calls:
                    self._why[call.id] = why

    def see_event(self, event: BaseEvent) -> None:
        """Tap on the turn's event sink: remembers who approved each call."""
        if isinstance(event, ApprovalDecisionEvent) and event.decision in ("yes", "always"):
            self._approved_by[event.call_id] = event.decided_by

    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        why = self._why_for(record.call_id)
        values = (
            self._clock(),
            None,
            record.tool,
            record.call_id,
            self.session,
            record.turn_id,
            record.agent or self.default_agent,
            record.parent_agent,
            record.channel,
            self.operator,
            self._approved_by.pop(record.call_id, None),
            record.owner,
            render_bounded(why, WHY_MAX_CHARS) if why else None,
            record.arguments,
            "running",
            None,
            None,
            None,
        )
        try:
            cursor = self._conn.execute(
                f"INSERT INTO tool_executions ({_COLUMNS}) VALUES ({', '.join('?' * 18)})", values
            )
            self._conn.commit()
        except sqlite3.Error as exc:
            _log.warning("execution audit: cannot record the start of %s: %s", record.tool, exc)
            return
        assert cursor.lastrowid is not None  # an INSERT into a rowid table always sets it
        self._rows[(record.turn_id, record.call_id)] = cursor.lastrowid

    def tool_call_end(self, record: ToolCallRecord) -> None:
        row = self._rows.pop((record.turn_id, record.call_id), None)
        if row is None:
            return
        try:
            self._conn.execute(
                "UPDATE tool_executions SET ended = ?, status = ?, success = ?, duration_ms = ?,"
                " result = ? WHERE id = ?",
                (
                    self._clock(),
                    record.status,
                    int(record.success),
                    record.duration_ms,
                    render_bounded(record.result, RESULT_MAX_CHARS),
                    row,
                ),
            )
            self._conn.commit()
        except sqlite3.Error as exc:
            _log.warning("execution audit: cannot record the end of %s: %s", record.tool, exc)

    def mark_lost(self, call_ids: Sequence[str]) -> int:
        """Mark this session's still-`running` rows of `call_ids` as `lost` (their process
        ended before they did); returns how many rows changed."""
        if not call_ids or self.session is None:
            return 0
        marks = ", ".join("?" * len(call_ids))
        cursor = self._conn.execute(
            f"UPDATE tool_executions SET status = 'lost', success = 0 WHERE session = ?"
            f" AND status = 'running' AND call_id IN ({marks})",
            (self.session, *call_ids),
        )
        self._conn.commit()
        return cursor.rowcount

    def _why_for(self, call_id: str) -> str:
        # A call a tool made (`ctx.call_tool`) has the id `<parent call>.<n>`: its reason is
        # the reason of the call that made it.
        while True:
            why = self._why.get(call_id)
            if why is not None:
                return why
            parent, dot, _ = call_id.rpartition(".")
            if not dot:
                return ""
            call_id = parent


def query_executions(
    conn: sqlite3.Connection,
    *,
    tool: str | None = None,
    session: str | None = None,
    since: float | None = None,
    limit: int = 100,
) -> list[Execution]:
    """The latest `limit` executions matching every filter given, oldest first."""
    if limit < 0:
        raise ValueError(f"limit must not be negative: {limit}")
    create_schema(conn)
    clauses: list[str] = []
    params: list[Any] = []
    for clause, value in (("tool = ?", tool), ("session = ?", session), ("started >= ?", since)):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(
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
    )
