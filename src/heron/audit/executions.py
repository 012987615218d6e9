"""The execution audit trail: every executed tool call, who ran it, in what context and why.

`ExecutionAuditTrail` is an `Observer` (one start and one end record per executed call) fed
with two more things a front end already has:

- the messages the loop appends (`note_messages`, from `TurnState.on_append`): the assistant
  message that made a call holds the text that preceded it in that response — the *why*;
- the turn events (`see_event`, a tap on the event sink): an approval decision names the
  operator or back-channel that let the call run.

A row is written when the call starts (status `running`) and completed when it ends, so a
process that dies mid-call still leaves a trace; resuming the session marks such rows
`lost`. Rows live in an `ExecutionStore` (`heron.audit.sqlite_store.SqliteExecutionStore`: the
`tool_executions` table of the state database). Arguments, reasons and results are scrubbed of
credentials and bounded before they are stored.

This is not the approval audit (`heron.turn.approval_audit`, what was decided before a call) and
not a receipt (`heron.turn.receipts`, proof of a result): it is what actually ran.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from heron.errors import StoreError
from heron.messages import AssistantMessage, Message
from heron.turn.approval_audit import audit_timestamp
from heron.turn.bounds import render_bounded
from heron.turn.events import ApprovalDecisionEvent, BaseEvent, EventSink
from heron.turn.observer import ToolCallRecord, ToolCallStartRecord

WHY_MAX_CHARS: Final = 2_000
RESULT_MAX_CHARS: Final = 500

_log = logging.getLogger("heron.audit.executions")


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
    risk: str | None = None
    """The call's risk tier for a tool that judges each call (the `shell` tool's parsed
    command: `low`, `medium`, `high`); None for the others."""

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
            "risk": self.risk,
        }


class ExecutionStore(Protocol):
    """Durable execution rows. Synchronous: the trail writes in line from the observer
    callbacks, and a row is one small local write. A back-end failure raises
    `heron.errors.StoreError`."""

    def start(self, execution: Execution) -> int:
        """Store the row of a call that starts (status `running`); returns the row's id."""
        ...

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
        """Complete row `row` with how its call ended."""
        ...

    def mark_lost(self, session: str, call_ids: Sequence[str]) -> int:
        """Mark `session`'s still-`running` rows of `call_ids` `lost` (success `False`);
        returns how many rows changed."""
        ...

    def query(
        self,
        *,
        tool: str | None = None,
        session: str | None = None,
        since: float | None = None,
        limit: int = 100,
    ) -> list[Execution]:
        """The latest `limit` rows matching every filter given (`since`: started at or after
        it), oldest first, in the order they were started; `ValueError` for a negative
        `limit`."""
        ...


class ExecutionAuditTrail:
    """Records executed tool calls; use it as the agent's observer (see the module docstring).

    To keep an observer the agent already had, combine both in a `FanOutObserver`
    (`heron.turn.observer`); `default_agent` names the agent when records carry no agent name.
    Write failures (`StoreError`) are logged and never break a tool call.
    """

    def __init__(
        self,
        store: ExecutionStore,
        *,
        session: str | None = None,
        operator: str | None = None,
        default_agent: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
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

    def watching(self, inner: EventSink) -> EventSink:
        """`inner`, with this trail seeing each event first (who approved each call)."""

        def sink(event: BaseEvent) -> None:
            self.see_event(event)
            inner(event)

        return sink

    def tool_call_start(self, record: ToolCallStartRecord) -> None:
        why = self._why_for(record.call_id)
        execution = Execution(
            started=self._clock(),
            ended=None,
            tool=record.tool,
            call_id=record.call_id,
            session=self.session,
            turn_id=record.turn_id,
            agent=record.agent or self.default_agent,
            parent_agent=record.parent_agent,
            channel=record.channel,
            operator=self.operator,
            approved_by=self._approved_by.pop(record.call_id, None),
            owner=record.owner,
            why=render_bounded(why, WHY_MAX_CHARS) if why else None,
            arguments=record.arguments,
            status="running",
            success=None,
            duration_ms=None,
            result=None,
            risk=record.risk,
        )
        try:
            row = self.store.start(execution)
        except StoreError as exc:
            _log.warning("execution audit: cannot record the start of %s: %s", record.tool, exc)
            return
        self._rows[(record.turn_id, record.call_id)] = row

    def tool_call_end(self, record: ToolCallRecord) -> None:
        row = self._rows.pop((record.turn_id, record.call_id), None)
        if row is None:
            return
        try:
            self.store.end(
                row,
                ended=self._clock(),
                status=record.status,
                success=record.success,
                duration_ms=record.duration_ms,
                result=render_bounded(record.result, RESULT_MAX_CHARS),
            )
        except StoreError as exc:
            _log.warning("execution audit: cannot record the end of %s: %s", record.tool, exc)

    def mark_lost(self, call_ids: Sequence[str]) -> int:
        """Mark this session's still-`running` rows of `call_ids` as `lost` (their process
        ended before they did); returns how many rows changed."""
        if not call_ids or self.session is None:
            return 0
        return self.store.mark_lost(self.session, call_ids)

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
