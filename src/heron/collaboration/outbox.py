"""`Outbox`: where every message to a person is recorded, routed and delivered, and where
answers and opens update its read state.

**Record first.** A message is stored (with its one id and its thread) before any channel is
tried; the store is the console channel, so every message is on the console at once.

**Channels by urgency and preference.** `[user] channels` (or `[people.NAME] channels`) lists
the person's channels in order; urgency picks from it:

- `low`: the console only;
- `normal`: the first channel of the list (just the console, when that is first);
- `high`: the first channel that pushes (anything but the console), and the console;
- `urgent`: like `high`; then, while it stays unread, the next pushing channel after
  `recall_after_s`, and so on down the list (recall).

A push that fails falls through to the next pushing channel at once.

**Quiet hours.** Inside a person's quiet hours nothing is pushed: the console has the message,
and the pushes are due when the quiet hours end. An urgent message breaks quiet hours unless
`urgent_breaks_quiet = false`. A message read or answered meanwhile is not pushed any more.

**Read state.** `opened` (the console, the web) marks a message read; `answered` (a reply on
any channel, a card's button) marks it answered and read. No tracking pixels.

`tick()` delivers what has come due (quiet hours over, recalls); `heron serve` runs it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from heron._support.clock import Clock, RealClock
from heron._support.vocabulary import Urgency
from heron.collaboration.cards import ButtonAction, Card
from heron.collaboration.channels import OutboundChannel, Outgoing
from heron.collaboration.config import PersonConfig
from heron.collaboration.identity import AgentIdentity
from heron.collaboration.store import (
    Attachment,
    Delivery,
    MessageKind,
    MessageStore,
    StoredMessage,
)
from heron.collaboration.tokens import TokenError, TokenSigner
from heron.errors import HeronError

__all__ = [
    "ActionClaim",
    "Outbox",
    "OutboxError",
    "Person",
    "Plan",
    "action_data",
    "plan_channels",
]


class OutboxError(HeronError, ValueError):
    """A message that cannot be sent as asked (unknown person, a channel they lack)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Person:
    """Someone the agent may write to: a name and where they are reached."""

    name: str
    config: PersonConfig = field(default_factory=PersonConfig)

    def address(self, channel: str) -> str | None:
        return None if channel == "console" else getattr(self.config, channel, None)


@dataclass(frozen=True, kw_only=True, slots=True)
class Plan:
    """Where one message goes: `now` at once, then `later` (from `due_at` on, one at a time:
    the end of quiet hours, then the recall chain of an urgent message)."""

    now: tuple[str, ...]
    later: tuple[str, ...] = ()
    due_at: float | None = None


def plan_channels(
    person: Person, urgency: Urgency, *, now: float, available: Sequence[str]
) -> Plan:
    """The channels for a message (see the module docstring). `available`: the channels this
    process can deliver on (the console always)."""
    listed: list[str] = [c for c in person.config.channels if c == "console" or c in available]
    pushing: list[str] = [c for c in listed if c != "console"]
    wanted: list[str]
    if urgency == "low" or not listed:
        wanted = []
    elif urgency == "normal":
        wanted = pushing[:1] if listed[0] != "console" else []
    else:
        wanted = pushing  # high: the first that works; urgent: the rest is the recall chain
    quiet = person.config.quiet_hours
    breaks = urgency == "urgent" and person.config.urgent_breaks_quiet
    if wanted and quiet is not None and quiet.contains(now) and not breaks:
        return Plan(now=("console",), later=tuple(wanted), due_at=quiet.ends_after(now))
    return Plan(now=("console", *wanted))


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionClaim:
    """A verified press of a card's button."""

    message: StoredMessage
    action: ButtonAction
    card: Card


