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

from heron._support.timefmt import utc_rfc3339
from heron._support.vocabulary import Urgency as Urgency
from heron.safety.secrets import known_secrets

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

# `Urgency` (imported above: `heron._support.vocabulary`) is heron's one urgency vocabulary,
# `low < normal < high < urgent`, shared with the messages and requests to people; only
# `urgent` interrupts the running step.

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
    "card.action",
    "system.user_inactive",
    "system.process_timeout",
    "system.resource_alert",
    "system.heartbeat",
]

URGENT_KINDS: frozenset[str] = frozenset(
    {"user.interrupt", "supervisor.instruction", "agent.interrupt"}
)
"""Kinds that interrupt the running step by default (the spec's urgency table)."""

THIRD_PARTY_SOURCES: frozenset[str] = frozenset({"contact", "stranger"})


def _now() -> str:
    return utc_rfc3339(time.time(), precision="milliseconds")


class EventContent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    text: str = ""
    needs_reply: bool = False
    data: dict[str, Any] = Field(default_factory=dict)
    """Structured payload with enough context to act without re-querying."""

    # Everything that wakes an agent (a webhook body, mail, a job's output) enters the data path
    # here: a known secret becomes its placeholder before the event is stored or shown.
    @field_validator("text")
    @classmethod
    def _mask_text(cls, text: str) -> str:
        return known_secrets().mask(text)

    @field_validator("data")
    @classmethod
    def _mask_data(cls, data: dict[str, Any]) -> dict[str, Any]:
        masked: dict[str, Any] = known_secrets().mask_value(data)
        return masked


class EventContext(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
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

    @property
    def third_party(self) -> bool:
        """Content from outside the operator: framed as data, never as instructions."""
        return self.source in THIRD_PARTY_SOURCES
