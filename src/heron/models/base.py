"""The model interface: one async stream of parts per provider request.

Native-tool models receive `ToolSpec`s and stream complete `ModelToolCall`s; text-protocol
models receive the protocol in the system prompt and stream text the engine parses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from heron.errors import HeronError
from heron.messages import Message
from heron.tools.definition import ToolSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelRequest:
    """One provider request. `messages` is the live history (shared, not copied)."""

    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec]
    """Native tool specs; empty for text-protocol models (the protocol is in `system`)."""
    deferred_tools: Sequence[ToolSpec] = ()
    """Tools the model may load during the conversation (deferred discovery), in an order that
    stays the same for the whole session. An adapter with a deferred-loading mechanism sends
    them all, marked deferred, and leaves the ones also in `tools` there (Anthropic
    `defer_loading`, loaded by the `tool_reference`s of `ToolResultMessage.loaded_tools`);
    every other adapter ignores this field."""
    turn_id: str = ""
    iteration: int = 0


@dataclass(frozen=True, kw_only=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelToolCall:
    """A complete native tool call. `arguments_json` is kept raw so malformed JSON is reported,
    not silently replaced by `{}`."""

    id: str | None
    name: str
    arguments: dict[str, Any] | None = None
    arguments_json: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Usage:
    """Token counts of one model call, as the provider reported them (a stream part)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0


ModelPart = TextDelta | ReasoningDelta | ModelToolCall | Usage


@runtime_checkable
class Model(Protocol):
    """Anything that can answer a `ModelRequest` with a stream of parts."""

    @property
    def name(self) -> str: ...

    @property
    def native_tools(self) -> bool:
        """True when the model takes tool specs and emits structured calls."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]: ...


class ModelError(HeronError, RuntimeError):
    """The model could not answer (provider failure, exhausted script, invalid history)."""


class InvalidHistoryError(ModelError):
    """The history breaks a rule real providers enforce; a real provider would reject it."""


class StreamInterrupted(ModelError):
    """The response stream failed after parts were already emitted.

    `partial_text` is what was received, for the engine to record marked as interrupted.
    Nothing is retried: the emitted parts were already shown.
    """

    def __init__(self, message: str, *, partial_text: str, partial_reasoning: str = "") -> None:
        super().__init__(message)
        self.partial_text = partial_text
        self.partial_reasoning = partial_reasoning
