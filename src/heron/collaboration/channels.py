"""The outbound channels: how one stored message reaches one person, one small class each.

Every channel takes the same `Outgoing` — the stored message, the address on this channel, the
agent's identity, the card and its buttons' tokens, the thread's references — and returns a
`Delivery` (`ok` or `failed: <why>`, and the channel's own reference for matching answers).
Each shows the agent's identity and the message's plain text, so a card is readable on all of
them:

- `ConsoleChannel`: the message is in the store, where `heron messages` and `heron chat` show
  it; optionally one block on a stream (`heron serve`'s standard error).
- `MailChannel`: SMTP, From the agent's own address, threaded (`Message-ID` from the message
  id, `References` to its thread) so a reply comes back to the right message and session.
- `WebhookChannel`: heron's JSON, signed with heron's scheme (`heron.safety.signing`).
- `ImChannel`: the generic incoming-webhook JSON chat services accept: `{"text": …}`, plus
  `blocks` where a card maps (`heron.collaboration.cards.im_blocks`).
"""

from __future__ import annotations

import abc
import asyncio
import datetime as dt
import email.policy
import hashlib
import json
import os
import smtplib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import format_datetime
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from heron._support.clock import Clock, RealClock
from heron.collaboration.cards import Card, im_blocks
from heron.collaboration.identity import AgentIdentity
from heron.collaboration.store import Delivery, StoredMessage
from heron.connectors.mail.send import MailConfig, deliver
from heron.safety import signing
from heron.safety.idempotency import NotPerformed

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ConsoleChannel",
    "ImChannel",
    "MailChannel",
    "OutboundChannel",
    "Outgoing",
    "WebhookChannel",
    "mail_message_id",
    "post_signed",
    "thread_root_id",
]

_POLICY = email.policy.SMTP.clone(cte_type="7bit")


@dataclass(frozen=True, kw_only=True, slots=True)
class Outgoing:
    """One message on its way to one person on one channel."""

    message: StoredMessage
    address: str | None
    """The person's address on this channel (mail address, URL); `None` on the console."""
    identity: AgentIdentity
    card: Card | None = None
    tokens: Mapping[str, str] = field(default_factory=dict)
    """Button id → its signed action token."""
    previous_ref: str | None = None
    """The mail Message-ID of the thread's previous message, if any."""

    @property
    def attachment_lines(self) -> list[str]:
        where = f" in {self.identity.workspace}" if self.identity.workspace else ""
        return [f"Attachment{where}: {a.path} ({_size(a.bytes)})" for a in self.message.attachments]


class OutboundChannel(Protocol):
    """A way to reach people; `name` is the word `[user] channels` lists."""

    name: str

    async def send(self, out: Outgoing) -> Delivery:
        """Deliver `out`; never raises for a failed delivery (the outcome says it)."""
        ...


def mail_message_id(message_id: str, identity: AgentIdentity) -> str:
    """The mail Message-ID of a stored message: `<heron.msg-…@domain>`."""
    return f"<heron.{message_id}@{identity.mail_domain}>"


def thread_root_id(thread: str, identity: AgentIdentity) -> str:
    """A stable Message-ID for a thread, so every mail of it threads together."""
    digest = hashlib.sha256(thread.encode()).hexdigest()[:16]
    return f"<heron.thread.{digest}@{identity.mail_domain}>"


class ConsoleChannel:
    """Stored is delivered: `heron messages list|show` and `heron chat` show it. With a
    `stream`, each message is also written there."""

    name = "console"

    def __init__(self, stream: TextIO | None = None, *, clock: Clock | None = None) -> None:
        self.stream = stream
        self.clock: Clock = clock or RealClock()

    async def send(self, out: Outgoing) -> Delivery:
        if self.stream is not None:
            self.stream.write(render_console(out.message, out.identity) + "\n")
            self.stream.flush()
        return Delivery(channel=self.name, outcome="ok", at=self.clock.time())


