"""The per-session log of turn events, so a stream replays a run as it ended.

Turn events (`heron.turn.events`) are emitted while a turn runs and live only in memory. The
gateway records the *terminal* ones — a call's pending card and its result, approvals, the
plan, truncation, loop warnings, the final answer, cancellation and errors — in a durable log
per session (`TurnLog`: SQLite in `heron.gateway.sqlite_store`, PostgreSQL in
`heron.gateway.postgres_store`), each with a sequence number.

Same transaction as the history: the log lives in the session store's database, and the
recorder is one of the store's companions (`heron.sessions.store.Companion`), so the records
a history write leads to commit inside that write's transaction — a crash leaves both or
neither. Which records go with which write:

- the events emitted since the session's last write (a call's cards, its approval, its
  result, the plan, …) go with its next write: the tool results they describe, or the next
  assistant message. Until then they are shown live (`Hub.live`, frames without an id);
- an assistant message brings its own record, `text`: its finished text. Streamed text is
  never stored delta by delta — the deltas are shown live and the message is the fold;
- the end of a turn (`final`, `cancelled`, `error`) goes with the entry the engine appends
  for it (`heron.turn.events.ending`): the final answer, the answer an error or a cancel cut
  off, the results of a cancelled round. An end without an entry (a cancel between rounds, a
  model that failed before any text, an aborted loop) is written at once, in a transaction of
  its own, with whatever is still waiting. `final` leaves out its text when it repeats the
  `text` record stored with it;
- the results crash repair appends (`heron.sessions.repair.INTERRUPTED_RESULT`, for calls a
  dead process left open) bring their own records, the call's card and its `interrupted`
  result: the events of that call died with the process. The card's arguments are unknown
  here (the history has them), so it shows none; a card still waiting (a process closing its
  own calls before it exits) is stored instead.

Every body is scrubbed (`heron.safety.redact`) before it is stored or shown: a known secret
never reaches the log or a client.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from heron._support.clock import Clock
from heron.messages import AssistantMessage, Message, ToolResultMessage
from heron.safety.redact import scrub_text, scrub_value
from heron.sessions.repair import INTERRUPTED_RESULT
from heron.turn.events import BaseEvent, EventSink, ToolCallEvent, ToolResultEvent, ending_now

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
"""The terminal turn events the log keeps (plus `text`, an assistant message's)."""
_TURN_ENDS = frozenset({"final", "cancelled", "error"})
"""Written with the entry they come with, else at once: no history write follows them."""
_LIVE_TYPES = frozenset({"text_delta", "progress"})
"""Shown live, never stored: streamed text (the message is its fold) and progress lines."""

Record = tuple[str, dict[str, Any]]


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

    def append(self, session: str, records: Sequence[Record], at: float) -> int:
        """Store `(type, body)` records in one transaction; the last one's sequence."""
        ...

    def append_in(self, conn: Any, session: str, records: Sequence[Record], at: float) -> int:
        """`append` inside a transaction the caller opened on `conn` (a connection of the
        session store this log shares) and commits."""
        ...

    def after(self, session: str, seq: int, *, limit: int) -> list[LoggedEvent]:
        """The first `limit` records of `session` after `seq`, oldest first."""
        ...

    def last(self, session: str) -> int:
        """The sequence of the session's newest record (0: none)."""
        ...

    def close(self) -> None: ...


class TurnRecorder:
    """Session sinks that keep terminal turn events for the session's next history write, and
    the companion that writes them in it (see the module docstring)."""

    def __init__(
        self,
        log: TurnLog,
        *,
        clock: Clock,
        stored: Callable[[str], None],
        live: Callable[[str, dict[str, Any], int], None],
    ) -> None:
        """`stored(session)` runs after each write of records (streams wake; from the thread
        that appended, for a store that appends on a worker thread); `live(session, body,
        stored_before)` gets what is shown before it is stored, with the session's last
        stored sequence."""
        self.log = log
        self.clock = clock
        self._stored = stored
        self._live = live
        self._waiting: dict[str, list[Record]] = {}
        self._last: dict[str, int] = {}
        self._turn: dict[str, str] = {}
        self._text: dict[str, str | None] = {}
        """The text of the session's newest record, when it is a `text` record."""
        self._ended: dict[str, BaseEvent] = {}
        """A turn end stored with its history entry, which the engine emits next."""

    def sink(self, session: str, inner: EventSink | None = None) -> EventSink:
        """The sink of `session`: `inner` first (the JSON lines of `heron serve`), then the
        recorder."""

        def emit(event: BaseEvent) -> None:
            if inner is not None:
                inner(event)
            self.record(session, event)

        return emit

    def record(self, session: str, event: BaseEvent) -> None:
        kind = str(getattr(event, "type", ""))
        if kind not in _LIVE_TYPES and kind not in LOGGED_TYPES:
            return
        body = _body(event)
        self._turn[session] = event.turn_id
        if kind in _TURN_ENDS:
            if self._ended.pop(session, None) == event:
                return  # stored with its history entry
            records = self._waiting.pop(session, [])
            records.append(self._end(body, self._text.get(session)))
            self._last[session] = self.log.append(session, records, self.clock.time())
            self._wrote(session, records)
            return
        if kind in LOGGED_TYPES:
            self._waiting.setdefault(session, []).append((kind, body))
        if session not in self._last:
            self._last[session] = self.log.last(session)
        self._live(session, body, self._last[session])

    def written(self, conn: Any, session: str, messages: Sequence[Message]) -> None:
        """The session store's companion: inside the transaction that appends `messages` to
        `session`, the records waiting for it and the text of its assistant messages."""
        records = self._waiting.pop(session, [])
        end = ending_now()
        if end is not None:
            self._turn[session] = end.turn_id
        turn = self._turn.get(session, "")
        shown = {(kind, b.get("id")) for kind, b in records}
        for message in messages:
            if isinstance(message, AssistantMessage) and message.text:
                text = scrub_text(message.text)
                records.append(("text", {"type": "text", "text": text, "turn_id": turn}))
            elif isinstance(message, ToolResultMessage) and message.content == INTERRUPTED_RESULT:
                records += _interrupted(message, turn, shown)
        if end is not None and str(getattr(end, "type", "")) in _TURN_ENDS:
            last = records[-1] if records else None
            records.append(
                self._end(_body(end), last[1]["text"] if last and last[0] == "text" else None)
            )
            self._ended[session] = end
        if records:
            self.log.append_in(conn, session, records, self.clock.time())
            # Read again once committed (the transaction may still roll back).
            self._last.pop(session, None)
            self._wrote(session, records)

    @staticmethod
    def _end(body: dict[str, Any], text: str | None) -> Record:
        """The record of a turn end; `text`: that of the `text` record stored just before."""
        if body["type"] == "final" and body.get("text") == text:
            body.pop("text", None)  # the answer is that `text` record
        return body["type"], body

    def _wrote(self, session: str, records: list[Record]) -> None:
        kind, body = records[-1]
        self._text[session] = body["text"] if kind == "text" else None
        self._stored(session)


def _body(event: BaseEvent) -> dict[str, Any]:
    body: dict[str, Any] = scrub_value(event.model_dump(mode="json", exclude_none=True))
    return body


def _interrupted(
    message: ToolResultMessage, turn: str, shown: set[tuple[str, Any]]
) -> list[Record]:
    """The card and result of a call crash repair closed (see the module docstring), but not
    those among the records stored with it (`shown`: `(type, id)`): a process that closes its
    own open calls before it exits (`SessionWriter.close_open_calls`) still has their cards."""
    call = ToolCallEvent(id=message.call_id, name=message.name, arguments={}, turn_id=turn)
    result = ToolResultEvent(
        id=message.call_id,
        name=message.name,
        success=False,
        status="interrupted",
        output=message.content,
        turn_id=turn,
    )
    return [(e.type, _body(e)) for e in (call, result) if (e.type, e.id) not in shown]
