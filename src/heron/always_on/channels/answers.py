"""Answers to heron's own messages, on the channels they come back on: a card's button pressed
(`card.action` events) and a mail reply to a message (marked answered, and a card's button
when its first line names one).

**`/card`** (`CardActionAdapter`): a chat bridge posts `{"token": "<the button's value>",
"by": "<who pressed it>"}`, signed with heron's scheme like every webhook. The token is the
button's signed action token (`heron.collaboration.tokens`): a forged, altered or expired one
is refused (401) before anything is stored. The event goes to the session the card was sent
from; pressing the same button twice is one event (its idempotency key), pressing another
button of the same card is another.

**Mail replies** (`MailAnswers`, run on each mail the Maildir source takes in): a mail whose
`In-Reply-To`/`References` name a message heron sent marks that message answered (and read);
when it is a card, the reply comes from the address it was mailed to, and its first line
outside the quoted text is one of its buttons' labels or ids, the mail becomes that button's
`card.action` event instead of a `mail.received`.

A card action is not an approval: it carries ids and labels heron wrote itself, never the
presser's text, and grants nothing (approvals are durable requests with approvers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from email.message import Message

from heron._support.clock import Clock, RealClock, timestamp
from heron.always_on.bus.model import BusEvent, Channel, EventContent, EventContext
from heron.always_on.channels.adapters import PayloadError, WebhookRequest, _json_object
from heron.always_on.channels.mail_inbound import thread_ids
from heron.collaboration.mail_auth import sender_address
from heron.collaboration.outbox import ActionClaim, Outbox, action_data
from heron.collaboration.replies import first_reply_line, reply_text
from heron.collaboration.tokens import TokenError
from heron.safety import signing

__all__ = ["CardActionAdapter", "MailAnswers", "card_action_event"]


def card_action_event(
    claim: ActionClaim,
    *,
    via: Channel,
    by: str | None,
    user: str,
    when: str,
    session: str | None = None,
) -> BusEvent:
    """The `card.action` event of a press, for the session the card came from."""
    message = claim.message
    who = by or message.to
    return BusEvent(
        kind="card.action",
        source="user" if message.to == user else "contact",
        channel=via,
        session=session or message.session or "default",
        timestamp=when,
        content=EventContent(
            text=(
                f"{who} pressed [{claim.action.label}] (action {claim.action.id}) on the card "
                f"{claim.card.title!r} ({message.id}) via {via}"
            ),
            data=action_data(claim, via=via, by=by),
        ),
        context=EventContext(thread=message.thread, reply_to=message.id),
        idempotency_key=f"card.action:{message.id}:{claim.action.id}",
    )


class CardActionAdapter:
    """The `/card` webhook: a button's signed token posted back (see the module docstring)."""

    def __init__(
        self,
        outbox: Outbox,
        *,
        window_s: float = signing.DEFAULT_REPLAY_WINDOW_S,
        clock: Clock | None = None,
    ) -> None:
        self.outbox = outbox
        self.window_s = window_s
        self.clock: Clock = clock or RealClock()

    @property
    def name(self) -> str:
        return "card"

    def verify(self, request: WebhookRequest, secret: bytes, now: float) -> str | None:
        problem = signing.check(
            secret, request.body, request.headers, now=now, window_s=self.window_s
        )
        if problem is not None:
            return problem
        try:
            self._claim(request)
        except PayloadError:
            return None  # authentic, but malformed: `to_event` answers 400
        except TokenError as exc:
            return f"action token refused: {exc}"
        except LookupError as exc:
            return f"action token refused: {exc}"
        return None

    def to_event(self, request: WebhookRequest, session: str) -> BusEvent:
        claim, by = self._claim(request)
        self.outbox.answered(claim.message.id, via="im")  # a press answers the card
        return card_action_event(
            claim,
            via="im",
            by=by,
            user=self.outbox.user,
            when=timestamp(self.clock),
            session=claim.message.session or session,
        )

    def _claim(self, request: WebhookRequest) -> tuple[ActionClaim, str | None]:
        payload = _json_object(request.body)
        token, by = payload.get("token"), payload.get("by")
        if not isinstance(token, str) or not token:
            raise PayloadError("a card action needs the button's 'token'")
        if by is not None and not isinstance(by, str):
            raise PayloadError("'by' must be a string")
        return self.outbox.claim_action(token), (by[:200] if by else None)


class MailAnswers:
    """Marks the messages mail replies answer, and turns a reply that presses a card's
    button into its `card.action` event (see the module docstring). `requests` sees each
    mail first: an answer to a durable request (`MailRequestAnswers`) is taken in without an
    event — its outcome reaches the session through the request."""

    def __init__(
        self,
        outbox: Outbox,
        *,
        requests: Callable[[Message], Awaitable[bool]] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.outbox = outbox
        self.requests = requests
        self.clock: Clock = clock or RealClock()

    async def __call__(self, mail: Message, event: BusEvent) -> BusEvent | None:
        if self.requests is not None and await self.requests(mail):
            return None
        answered = self.outbox.store.find_by_ref(thread_ids(mail))
        if answered is None:
            return event
        self.outbox.answered(answered.id, via="mail")
        if answered.card is not None and self._from_recipient(mail, answered.to):
            line = first_reply_line(reply_text(mail))
            try:
                claim = self.outbox.action(answered.id, line) if line else None
            except LookupError:
                claim = None
            if claim is not None:
                return card_action_event(
                    claim,
                    via="mail",
                    by=sender_address(mail),
                    user=self.outbox.user,
                    when=event.timestamp,
                    session=event.session,
                )
        data = {**event.content.data, "answers": answered.id}
        return event.model_copy(update={"content": event.content.model_copy(update={"data": data})})

    def _from_recipient(self, mail: Message, name: str) -> bool:
        """The reply comes from the address the card was mailed to (a From header is easily
        forged, but the forger would also need the card's Message-ID)."""
        person = self.outbox.people.get(name)
        address = person.config.mail if person is not None else None
        return bool(address) and sender_address(mail) == (address or "").casefold()
