"""Mail as a channel of the durable requests to a human: a request goes out by mail to each
mail approver, and an approver answers by replying.

**Out** (`MailRequestChannel`, the desk's `mail` channel): one mail per approver `mail:<addr>`
among the request's approvers, From the agent's own identity. Its Message-ID carries a reply
token minted for that request and that approver (`heron.collaboration.replies`), valid until
the request's deadline, so the reply's `In-Reply-To` brings it back.

**In** (`MailRequestAnswers`, run on each mail taken in before it becomes an event): a reply
carrying a reply token is an answer, never a `mail.received` event. It is checked
(`read_mail_answer`: the token, its expiry and single use, the sender, for a high-risk request
a trusted `Authentication-Results`, and a question's answer against the question before the
token is spent), then settled on the desk by `mail:<addr>` (an approval: `approve` → yes,
`deny: reason` → no; a question: the first line is the answer — an OAuth consent's redirected
address, or `no`); the desk checks the approvers again and its compare-and-set lets the first
answer win. Every outcome is told to the sender by mail: recorded, or refused and why —
forged, replayed, late, already answered, not an approver, not this request's answer.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.policy
import logging
import re
from collections.abc import Collection
from email.message import EmailMessage, Message
from email.utils import format_datetime, make_msgid
from typing import Any

from heron._support.clock import Clock, RealClock
from heron._support.timefmt import utc_rfc3339
from heron._support.vocabulary import HumanDecision
from heron.collaboration.identity import AgentIdentity
from heron.collaboration.mail_auth import sender_address
from heron.collaboration.replies import (
    REPLY_PURPOSE,
    MailAnswer,
    MailRefusal,
    read_mail_answer,
    reply_message_id,
)
from heron.collaboration.tokens import TokenSigner
from heron.connectors.mail.send import MailConfig, deliver
from heron.humans.desk import RequestDesk
from heron.humans.refusals import RequestError
from heron.humans.store import HumanRequest
from heron.safety.idempotency import IdempotencyLedger, NotPerformed
from heron.safety.redact import summarize_args

__all__ = ["MailRequestAnswers", "MailRequestChannel"]

log = logging.getLogger("heron.collaboration.mail_requests")
_POLICY = email.policy.SMTP.clone(cte_type="7bit")


class _Mailer:
    def __init__(self, config: MailConfig, identity: AgentIdentity, clock: Clock) -> None:
        self.config = config
        self.identity = identity
        self.clock = clock

    def compose(self, to: str, subject: str, body: str, *, message_id: str) -> EmailMessage:
        mail = EmailMessage(policy=_POLICY)
        mail["From"] = self.identity.from_header
        mail["To"] = to
        mail["Subject"] = subject
        mail["Date"] = format_datetime(dt.datetime.fromtimestamp(self.clock.time(), dt.UTC))
        mail["Message-ID"] = message_id
        mail["Auto-Submitted"] = "auto-generated"
        mail.set_content(f"{body}\n\n-- \n{self.identity.sign_off}\n")
        return mail

    async def send(self, mail: EmailMessage, to: str) -> str:
        try:
            result = await asyncio.to_thread(deliver, self.config, mail.as_bytes(), [to])
        except NotPerformed as exc:
            return f"failed: {exc}"
        except OSError as exc:
            return f"failed: outcome unknown ({type(exc).__name__})"
        return "ok" if not result["refused"] else f"failed: refused {result['refused']}"


class MailRequestChannel:
    """The desk's `mail` channel: the request to each mail approver (module docstring)."""

    name = "mail"

    def __init__(
        self,
        config: MailConfig,
        *,
        identity: AgentIdentity,
        signer: TokenSigner,
        clock: Clock | None = None,
    ) -> None:
        self.clock: Clock = clock or RealClock()
        self.mailer = _Mailer(config, identity, self.clock)
        self.identity = identity
        self.signer = signer

    async def deliver(self, request: HumanRequest) -> str:
        approvers = [a for a in request.approvers if a.startswith("mail:")]
        if not approvers:
            return "failed: no mail approver"
        now = self.clock.time()
        ttl = max((request.deadline or now + 86_400.0) - now, 1.0)
        outcomes = []
        for approver in approvers:
            token = self.signer.mint(REPLY_PURPOSE, (request.id, approver), ttl_s=ttl)
            address = approver.removeprefix("mail:")
            mail = self.mailer.compose(
                address,
                _subject(request),
                _body(request),
                message_id=reply_message_id(token, self.identity.mail_domain),
            )
            outcomes.append(await self.mailer.send(mail, address))
        if any(o == "ok" for o in outcomes):
            return "ok"
        return "; ".join(outcomes)


