"""Subscriptions: what inbound traffic may wake the agent, registered by the agent at run time.

Inbound channels (mail, webhooks, instant messages, ...) ask `should_wake(event, subs)` for
each arriving event: `True` means publish it to the agent's session (it wakes the agent);
`False` means store it silently where the agent can look later. The rule:

- the operator's own traffic and the runtime's (user input, supervisor and agent messages,
  tool results, timers, job events, system events) always wakes the agent: it asked for it or
  it is in charge;
- inbound third-party traffic (kinds `mail.received`, `webhook.received`, `im.message`, and
  any event from a `contact` or `stranger`) wakes the agent only if a subscription matches.
  With no subscriptions, nothing from outside wakes it.

A subscription names a `source` (the channel the event arrived on, or `any`) and a filter;
every condition given must hold: event kinds, sender (a case-insensitive glob on
`content.data["sender"]` or `["from"]`, also tried on the address inside `<...>`), a regular
expression searched in the text (in linear time: `heron._support.patterns`), a minimum
urgency, and who sent it (`user`, `contact`, `stranger`, ...). Subscriptions persist in a
`SubscriptionStore` (`SqliteSubscriptionStore` by default); `Subscriptions` is one session's
view, which checks a new subscription before storing it.
"""

from __future__ import annotations

import fnmatch
import re
import secrets
from collections.abc import Iterable
from typing import Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field

from heron._support.patterns import OutsidePattern, PatternError, stored_pattern
from heron._support.vocabulary import URGENCIES
from heron.always_on.bus.model import BusEvent, EventKind, Source, Urgency

SubscriptionSource = Literal["any", "mail", "webhook", "im", "sms", "voice", "web", "agent"]

GATED_KINDS: frozenset[str] = frozenset({"mail.received", "webhook.received", "im.message"})
"""Inbound kinds that wake the agent only through a matching subscription."""

MAX_PATTERN = 500
MAX_SCANNED_TEXT = 20_000
"""Characters of an event's text a filter's regular expression searches."""

_URGENCY_RANK: dict[str, int] = {word: rank for rank, word in enumerate(URGENCIES)}
_KNOWN_KINDS = frozenset(get_args(EventKind))
_ADDRESS = re.compile(r"<([^<>]+)>")


class SubscriptionFilter(BaseModel):
    """Conditions an event must meet (all that are given)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kinds: list[str] | None = Field(
        default=None, description="Event kinds, e.g. ['mail.received']; omit for any kind."
    )
    sender: str | None = Field(
        default=None,
        description="Case-insensitive glob on the sender, e.g. '*@example.com' or 'alice@*'.",
        max_length=200,
    )
    text_regex: str | None = Field(
        default=None,
        description=(
            "Regular expression (RE2: no lookaround or backreferences) searched in the text; "
            "use (?i) to ignore case."
        ),
        max_length=MAX_PATTERN,
    )
    min_urgency: Urgency | None = Field(
        default=None, description="Only events at least this urgent (low < normal < high < urgent)."
    )
    origins: list[Source] | None = Field(
        default=None, description="Who sent it: user, contact (known) or stranger (unknown)."
    )


class Subscription(BaseModel):
    """One stored subscription."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    session: str
    source: SubscriptionSource
    filter: SubscriptionFilter
    note: str = ""
    created_at: float

    def row(self) -> tuple[str, str, str, str, str, float]:
        """The stored row, `(id, session, source, filter, note, created_at)`, the filter as
        JSON: the same for both back ends."""
        filter_json = self.filter.model_dump_json(exclude_none=True)
        return (self.id, self.session, self.source, filter_json, self.note, self.created_at)

    def matches(self, event: BusEvent) -> bool:
        """Whether `event` meets this subscription's source and every condition of its filter."""
        rule = self.filter
        if self.source != "any" and event.channel != self.source:
            return False
        if rule.kinds is not None and event.kind not in rule.kinds:
            return False
        if rule.origins is not None and event.source not in rule.origins:
            return False
        if rule.min_urgency is not None and (
            _URGENCY_RANK[event.urgency] < _URGENCY_RANK[rule.min_urgency]
        ):
            return False
        if rule.sender is not None and not _sender_matches(event, rule.sender):
            return False
        if rule.text_regex is None:
            return True
        return stored_pattern(rule.text_regex).found_in(event.content.text[:MAX_SCANNED_TEXT])


def gated(event: BusEvent) -> bool:
    """Whether `event` needs a matching subscription to wake the agent."""
    return event.kind in GATED_KINDS or event.third_party


def should_wake(event: BusEvent, subscriptions: Iterable[Subscription]) -> bool:
    """Whether `event` should wake the agent (see the module docstring). Pure: pass the
    subscriptions of the session the event is for."""
    return not gated(event) or any(sub.matches(event) for sub in subscriptions)


def _sender_matches(event: BusEvent, pattern: str) -> bool:
    data = event.content.data
    raw = data.get("sender", data.get("from"))
    if not isinstance(raw, str) or not raw:
        return False
    candidates = [raw, *_ADDRESS.findall(raw)]
    wanted = pattern.lower()
    return any(fnmatch.fnmatchcase(c.strip().lower(), wanted) for c in candidates)


class SubscriptionStore(Protocol):
    """Durable subscriptions, per session (synchronous; a back-end failure raises
    `heron.errors.StoreError`)."""

    def insert(self, subscription: Subscription) -> None:
        """Store a new subscription (its id must be new)."""
        ...

    def remove(self, session: str, subscription_id: str) -> bool:
        """Delete a subscription of `session`; `False` if it has none with that id."""
        ...

    def list(self, session: str) -> list[Subscription]:
        """The session's subscriptions, oldest first."""
        ...


class Subscriptions:
    """The subscriptions of one session: checked before they are stored in `store`."""

    def __init__(self, store: SubscriptionStore, *, session: str = "default") -> None:
        self.store = store
        self.session = session

    def add(
        self,
        source: SubscriptionSource,
        rule: SubscriptionFilter,
        *,
        note: str = "",
        now: float,
    ) -> Subscription:
        """Store a subscription; raises `ValueError` for an unknown kind or a bad pattern."""
        unknown = sorted(set(rule.kinds or ()) - _KNOWN_KINDS)
        if unknown:
            raise ValueError(f"unknown event kinds {unknown}; known: {sorted(_KNOWN_KINDS)}")
        if rule.text_regex is not None:
            try:
                OutsidePattern(rule.text_regex)
            except PatternError as exc:
                raise ValueError(f"invalid text_regex: {exc}") from None
        subscription = Subscription(
            id=f"sub-{secrets.token_hex(4)}",
            session=self.session,
            source=source,
            filter=rule,
            note=note,
            created_at=now,
        )
        self.store.insert(subscription)
        return subscription

    def remove(self, subscription_id: str) -> bool:
        """Delete a subscription of this session; `False` if there was none."""
        return self.store.remove(self.session, subscription_id)

    def list(self) -> list[Subscription]:
        """This session's subscriptions, oldest first."""
        return self.store.list(self.session)

    def should_wake(self, event: BusEvent) -> bool:
        """`should_wake` with this session's stored subscriptions."""
        return not gated(event) or any(sub.matches(event) for sub in self.list())