class Outbox:
    """See the module docstring."""

    def __init__(
        self,
        store: MessageStore,
        *,
        identity: AgentIdentity | None = None,
        people: Mapping[str, PersonConfig] | None = None,
        user: str = "user",
        channels: Sequence[OutboundChannel] = (),
        signer: TokenSigner | None = None,
        action_ttl_s: float = 7 * 86_400.0,
        clock: Clock | None = None,
    ) -> None:
        """`people`: name → configuration, the user among them under `user` (added with the
        console alone when missing). `channels`: the transports this process has; the
        console is added when missing. `signer` mints the card buttons' tokens (without it,
        cards have no buttons that work outside the console)."""
        from heron.collaboration.channels import ConsoleChannel

        self.store = store
        self.identity = identity or AgentIdentity()
        self.user = user
        configured = dict(people or {})
        configured.setdefault(user, PersonConfig())
        self.people = {name: Person(name=name, config=cfg) for name, cfg in configured.items()}
        self.clock: Clock = clock or RealClock()
        by_name = {c.name: c for c in channels}
        by_name.setdefault("console", ConsoleChannel(clock=self.clock))
        self.channels: dict[str, OutboundChannel] = by_name
        self.signer = signer
        self.action_ttl_s = action_ttl_s

    # -- sending ----------------------------------------------------------------------------

    def person(self, name: str | None) -> Person:
        person = self.people.get(name or self.user)
        if person is None:
            known = ", ".join(sorted(self.people))
            raise OutboxError(f"nobody called {name!r} is configured (known: {known})")
        return person

    async def send(
        self,
        *,
        kind: MessageKind,
        text: str,
        to: str | None = None,
        urgency: Urgency = "normal",
        card: Card | None = None,
        attachments: Sequence[Attachment] = (),
        session: str | None = None,
        thread: str | None = None,
        only: str | None = None,
    ) -> StoredMessage:
        """Record a message, then deliver it as its urgency and the person's preferences say
        (`only`: that channel and the console, whatever they say). Returns it as stored, with
        its deliveries and what is still due."""
        person = self.person(to)
        now = self.clock.time()
        if only is not None:
            if only != "console" and (only not in self.channels or not person.address(only)):
                raise OutboxError(f"{person.name} cannot be reached on {only} here")
            plan = Plan(now=tuple(dict.fromkeys(("console", only))))
        else:
            plan = plan_channels(person, urgency, now=now, available=list(self.channels))
        message = StoredMessage(
            id=f"msg-{uuid.uuid4().hex[:12]}",
            thread=thread or (f"session:{session}" if session else "direct"),
            session=session,
            kind=kind,
            to=person.name,
            text=card.plain_text() if card is not None else text,
            card=card.model_dump(mode="json") if card is not None else None,
            attachments=tuple(attachments),
            urgency=urgency,
            sender=self.identity.display,
            created=now,
        )
        previous = self._previous_ref(message.thread)
        self.store.add(message)
        first_push = [c for c in plan.now if c != "console"]
        await self._deliver(message, person, "console", previous)
        rest: tuple[str, ...] = plan.later
        if first_push:
            rest = await self._push(message, person, first_push, previous)
        if plan.later:
            self.store.schedule(message.id, pending=plan.later, due_at=plan.due_at)
        elif urgency == "urgent" and rest:
            recall = now + person.config.recall_after_s
            self.store.schedule(message.id, pending=rest, due_at=recall)
        stored = self.store.get(message.id)
        assert stored is not None
        return stored

    async def _push(
        self, message: StoredMessage, person: Person, chain: Sequence[str], previous: str | None
    ) -> tuple[str, ...]:
        """Deliver to the first channel of `chain` that works; the channels after it."""
        for index, channel in enumerate(chain):
            if (await self._deliver(message, person, channel, previous)).outcome == "ok":
                return tuple(chain[index + 1 :])
        return ()

    async def _deliver(
        self, message: StoredMessage, person: Person, channel: str, previous: str | None
    ) -> Delivery:
        card = Card.model_validate(message.card) if message.card is not None else None
        out = Outgoing(
            message=message,
            address=person.address(channel),
            identity=self.identity,
            card=card,
            tokens=self._tokens(message, card),
            previous_ref=previous,
        )
        try:
            delivery = await self.channels[channel].send(out)
        except Exception as exc:  # a channel's bug is this delivery's failure, not the send's
            delivery = Delivery(
                channel=channel, outcome=f"failed: {type(exc).__name__}", at=self.clock.time()
            )
        self.store.record_delivery(message.id, delivery)
        return delivery

    def _tokens(self, message: StoredMessage, card: Card | None) -> dict[str, str]:
        if card is None or self.signer is None:
            return {b.id: "" for b in card.buttons} if card is not None else {}
        return {
            b.id: self.signer.mint("action", (message.id, b.id), ttl_s=self.action_ttl_s)
            for b in card.buttons
        }

    def _previous_ref(self, thread: str) -> str | None:
        for earlier in reversed(self.store.list(thread=thread, limit=20)):
            refs = [d.ref for d in earlier.deliveries if d.channel == "mail" and d.ref]
            if refs:
                return refs[-1]
        return None

    # -- what comes due ---------------------------------------------------------------------

    async def tick(self) -> list[StoredMessage]:
        """Deliver every push that has come due (quiet hours over, an unread urgent message's
        recall); returns the messages it acted on, as stored now."""
        done: list[StoredMessage] = []
        now = self.clock.time()
        for message in self.store.take_due(now):
            person = self.people.get(message.to)
            if person is None or not message.pending:
                continue
            quiet = person.config.quiet_hours
            breaks = message.urgency == "urgent" and person.config.urgent_breaks_quiet
            if quiet is not None and quiet.contains(now) and not breaks:
                self.store.schedule(
                    message.id, pending=message.pending, due_at=quiet.ends_after(now)
                )
                continue
            previous = self._previous_ref(message.thread)
            rest = await self._push(message, person, message.pending, previous)
            if message.urgency == "urgent" and rest:
                due = now + person.config.recall_after_s
                self.store.schedule(message.id, pending=rest, due_at=due)
            stored = self.store.get(message.id)
            assert stored is not None
            done.append(stored)
        return done

    def next_due(self) -> float | None:
        return self.store.next_due()

    # -- answers ----------------------------------------------------------------------------

    def opened(self, message_id: str, *, via: str = "console") -> bool:
        """A person opened the message (console, web): it is read."""
        return self.store.mark_read(message_id, via=via, at=self.clock.time())

    def answered(self, message_id: str, *, via: str) -> bool:
        """A reply to the message arrived (any channel): it is answered, and read."""
        return self.store.mark_answered(message_id, via=via, at=self.clock.time())

    def claim_action(self, token: str) -> ActionClaim:
        """The button a token stands for; `TokenError` for a forged, altered or expired one,
        `LookupError` when its message or button is gone."""
        if self.signer is None:
            raise TokenError("this heron mints no action tokens")
        claim = self.signer.verify(token, "action")
        if len(claim.parts) != 2:
            raise TokenError("malformed action token")
        message_id, action_id = claim.parts
        return self.action(message_id, action_id)

    def action(self, message_id: str, action: str) -> ActionClaim:
        """The button `action` (id or label) of the card `message_id`; `LookupError` when there
        is no such card or button."""
        message = self.store.get(message_id)
        if message is None or message.card is None:
            raise LookupError(f"no card {message_id!r}")
        card = Card.model_validate(message.card)
        button = card.button(action)
        if button is None:
            labels = ", ".join(b.label for b in card.buttons) or "none"
            raise LookupError(f"card {message_id} has no action {action!r} (actions: {labels})")
        return ActionClaim(message=message, action=button, card=card)


def action_data(claim: ActionClaim, *, via: str, by: str | None) -> dict[str, Any]:
    """The data of the `card.action` event for a press."""
    return {
        "message_id": claim.message.id,
        "action_id": claim.action.id,
        "label": claim.action.label,
        "title": claim.card.title,
        "via": via,
        "by": by,
    }