_HEADLINE_CHARS = 100


def _subject(request: HumanRequest) -> str:
    tag = f"[{request.urgency}] " if request.urgency in ("high", "urgent") else ""
    if request.kind == "approval" and request.tool != "request_human_approval":
        return f"{tag}Approve {request.tool}? ({request.id})"
    return f"{tag}{_headline(request.question)} ({request.id})"


def _headline(question: str) -> str:
    """The question's first sentence, on one line and bounded: the subject says what is
    asked (`MCP server 'tickets' needs your consent for tickets:read`)."""
    first = " ".join(question.split("\n\n", 1)[0].split())
    sentence = re.split(r"(?<=[.?!])\s", first, maxsplit=1)[0].rstrip(".")
    if len(sentence) > _HEADLINE_CHARS:
        sentence = sentence[: _HEADLINE_CHARS - 1].rstrip() + "…"
    return sentence or "Question from the agent"


def _body(request: HumanRequest) -> str:
    lines = [request.question, ""]
    if request.kind == "approval" and request.tool != "request_human_approval":
        lines += [
            f"Tool: {request.tool}",
            f"Arguments: {summarize_args(request.display_arguments)}",
        ]
        if request.risk:
            lines.append(f"Risk: {request.risk}")
        lines.append("")
    if request.deadline is not None:
        lines.append(f"Answer before {utc_rfc3339(request.deadline)}; no answer is never a yes.")
    if request.kind == "approval":
        lines.append("Reply with 'approve' or 'deny: reason' as the first line.")
    elif request.options:
        lines.append(f"Reply with one of {', '.join(request.options)} as the first line.")
    else:
        lines.append("Reply with your answer as the first line.")
    if request.risk == "high":
        lines.append("Only a reply your mail server authenticates (DKIM or DMARC) is accepted.")
    lines.append(f"Request {request.id}")
    return "\n".join(lines)


class MailRequestAnswers:
    """Answers to requests by mail reply (module docstring). `__call__` returns True when the
    mail was such an answer (decided or refused, the sender told either way)."""

    def __init__(
        self,
        desk: RequestDesk,
        channel: MailRequestChannel,
        *,
        ledger: IdempotencyLedger,
        trusted_authserv_ids: Collection[str] = (),
    ) -> None:
        self.desk = desk
        self.channel = channel
        self.ledger = ledger
        self.trusted = tuple(trusted_authserv_ids)

    def _unfit(self, request: HumanRequest, value: Any) -> str | None:
        try:
            self.desk.check_answer(request.id, value)
        except RequestError as exc:
            return str(exc)
        return None

    async def __call__(self, mail: Message) -> bool:
        answer = read_mail_answer(
            mail,
            signer=self.channel.signer,
            ledger=self.ledger,
            trusted_authserv_ids=self.trusted,
            request_of=self.desk.store.get,
            check=self._unfit,
        )
        if answer is None:
            return False
        if isinstance(answer, MailRefusal):
            await self._tell(mail, f"Your answer was not accepted: {answer.reason}.")
            return True
        await self._tell(mail, self._decide(answer))
        return True

    def _decide(self, answer: MailAnswer) -> str:
        name = answer.approver.removeprefix("mail:")
        try:
            if answer.decision is None:
                request = self.desk.answer(
                    answer.request_id, answer.value, channel="mail", name=name
                )
            else:
                request = self.desk.decide(
                    answer.request_id,
                    HumanDecision.yes() if answer.decision.kind == "yes" else HumanDecision.no(),
                    channel="mail",
                    name=name,
                    reason=answer.decision.reason,
                )
        except RequestError as exc:
            return f"Your answer was not accepted: {exc}."
        return f"Recorded: {request.id} {request.outcome} by {request.answered_by}."

    async def _tell(self, mail: Message, text: str) -> None:
        to = sender_address(mail)
        if not to:
            return
        reply = self.channel.mailer.compose(
            to,
            "Re: " + str(mail.get("Subject", "your answer")).removeprefix("Re: "),
            text,
            message_id=make_msgid(domain=self.channel.identity.mail_domain),
        )
        if mail.get("Message-ID"):
            reply["In-Reply-To"] = str(mail["Message-ID"])
        outcome = await self.channel.mailer.send(reply, to)
        if outcome != "ok":
            log.warning("could not tell %s about their answer: %s", to, outcome)