def render_console(message: StoredMessage, identity: AgentIdentity) -> str:
    """A message as the console shows it: a header with its id, urgency, sender and
    recipient, the text, the attachments and the agent's sign-off."""
    state = "read" if message.read else "unread"
    head = (
        f"[heron {message.kind} {message.id} • {message.urgency} • {state}] "
        f"from {message.sender} to {message.to}"
    )
    lines = [head, message.text]
    where = f" in {identity.workspace}" if identity.workspace else ""
    lines += [f"Attachment{where}: {a.path} ({_size(a.bytes)})" for a in message.attachments]
    if message.card is not None and message.card.get("actions"):
        lines.append(f"(act on it: heron messages act {message.id} ACTION)")
    lines.append(f"— {identity.sign_off}")
    return "\n".join(lines)


class MailChannel:
    """SMTP out (`heron.connectors.mail.send.deliver`), as the agent: From its address and
    name, its signature under the text. `on_sent(message_id)` hears each Message-ID sent (the
    server records it in the mail thread index, so replies come back to the session)."""

    name = "mail"

    def __init__(
        self,
        *,
        host: str,
        port: int = 587,
        identity: AgentIdentity,
        username_env: str | None = None,
        password_env: str | None = None,
        starttls: bool = True,
        timeout_s: float = 30.0,
        on_sent: Callable[[str, StoredMessage], None] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = MailConfig(
            host=host,
            port=port,
            from_addr=identity.address,
            username_env=username_env,
            password_env=password_env,
            starttls=starttls,
            timeout_s=timeout_s,
        )
        self.identity = identity
        self.on_sent = on_sent
        self.clock: Clock = clock or RealClock()

    def compose(self, out: Outgoing) -> EmailMessage:
        """The mail for `out` (plain text: the message, attachments by path, how to answer,
        the signature)."""
        message = out.message
        mail = EmailMessage(policy=_POLICY)
        mail["From"] = self.identity.from_header
        mail["To"] = out.address or ""
        mail["Reply-To"] = self.identity.address
        mail["Subject"] = _subject(message, out.card)
        mail["Date"] = format_datetime(dt.datetime.fromtimestamp(self.clock.time(), dt.UTC))
        mail["Message-ID"] = mail_message_id(message.id, self.identity)
        root = thread_root_id(message.thread, self.identity)
        references = [root] + ([out.previous_ref] if out.previous_ref else [])
        mail["In-Reply-To"] = references[-1]
        mail["References"] = " ".join(references)
        mail["X-Heron-Message"] = message.id
        mail["Auto-Submitted"] = "auto-generated"
        body = [message.text]
        if out.attachment_lines:
            body += ["", *out.attachment_lines]
        if out.card is not None and out.card.buttons:
            labels = ", ".join(b.label for b in out.card.buttons)
            body += ["", f"To act, reply with one of these as the first line: {labels}"]
        body += ["", "-- ", self.identity.sign_off, f"ref {message.id}"]
        mail.set_content("\n".join(body))
        return mail

    async def send(self, out: Outgoing) -> Delivery:
        now = self.clock.time()
        if not out.address:
            return Delivery(channel=self.name, outcome="failed: no mail address", at=now)
        mail = self.compose(out)
        message_id = str(mail["Message-ID"])
        try:
            result = await asyncio.to_thread(deliver, self.config, mail.as_bytes(), [out.address])
        except NotPerformed as exc:
            return Delivery(channel=self.name, outcome=f"failed: {exc}", at=now)
        except (OSError, smtplib.SMTPException) as exc:
            why = f"failed: outcome unknown after the data was sent ({type(exc).__name__})"
            return Delivery(channel=self.name, outcome=why, at=now, ref=message_id)
        if result["refused"]:
            why = f"failed: refused {result['refused']}"
            return Delivery(channel=self.name, outcome=why, at=now)
        if self.on_sent is not None:
            self.on_sent(message_id, out.message)
        return Delivery(channel=self.name, outcome="ok", at=now, ref=message_id)


def _subject(message: StoredMessage, card: Card | None) -> str:
    first = card.title if card is not None else (message.text.strip().splitlines() or [""])[0]
    first = " ".join(first.split())
    if len(first) > 78:
        first = first[:77] + "…"
    tag = f"[{message.urgency}] " if message.urgency in ("high", "urgent") else ""
    return tag + (first or f"a message from {message.sender}")


class _SignedPost(abc.ABC):
    """POST a JSON body, signed with heron's scheme when a secret is configured."""

    name = ""

    def __init__(
        self,
        *,
        secret_env: str | None = None,
        timeout_s: float = 10.0,
        clock: Clock | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.secret_env = secret_env
        self.timeout_s = timeout_s
        self.clock: Clock = clock or RealClock()
        self._transport = transport

    @abc.abstractmethod
    def payload(self, out: Outgoing) -> dict[str, Any]:
        """The JSON body this channel posts for ``out``."""

    async def send(self, out: Outgoing) -> Delivery:
        now = self.clock.time()
        if not out.address:
            return Delivery(channel=self.name, outcome=f"failed: no {self.name} URL", at=now)
        outcome = await post_signed(
            out.address,
            self.payload(out),
            idempotency_key=out.message.id,
            secret_env=self.secret_env,
            timeout_s=self.timeout_s,
            clock=self.clock,
            transport=self._transport,
        )
        return Delivery(channel=self.name, outcome=outcome, at=now)


async def post_signed(
    url: str,
    payload: Mapping[str, Any],
    *,
    idempotency_key: str,
    secret_env: str | None,
    timeout_s: float,
    clock: Clock,
    transport: httpx.AsyncBaseTransport | None = None,
) -> str:
    """POST `payload` as JSON, signed with heron's scheme when `secret_env` names a secret:
    `ok`, or `failed: <why>`."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "Idempotency-Key": idempotency_key}
    if secret_env:
        secret = os.environ.get(secret_env, "")
        if not secret:
            return f"failed: ${secret_env} is not set; nothing was sent"
        headers.update(signing.signed_headers(secret.encode(), body, clock.time()))
    import httpx  # at the first post: most of `heron serve`'s start-up otherwise

    try:
        async with httpx.AsyncClient(
            timeout=timeout_s, transport=transport, trust_env=False
        ) as client:
            response = await client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return f"failed: {type(exc).__name__}"
    return "ok" if response.is_success else f"failed: HTTP {response.status_code}"


class WebhookChannel(_SignedPost):
    """heron's JSON: `id`, `thread`, `kind`, `urgency`, `to`, `text` (the plain text),
    `card` and `actions` (each button with its token, for posting back to `/card`),
    `attachments` (paths), `from` (the identity) and `created`."""

    name = "webhook"

    def payload(self, out: Outgoing) -> dict[str, Any]:
        message = out.message
        actions = [
            {"id": b.id, "label": b.label, "token": out.tokens[b.id]}
            for b in (out.card.buttons if out.card is not None else [])
        ]
        return {
            "id": message.id,
            "thread": message.thread,
            "kind": message.kind,
            "urgency": message.urgency,
            "to": message.to,
            "text": message.text,
            "card": message.card,
            "actions": actions,
            "attachments": [{"path": a.path, "bytes": a.bytes} for a in message.attachments],
            "from": out.identity.to_data(),
            "created": message.created,
        }


class ImChannel(_SignedPost):
    """The incoming-webhook shape: `{"text": …}` (the plain text and the sign-off), plus
    `blocks` for a card."""

    name = "im"

    def payload(self, out: Outgoing) -> dict[str, Any]:
        message = out.message
        lines = [message.text, *out.attachment_lines, f"— {out.identity.sign_off}"]
        payload: dict[str, Any] = {"text": "\n".join(lines)}
        if out.card is not None:
            context = f"{out.identity.sign_off} · ref {message.id}"
            blocks = im_blocks(out.card, dict(out.tokens), context=context)
            files = [{"type": "mrkdwn", "text": line} for line in out.attachment_lines]
            if files:
                blocks.insert(-1, {"type": "context", "elements": files})
            payload["blocks"] = blocks
        return payload


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    if count < 1024 * 1024:
        return f"{count / 1024:.0f} KB"
    return f"{count / 1024 / 1024:.1f} MB"


def default_stream() -> TextIO:
    """Standard error: standard output may carry machine-readable events."""
    return sys.stderr
