"""The parse step: a model response's tool calls, native or in the text protocol, as
`ParsedCall`s whose ids are unique across the conversation.

Providers reject a reused call id, and a text-protocol model may copy one it saw in history, so
each id is checked against the ids this turn handed out and those of the history; a missing or
taken id is replaced by a fresh one, and a rename is reported (`CallIdRenamedEvent`).
"""

from __future__ import annotations

import uuid
from collections.abc import Set as AbstractSet
from typing import Any, Literal

from heron._support.limits import InputRejected, parse_json
from heron.messages import AssistantMessage
from heron.models import text_protocol
from heron.models.base import ModelToolCall
from heron.tools.definition import ToolSpec
from heron.turn.calls import ParsedCall, checked_call
from heron.turn.context import ResolvedAgentExecution, TurnState
from heron.turn.events import CallIdRenamedEvent


class CallParser:
    """The parse step of one turn, with the call ids it handed out."""

    def __init__(self, exec_: ResolvedAgentExecution, state: TurnState) -> None:
        self.exec = exec_
        self.state = state
        # A session writer keeps the ids of its history indexed (`known_call_ids`); without one,
        # the history is scanned once.
        known = state.known_call_ids
        if known is None:
            known = {
                c.id for m in state.history if isinstance(m, AssistantMessage) for c in m.tool_calls
            }
        self.known_call_ids: AbstractSet[str] = known
        self.call_ids: set[str] = set()
        """The ids this turn handed out."""

    def text_protocol_on(self, specs: tuple[ToolSpec, ...]) -> bool:
        return bool(specs) and not self.exec.knobs.strict_tool_parsing

    def parse(
        self, native: list[ModelToolCall], text: str, specs: tuple[ToolSpec, ...]
    ) -> tuple[list[ParsedCall], str, str | None]:
        """The calls, the visible text and, for malformed text protocol, what was wrong."""
        if native:
            # Native calls are answered even when no tools are offered ("unknown tool"), so
            # every call the model made gets its cards and its result.
            calls = [self._pin(i, c) for i, c in enumerate(native)]
            return calls, text, None
        if not specs or not self.text_protocol_on(specs):
            return [], text, None
        known = [s.name for s in specs]
        if self.exec.catalogue is not None:
            known += self.exec.catalogue.names()
        parsed = text_protocol.parse_text_tool_calls(text, known)
        calls = [
            checked_call(i, self._unique(c.call_id, c.name), c.name, c.arguments)
            for i, c in enumerate(parsed.calls)
        ]
        return calls, parsed.text, parsed.issue

    def used(self, call_id: str) -> bool:
        return call_id in self.call_ids or call_id in self.known_call_ids

    def _unique(self, call_id: str | None, name: str) -> str:
        """`call_id`, or a fresh id when it is missing or taken; a rename is reported."""
        if not call_id:
            call_id = _new_call_id()
        elif self.used(call_id):
            reason: Literal["in_history", "in_turn"] = (
                "in_turn" if call_id in self.call_ids else "in_history"
            )
            new_id = _new_call_id()
            self.state.sink(
                CallIdRenamedEvent(
                    turn_id=self.state.turn_id,
                    old_id=call_id,
                    new_id=new_id,
                    name=name,
                    reason=reason,
                )
            )
            call_id = new_id
        self.call_ids.add(call_id)
        return call_id

    def _pin(self, index: int, call: ModelToolCall) -> ParsedCall:
        call_id = self._unique(call.id, call.name)
        if call.arguments is not None:
            return checked_call(index, call_id, call.name, call.arguments)
        raw = call.arguments_json or "{}"
        try:
            # The one check of the arguments' depth, size, numbers and text (parse time).
            value: Any = parse_json(raw)
        except InputRejected as exc:
            syntax = exc.kind == "syntax"
            return ParsedCall(
                index=index,
                call_id=call_id,
                name=call.name,
                arguments={},
                arguments_error=exc.message if syntax else None,
                arguments_problem=None if syntax else exc.problem,
            )
        if not isinstance(value, dict):
            return ParsedCall(
                index=index,
                call_id=call_id,
                name=call.name,
                arguments={},
                arguments_error=f"got a JSON {type(value).__name__}",
            )
        return ParsedCall(index=index, call_id=call_id, name=call.name, arguments=value)


def _new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:16]
