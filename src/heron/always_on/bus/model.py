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
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from heron._support.limits import check_value, clean_text, clean_value
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
    "system.dead_letter",
    "system.workspace_lost",
]

URGENT_KINDS: frozenset[str] = frozenset(
    {"user.interrupt", "supervisor.instruction", "agent.interrupt"}
)
"""Kinds that interrupt the running step by default (the spec's urgency table)."""

THIRD_PARTY_SOURCES: frozenset[str] = frozenset({"contact", "stranger"})


def _now() -> str:
    return utc_rfc3339(time.time(), precision="milliseconds")


STORED: Final = {"heron_stored": True}
"""Validation context of events read back from a bus store: they were checked (and their text
cleaned) when they were built, before they were stored, so the checks are not run again."""


def _stored(info: ValidationInfo) -> bool:
    context = info.context
    return isinstance(context, dict) and context.get("heron_stored") is True


def _clean_fields(model: BaseModel, names: tuple[str, ...]) -> None:
    """Text from outside (a mail header's undecodable bytes) gets the documented replacement
    (`heron._support.limits.clean_text`) in place, so every event can be stored and rendered.
    One pass over the model's few text fields; ASCII text (nearly all of it) costs a check."""
    for name in names:
        value = getattr(model, name)
        if isinstance(value, str) and not value.isascii():
            cleaned = clean_text(value)
            if cleaned is not value:
                object.__setattr__(model, name, cleaned)  # frozen: still being validated


class EventContent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    text: str = ""
    needs_reply: bool = False
    data: dict[str, Any] = Field(default_factory=dict)
    """Structured payload with enough context to act without re-querying; within the input
    limits (`heron._support.limits`), with known secrets as placeholders and its text cleaned
    like `text`."""

    # Everything that wakes an agent (a webhook body, mail, a job's output) enters the data
    # path here. In this order: the limits first, because masking walks `data` recursively and
    # the check bounds its depth; then every known secret becomes its placeholder, before the
    # event is stored or shown; the text replacement last, so a secret whose value holds
    # undecodable bytes (the environment's `surrogateescape`) is matched before `clean_text`
    # rewrites them as `\xNN`. Events read back from a store had all three when built.
    @model_validator(mode="after")
    def _within_limits(self, info: ValidationInfo) -> EventContent:
        if _stored(info):
            return self
        # An `InputRejected` is a `ValueError`: too deep, too large or non-finite data fails.
        odd = bool(self.data) and check_value(self.data, strict_text=False)
        known = known_secrets()
        if len(known):
            object.__setattr__(self, "text", known.mask(self.text))  # frozen: still validating
            if self.data:
                object.__setattr__(self, "data", known.mask_value(self.data))
        _clean_fields(self, ("text",))
        if odd:
            object.__setattr__(self, "data", clean_value(self.data))
        return self


class EventContext(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    thread: str | None = None
    reply_to: str | None = None
    related_task: str | None = None
    call_id: str | None = None
    """For late tool results and progress: the model call they belong to."""

    @model_validator(mode="after")
    def _clean(self, info: ValidationInfo) -> EventContext:
        if not _stored(info):
            _clean_fields(self, ("thread", "reply_to", "related_task", "call_id"))
        return self


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

    @model_validator(mode="after")
    def _clean(self, info: ValidationInfo) -> BusEvent:
        if not _stored(info):
            _clean_fields(self, ("id", "idempotency_key", "session", "timestamp"))
        return self

    @property
    def third_party(self) -> bool:
        """Content from outside the operator: framed as data, never as instructions."""
        return self.source in THIRD_PARTY_SOURCES
