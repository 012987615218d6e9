"""The per-session log of turn events, so a stream replays a run as it ended.

Turn events (`heron.turn.events`) are emitted while a turn runs and lived only in memory. The
gateway records the *terminal* ones — a call's pending card and its result, approvals, the
plan, truncation, loop warnings, the final answer, cancellation and errors — in a durable log
per session (`TurnLog`, SQLite in `heron.gateway.sqlite_store`), each with a sequence number.
Streamed text is not stored delta by delta: the deltas of one step are folded into one `text`
record written before the card or answer that ends the step (and dropped when the final
answer repeats them), so a replay shows the finished message. Live clients still get every
delta as it streams (`Hub.live`), as frames without an id.

Every body is scrubbed (`heron.safety.redact.scrub_value`) before it is stored or shown: a
known secret never reaches the log or a client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from heron._support.clock import Clock
from heron.safety.redact import scrub_value
from heron.turn.events import BaseEvent, EventSink

__all__ = ["LOGGED_TYPES", "LoggedEvent", "TurnLog", "TurnRecorder"]

LOGGED_TYPES: frozenset[str] = frozenset(
    {
        "tool_call",
        "tool_result",
        "call_id_renamed",
        "plan",
        "approval_request",
        "approval_decision",
        "truncated",
        "loop_detected",
        "final",
        "cancelled",
        "error",
        "extension_error",
        "history_trimmed",
    }
)
"""The terminal turn events the log keeps (plus the folded `text`)."""
_LIVE_TYPES = frozenset({"text_delta", "progress"})
"""Shown live, never stored: streamed text (folded) and progress lines."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LoggedEvent:
    seq: int
    session: str
    type: str
    body: dict[str, Any]
    at: float


class TurnLog(Protocol):
    """Durable turn events per session, in order."""

    @property
    def epoch(self) -> str:
        """Changes only when the database does: a cursor of another epoch means nothing."""
        ...

    def append(self, session: str, records: Sequence[tuple[str, dict[str, Any]]], at: float) -> int:
        """Store `(type, body)` records in one transaction; the last one's sequence."""
        ...

    def after(self, session: str, seq: int, *, limit: int) -> list[LoggedEvent]:
        """The first `limit` records of `session` after `seq`, oldest first."""
        ...

    def last(self, session: str) -> int:
        """The sequence of the session's newest record (0: none)."""
        ...

    def close(self) -> None: ...


class TurnRecorder:
    """Session sinks that log terminal turn events and show streamed ones live."""

    def __init__(
        self,
        log: TurnLog,
        *,
        clock: Clock,
        stored: Callable[[str], None],
        live: Callable[[str, dict[str, Any], int], None],
    ) -> None:
        """`stored(session)` runs after each write (streams wake); `live(session, body,
        stored_before)` gets what is shown but not stored, with the session's last stored
        sequence (its text is folded into the next record)."""
        self.log = log
        self.clock = clock
        self._stored = stored
        self._live = live
        self._text: dict[str, list[str]] = {}
        self._last: dict[str, int] = {}

    def sink(self, session: str, inner: EventSink | None = None) -> EventSink:
        """The sink of `session`: `inner` first (the JSON lines of `heron serve`), then
        the log."""

        def emit(event: BaseEvent) -> None:
            if inner is not None:
                inner(event)
            self.record(session, event)

        return emit

    def record(self, session: str, event: BaseEvent) -> None:
        kind = str(getattr(event, "type", ""))
        body: dict[str, Any] = scrub_value(event.model_dump(mode="json", exclude_none=True))
        if kind in _LIVE_TYPES:
            if kind == "text_delta":
                self._text.setdefault(session, []).append(str(body.get("text", "")))
            if session not in self._last:
                self._last[session] = self.log.last(session)
            self._live(session, body, self._last[session])
            return
        if kind not in LOGGED_TYPES:
            return
        records: list[tuple[str, dict[str, Any]]] = []
        text = "".join(self._text.pop(session, []))
        if text and not (kind == "final" and body.get("text") == text):
            records.append(("text", {"type": "text", "text": text, "turn_id": event.turn_id}))
        records.append((kind, body))
        self._last[session] = self.log.append(session, records, self.clock.time())
        self._stored(session)
