"""Provider-neutral conversation history.

Provider adapters render these to their wire format (native tool messages, or the text protocol
for models without native tools). The history is append-only during a turn.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SystemMessage(_Message):
    role: Literal["system"] = "system"
    content: str


class UserMessage(_Message):
    role: Literal["user"] = "user"
    content: str
    source: str = "user"
    """Who this came from: `user`, or `runtime` for messages heron itself adds (retry hints,
    iteration-cap requests) — never confused with the operator's own words."""


class ToolCallPart(_Message):
    """One tool call as the model emitted it (after id pinning)."""

    id: str
    name: str
    arguments: dict[str, Any]


class AssistantMessage(_Message):
    role: Literal["assistant"] = "assistant"
    text: str = ""
    tool_calls: tuple[ToolCallPart, ...] = ()
    reasoning: str | None = None
    """Thinking content, kept apart from visible text."""


class ToolResultMessage(_Message):
    role: Literal["tool"] = "tool"
    call_id: str
    name: str
    content: str
    is_error: bool = False


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolResultMessage,
    Field(discriminator="role"),
]
