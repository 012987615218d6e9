"""What the editor is shown: heron's turn events and stored messages as ACP session updates.

Every tool call the editor sees goes through the same three steps, once each and in order:
a `tool_call` (status `pending`) when the model's message naming it is stored, a
`tool_call_update` to `in_progress` when heron starts it (or refuses it: the engine gives a
refused call its pending card too), and one terminal `tool_call_update` — `completed` or
`failed` — carrying the result as the model saw it (scrubbed, bounded here once more). A
call's `kind` comes from heron's annotations (read-only, destructive, open-world; heron's own
tools by name), its `locations` from the path arguments of file tools, resolved in the
workspace. Calls a tool makes through `ToolContext.call_tool` first appear with their
`in_progress` step.

Text and reasoning stream as `agent_message_chunk` and `agent_thought_chunk`; the `plan`
event of `update_plan` becomes an ACP `plan`. Loading a session replays its history through
the same mapping (`replay`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acp import (
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_plan,
    update_tool_call,
    update_user_message_text,
)
from acp.helpers import SessionUpdate
from acp.schema import (
    ContentToolCallContent,
    ToolCallLocation,
    ToolCallStatus,
    ToolKind,
)

from heron.messages import AssistantMessage, Message, ToolResultMessage, UserMessage
from heron.safety.redact import scrub_text, scrub_value, summarize_args
from heron.tools.definition import ToolSpec
from heron.turn.events import (
    BaseEvent,
    PlanEvent,
    ReasoningDeltaEvent,
    TextDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)

__all__ = [
    "MAX_SHOWN_CHARS",
    "CallCard",
    "TurnUpdates",
    "call_locations",
    "replay",
    "tool_kind",
    "tool_title",
]

MAX_SHOWN_CHARS = 20_000
"""The longest tool output an update carries (the model's own bound applies first)."""

_BUILTIN_KINDS: dict[str, ToolKind] = {
    "read_file": "read",
    "list_dir": "read",
    "read_document": "read",
    "read_artifact": "read",
    "find_files": "search",
    "grep_files": "search",
    "grep_artifact": "search",
    "web_search": "search",
    "knowledge_search": "search",
    "write_file": "edit",
    "edit_file": "edit",
    "copy_path": "edit",
    "move_path": "move",
    "delete_path": "delete",
    "fetch_url": "fetch",
    "download_file": "fetch",
    "shell": "execute",
    "run_python": "execute",
    "start_job": "execute",
    "update_plan": "think",
}
"""heron's own tools, whose annotations alone do not tell a search from a read."""

_SEARCH_WORDS = frozenset({"search", "grep", "find", "query", "lookup"})
_DELETE_WORDS = frozenset({"delete", "remove", "rm", "unlink", "purge", "drop"})
_EXECUTE_WORDS = frozenset({"run", "exec", "execute", "shell", "command", "bash", "python"})
_EDIT_WORDS = frozenset({"write", "edit", "create", "update", "save", "make", "patch", "append"})
_FILE_KINDS = frozenset({"read", "edit", "delete", "move", "search"})
_PATH_KEYS = ("path", "file", "file_path", "filename", "src", "dst", "source", "destination")


def tool_kind(name: str, spec: ToolSpec | None) -> ToolKind:
    """The ACP kind of a call of `name`: heron's own tools by name; any other tool from its
    annotations — read-only is `read` (`search` when its name says so, `fetch` when it reaches
    outside), then `delete`, `execute` or `edit` by the words of its name (`edit` for any
    destructive tool), else `other`."""
    if spec is None:
        return "other"
    if spec.owner == "builtin" and name in _BUILTIN_KINDS:
        return _BUILTIN_KINDS[name]
    words = set(re.split(r"[^a-z]+", name.lower()))
    a = spec.annotations
    if a.read_only:
        if words & _SEARCH_WORDS:
            return "search"
        return "fetch" if a.open_world else "read"
    if words & _DELETE_WORDS:
        return "delete"
    if words & _EXECUTE_WORDS:
        return "execute"
    if a.destructive or words & _EDIT_WORDS:
        return "edit"
    return "other"


def tool_title(name: str, arguments: Mapping[str, Any]) -> str:
    """`read_file: notes.txt` — the tool and its arguments in one redacted line."""
    summary = summarize_args(arguments, max_value_chars=60)
    title = f"{name}: {summary}" if summary else name
    return title if len(title) <= 160 else title[:159] + "…"


def call_locations(
    kind: ToolKind, arguments: Mapping[str, Any], workspace: Path
) -> list[ToolCallLocation]:
    """The files a file tool's call names (`path`, `src`, `dst`, …), as absolute paths in the
    workspace; none for other kinds of tools."""
    if kind not in _FILE_KINDS:
        return []
    found: list[ToolCallLocation] = []
    for key in _PATH_KEYS:
        value = arguments.get(key)
        if not isinstance(value, str) or not value or "\x00" in value:
            continue
        path = Path(value)
        found.append(ToolCallLocation(path=os.path.normpath(workspace / path)))
    return found


def _shown(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as an editor may show them: scrubbed, without the runtime's marker."""
    shown = scrub_value(dict(arguments))
    shown.pop("approved", None)
    return dict(shown)


def _bounded(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[… {len(text) - limit} more characters not shown here]"


def _content(text: str) -> list[ContentToolCallContent]:
    return [tool_content(text_block(_bounded(text)))] if text else []


@dataclass(kw_only=True, slots=True)
class CallCard:
    """One tool call as the editor knows it."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    """The call's arguments as the model sent them (known secrets masked)."""
    spec: ToolSpec | None
    kind: ToolKind
    title: str
    locations: list[ToolCallLocation] = field(default_factory=list)
    status: ToolCallStatus = "pending"

    @property
    def ended(self) -> bool:
        return self.status in ("completed", "failed")


class TurnUpdates:
    """Turns one session's messages and turn events into session updates, handed to `send` in
    order. `lookup` finds a tool's spec by name (for its kind); file locations resolve in
    `workspace`. `messages` is the turn's `on_append` observer and `event` its event sink."""

    def __init__(
        self,
        send: Callable[[SessionUpdate], None],
        *,
        lookup: Callable[[str], ToolSpec | None],
        workspace: Path,
    ) -> None:
        self.send = send
        self.lookup = lookup
        self.workspace = workspace
        self.calls: dict[str, CallCard] = {}

    # -- live ------------------------------------------------------------------------------

    def messages(self, messages: Sequence[Message]) -> None:
        """`on_append`: the calls of a stored assistant message get their `pending` card
        (text arrives as deltas, results as events)."""
        for message in messages:
            if isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    self.start(call.id, call.name, call.arguments)

    def event(self, event: BaseEvent) -> None:
        """The event sink: text, reasoning, tool-call steps and plans."""
        if isinstance(event, TextDeltaEvent):
            if event.text:
                self.send(update_agent_message_text(event.text))
        elif isinstance(event, ReasoningDeltaEvent):
            if event.text:
                self.send(update_agent_thought_text(event.text))
        elif isinstance(event, ToolCallEvent):
            self._running(event.id, event.name, event.arguments)
        elif isinstance(event, ToolResultEvent):
            self._running(event.id, event.name, {})
            raw: dict[str, Any] = {"status": event.status, "success": event.success}
            if event.phase is not None:
                raw["phase"] = event.phase
            self._end(event.id, success=event.success, output=event.output, raw=raw)
        elif isinstance(event, PlanEvent):
            entries = [plan_entry(item.text, status=item.status) for item in event.items]
            self.send(update_plan(entries))

    # -- replay ----------------------------------------------------------------------------

    def replayed(self, message: Message) -> None:
        """One stored message, as it was shown when it happened."""
        if isinstance(message, UserMessage):
            if message.source == "user" and message.content:
                self.send(update_user_message_text(scrub_text(message.content)))
        elif isinstance(message, AssistantMessage):
            if message.reasoning:
                self.send(update_agent_thought_text(scrub_text(message.reasoning)))
            if message.text:
                self.send(update_agent_message_text(scrub_text(message.text)))
            self.messages((message,))
        elif isinstance(message, ToolResultMessage):
            self._running(message.call_id, message.name, {})
            status = "error" if message.is_error else "ok"
            raw = {"status": status, "success": not message.is_error}
            self._end(
                message.call_id,
                success=not message.is_error,
                output=scrub_text(message.content),
                raw=raw,
            )

    # -- the three steps -------------------------------------------------------------------

    def start(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> CallCard:
        """The call's card; the first time, shown as a `pending` tool call."""
        card = self.calls.get(call_id)
        if card is not None:
            return card
        shown = _shown(arguments)
        spec = self.lookup(name)
        kind = tool_kind(name, spec)
        card = CallCard(
            call_id=call_id,
            name=name,
            arguments=dict(arguments),
            spec=spec,
            kind=kind,
            title=tool_title(name, shown),
            locations=call_locations(kind, shown, self.workspace),
        )
        self.calls[call_id] = card
        self.send(
            start_tool_call(
                call_id,
                card.title,
                kind=kind,
                status="pending",
                locations=card.locations or None,
                raw_input=shown,
            )
        )
        return card

    def _running(self, call_id: str, name: str, arguments: Mapping[str, Any]) -> None:
        card = self.start(call_id, name, arguments)
        if card.status == "pending":
            card.status = "in_progress"
            self.send(update_tool_call(call_id, status="in_progress"))

    def _end(self, call_id: str, *, success: bool, output: str, raw: dict[str, Any]) -> None:
        card = self.calls[call_id]
        if card.ended:
            return  # one terminal update per call
        card.status = "completed" if success else "failed"
        self.send(
            update_tool_call(call_id, status=card.status, content=_content(output), raw_output=raw)
        )


def replay(history: Iterable[Message], updates: TurnUpdates) -> None:
    """Send a stored conversation to the editor (`session/load`)."""
    for message in history:
        updates.replayed(message)
