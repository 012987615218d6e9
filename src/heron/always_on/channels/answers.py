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

**`/approval`** (`RequestAnswerAdapter`): the answer of a webhook approver to a request heron
sent them (`heron.collaboration.webhook_requests`): `{"token": "<the request's answer_token>",
"decision": "yes" | "no" | "always" | "replace" | "edit", "text": …, "arguments": {…}, "reason": …}`
(or `{"token": …, "answer": <value>}` for a question),
signed with heron's scheme. The token names the request and the approver, so the answer is
decided on the desk as that approver (`webhook:<name>`) and nobody else; a forged, altered or
expired token is refused (401) before anything is decided. The answer: 200 `recorded`, 409
`already answered` (by whom and when), 403 not an approver (any more), 404 no such request,
422 an answer that does not fit the request. No event: the outcome reaches the session through
the request, like every answer.

A card action is not an approval: it carries ids and labels heron wrote itself, never the
presser's text, and grants nothing (approvals are durable requests with approvers).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from email.message import Message
from typing import Any

from heron._support.clock import Clock, RealClock, timestamp
from heron._support.vocabulary import HumanDecision
from heron.always_on.bus.model import BusEvent, Channel, EventContent, EventContext
from heron.always_on.channels.adapters import Handled, PayloadError, WebhookRequest, _json_object
from heron.always_on.channels.mail_inbound import thread_ids
from heron.collaboration.mail_auth import sender_address
from heron.collaboration.outbox import ActionClaim, Outbox, action_data
from heron.collaboration.replies import first_reply_line, reply_text
from heron.collaboration.tokens import TokenError, TokenSigner
from heron.collaboration.webhook_requests import ANSWER_PURPOSE
from heron.humans.desk import RequestDesk
from heron.humans.refusals import AlreadyAnswered, NotAnApprover, RequestError, UnknownRequest
from heron.humans.store import HumanRequest
from heron.safety import signing

__all__ = ["CardActionAdapter", "MailAnswers", "RequestAnswerAdapter", "card_action_event"]


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


def _verify_token(
    request: WebhookRequest,
    secret: bytes,
    now: float,
    window_s: float,
    claim: Callable[[WebhookRequest], object],
    what: str,
) -> str | None:
    """Why a signed post of a heron token is not authentic: its signature first, then the
    token it carries (`claim` reads and checks it); a malformed body is authentic here and
    answered 400 by `to_event`."""
    problem = signing.check(secret, request.body, request.headers, now=now, window_s=window_s)
    if problem is not None:
        return problem
    try:
        claim(request)
    except PayloadError:
        return None
    except (TokenError, LookupError) as exc:
        return f"{what} refused: {exc}"
    return None


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
        return _verify_token(request, secret, now, self.window_s, self._claim, "action token")

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


class RequestAnswerAdapter:
    """The `/approval` webhook: a webhook approver's answer (see the module docstring)."""

    def __init__(
        self,
        desk: RequestDesk,
        signer: TokenSigner,
        *,
        window_s: float = signing.DEFAULT_REPLAY_WINDOW_S,
    ) -> None:
        self.desk = desk
        self.signer = signer
        self.window_s = window_s

    @property
    def name(self) -> str:
        return "approval"

    def verify(self, request: WebhookRequest, secret: bytes, now: float) -> str | None:
        return _verify_token(request, secret, now, self.window_s, self._claim, "answer token")

    def to_event(self, request: WebhookRequest, session: str) -> Handled:
        (request_id, name), payload = self._claim(request)
        extra = set(payload) - {"decision", "text", "arguments", "answer", "reason"}
        if extra:
            raise PayloadError(f"unknown answer fields: {sorted(extra)}")
        reason = payload.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise PayloadError("'reason' must be a string")
        try:
            settled = self._settle(request_id, name, payload, reason)
        except AlreadyAnswered as exc:
            return Handled(409, "already_answered", {"error": str(exc)})
        except NotAnApprover as exc:
            return Handled(403, "refused", {"error": str(exc)})
        except UnknownRequest as exc:
            return Handled(404, "invalid", {"error": str(exc)})
        except RequestError as exc:  # InvalidAnswer: it does not fit the request
            return Handled(422, "invalid", {"error": str(exc)})
        return Handled(200, "recorded", {"request": settled.id, "result": settled.outcome})

    def _settle(
        self, request_id: str, name: str, payload: dict[str, Any], reason: str | None
    ) -> HumanRequest:
        if "answer" in payload:  # a question's value
            return self.desk.answer(
                request_id, payload["answer"], channel="webhook", name=name, reason=reason
            )
        fields: dict[str, Any] = {k: payload[k] for k in ("text", "arguments") if k in payload}
        try:
            decision = HumanDecision.from_data({"kind": payload.get("decision"), **fields})
        except (TypeError, ValueError) as exc:
            raise PayloadError(f"not a decision: {exc}") from exc
        return self.desk.decide(request_id, decision, channel="webhook", name=name, reason=reason)

    def _claim(self, request: WebhookRequest) -> tuple[tuple[str, str], dict[str, Any]]:
        payload = _json_object(request.body)
        token = payload.pop("token", None)
        if not isinstance(token, str) or not token:
            raise PayloadError("an answer needs the request's 'token'")
        claim = self.signer.verify(token, ANSWER_PURPOSE)
        request_id, approver = claim.parts
        return (request_id, approver.removeprefix("webhook:")), payload


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
