"""The one event model for everything asynchronous that can wake an agent.

User input and interrupts, late tool results, timer fires, background-job output and exit,
mail, webhooks, messages from other agents, approval answers and system events are all
`BusEvent`s on one timeline. Each says who sent it (`source`), how it arrived (`channel`), what
it says (`content`), what it relates to (`context`), how urgent it is, and carries an
idempotency key so a redelivery is recognised.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from heron._support.limits import check_value, clean_text, clean_value
from heron._support.timefmt import utc_rfc3339

Source = Literal["user", "contact", "stranger", "system", "agent", "tool"]
"""`user` is the operator; `contact` a known third party; `stranger` an unknown one."""

Channel = Literal[
    "cli",
    "web",
    "voice",
    "sms",
    "im",
    "mail",
    "webhook",
    "timer",
    "async_tool",
    "shell_monitor",
    "agent",
    "system",
]

Urgency = Literal["urgent", "normal", "low"]

EventKind = Literal[
    "user.input",
    "user.interrupt",
    "supervisor.instruction",
    "agent.input",
    "agent.interrupt",
    "tool.progress",
    "tool.result",
    "timer.trigger",
    "job.output",
    "job.exit",
    "job.lost",
    "mail.received",
    "webhook.received",
    "im.message",
    "approval.answer",
    "system.user_inactive",
    "system.process_timeout",
    "system.resource_alert",
    "system.heartbeat",
    "system.dead_letter",
]

URGENT_KINDS: frozenset[str] = frozenset(
    {"user.interrupt", "supervisor.instruction", "agent.interrupt"}
)
"""Kinds that interrupt the running step by default (the spec's urgency table)."""

THIRD_PARTY_SOURCES: frozenset[str] = frozenset({"contact", "stranger"})


def _now() -> str:
    return utc_rfc3339(time.time(), precision="milliseconds")


def _clean_text(value: Any) -> Any:
    """Text from outside (a mail header's undecodable bytes) gets the documented replacement
    (`heron._support.limits.clean_text`), so every event can be stored and rendered."""
    return clean_text(value) if isinstance(value, str) else value


class EventContent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    text: str = ""
    needs_reply: bool = False
    data: dict[str, Any] = Field(default_factory=dict)
    """Structured payload with enough context to act without re-querying; within the input
    limits (`heron._support.limits`), its text cleaned like `text`."""

    _text = field_validator("text")(_clean_text)

    @field_validator("data")
    @classmethod
    def _within_limits(cls, data: dict[str, Any]) -> dict[str, Any]:
        check_value(data, strict_text=False)  # an `InputRejected` is a `ValueError`
        cleaned: dict[str, Any] = clean_value(data)
        return cleaned


class EventContext(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    _text = field_validator("*")(_clean_text)
    thread: str | None = None
    reply_to: str | None = None
    related_task: str | None = None
    call_id: str | None = None
    """For late tool results and progress: the model call they belong to."""


class BusEvent(BaseModel):
    """One event on the timeline. Immutable once published."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    kind: EventKind
    source: Source
    channel: Channel
    content: EventContent = Field(default_factory=EventContent)
    context: EventContext = Field(default_factory=EventContext)
    urgency: Urgency = "normal"
    idempotency_key: str | None = None
    """Publishing twice with the same key (per session) stores the event once."""
    session: str = "default"
    timestamp: str = Field(default_factory=_now)
    side_question: bool = False
    """Set by a user or channel: answer in a side session, in parallel with the main task."""

    _text = field_validator("id", "idempotency_key", "session", "timestamp")(_clean_text)

    @property
    def third_party(self) -> bool:
        """Content from outside the operator: framed as data, never as instructions."""
        return self.source in THIRD_PARTY_SOURCES
