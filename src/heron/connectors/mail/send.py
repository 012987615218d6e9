"""`send_mail` over SMTP: an irreversible, open-world tool using preflight → confirm.

`mail_tools(config, confirmations)` builds the tool. The first call validates everything and
shows exactly what would be sent — envelope, headers, body as the recipients will see it, size —
with a confirmation token; the second call, with that token and the same arguments, sends once.
The Message-ID is fixed at preflight (`<heron.<action id>@<sender domain>>`), so after an
"outcome unknown" the sent message can be looked up by it.

Delivery uses the standard library's `smtplib` in a worker thread. Failures are told apart by
when they happen: anything before the message data went out (connection, STARTTLS, login, a
refused sender or every recipient refused, a rejection of the data) certainly sent nothing;
a dropped connection or timeout after the data went out leaves the outcome unknown, and nothing
is retried. Credentials are read from environment variables at sending time and never appear in
results, previews or errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import email.policy
import os
import re
import smtplib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Annotated, Any

from pydantic import Field

from heron.safety.idempotency import (
    Confirmations,
    InvalidAction,
    NotPerformed,
    Plan,
    PreflightConfirm,
)
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool

__all__ = ["MailConfig", "address_problem", "deliver", "mail_tools"]

# RFC 5322 addr-spec, the common subset: dot-atom local part, host name domain. No quoted local
# parts, no IP literals, no display names.
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ADDRESS_RE = re.compile(rf"(?P<local>{_ATOM}(?:\.{_ATOM})*)@(?P<domain>{_LABEL}(?:\.{_LABEL})+)")
_SUBJECT_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
# 7-bit transfer encodings (quoted-printable or base64 for non-ASCII text) need no 8BITMIME or
# SMTPUTF8 support from the server; the SMTP policy writes CRLF line endings.
_POLICY = email.policy.SMTP.clone(cte_type="7bit")

Recipients = Annotated[list[str], Field(min_length=1)]
IdempotencyKey = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[\x21-\x7e]+$")]


def address_problem(address: str) -> str | None:
    """Why `address` is not an acceptable plain e-mail address, or None."""
    if "\r" in address or "\n" in address:
        return "contains a line break (CR or LF): header injection refused"
    match = _ADDRESS_RE.fullmatch(address)
    if match is None:
        return "is not a plain address like name@example.com (no display names, no spaces)"
    if len(match["local"]) > 64 or len(address) > 254:
        return "is too long (64 characters before the @, 254 in all)"
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class MailConfig:
    """Where and as whom mail is sent. Credentials are named by environment variable, never
    held here; they are read when a message is sent."""

    host: str
    port: int = 587
    from_addr: str
    username_env: str | None = None
    password_env: str | None = None
    starttls: bool = True
    timeout_s: float = 30.0
    """Per SMTP operation; the whole delivery gets three times this."""
    local_hostname: str | None = None
    """The EHLO name; None lets `smtplib` use this host's fully qualified name."""
    max_recipients: int = 50
    max_body_chars: int = 1_000_000

    def __post_init__(self) -> None:
        problem = address_problem(self.from_addr)
        if problem:
            raise ValueError(f"from_addr {self.from_addr!r} {problem}")
        if (self.username_env is None) != (self.password_env is None):
            raise ValueError("username_env and password_env must be set together")
        if self.username_env and not self.starttls and self.host not in _LOOPBACK:
            raise ValueError("refusing to send SMTP credentials without STARTTLS")


def _problems(
    config: MailConfig, to: list[str], cc: list[str], subject: str, body: str
) -> list[str]:
    found: list[str] = []
    for field_name, addresses in (("to", to), ("cc", cc)):
        for address in addresses:
            if problem := address_problem(address):
                found.append(f"{field_name} address {address!r} {problem}")
    lowered = [address.lower() for address in to + cc]
    repeated = sorted({address for address in lowered if lowered.count(address) > 1})
    if repeated:
        found.append(f"recipients listed more than once: {', '.join(repeated)}")
    if len(lowered) > config.max_recipients:
        found.append(f"{len(lowered)} recipients; at most {config.max_recipients} are allowed")
    if "\r" in subject or "\n" in subject:
        found.append("subject contains a line break (CR or LF): header injection refused")
    elif _SUBJECT_CONTROL_RE.search(subject):
        found.append("subject contains control characters")
    if not subject.strip():
        found.append("subject is empty")
    elif len(subject) > 900:
        found.append(f"subject is {len(subject):,} characters; at most 900 are allowed")
    if len(body) > config.max_body_chars:
        found.append(f"body is {len(body):,} characters; at most {config.max_body_chars:,}")
    if "\0" in body:
        found.append("body contains a NUL character")
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:
        found.append(f"body holds an unpaired surrogate at {exc.start}; not valid text")
    return found


def _message(
    config: MailConfig, to: list[str], cc: list[str], subject: str, body: str, action_id: str
) -> EmailMessage:
    message = EmailMessage(policy=_POLICY)
    message["From"] = config.from_addr
    message["To"] = ", ".join(to)
    if cc:
        message["Cc"] = ", ".join(cc)
    message["Subject"] = subject
    message["Date"] = format_datetime(dt.datetime.now(dt.UTC))
    message["Message-ID"] = f"<heron.{action_id}@{config.from_addr.rpartition('@')[2]}>"
    message.set_content(body)
    return message


def _summary(config: MailConfig, message: EmailMessage, recipients: list[str], size: int) -> str:
    route = f"{config.host}:{config.port}" + (" with STARTTLS" if config.starttls else "")
    if config.username_env:
        route += ", authenticated (credentials from the environment)"
    rcpt = ", ".join(f"<{address}>" for address in recipients)
    lines = [f"Envelope: MAIL FROM:<{config.from_addr}>  RCPT TO:{rcpt}  — via {route}", "Headers:"]
    for name, value in message.items():
        shown = "(the time of sending)" if name == "Date" else str(value)
        lines.append(f"  {name}: {shown}")
    content = str(message.get_content())
    lines += [
        f"Body ({len(content):,} characters, as the recipients will see it; a final line break "
        "is added when missing):",
        "--- body ---",
        content.removesuffix("\n"),
        "--- end of body ---",
        f"Size: {size:,} bytes",
    ]
    return "\n".join(lines)


def _credentials(config: MailConfig) -> tuple[str, str] | None:
    if config.username_env is None or config.password_env is None:
        return None
    user = os.environ.get(config.username_env)
    password = os.environ.get(config.password_env)
    if not user or not password:
        missing = config.username_env if not user else config.password_env
        raise NotPerformed(f"SMTP credentials are configured but ${missing} is not set")
    return user, password


def _deliver(config: MailConfig, payload: bytes, recipients: list[str]) -> dict[str, Any]:
    """Send one message (blocking). Raises `NotPerformed` when certainly nothing was sent."""
    credentials = _credentials(config)
    try:
        smtp = smtplib.SMTP(
            config.host, config.port, local_hostname=config.local_hostname, timeout=config.timeout_s
        )
    except (OSError, smtplib.SMTPException) as exc:
        raise NotPerformed(f"could not connect to {config.host}:{config.port}: {exc}") from None
    data_sent = False
    try:
        smtp.ehlo_or_helo_if_needed()
        if config.starttls:
            smtp.starttls(context=ssl.create_default_context())
            smtp.ehlo()
        if credentials is not None:
            smtp.login(*credentials)
        code, reply = smtp.mail(config.from_addr)
        if code != 250:
            raise NotPerformed(f"the server refused the sender: {code} {_text(reply)}")
        refused: dict[str, str] = {}
        for address in recipients:
            code, reply = smtp.rcpt(address)
            if code not in (250, 251):
                refused[address] = f"{code} {_text(reply)}"
        if len(refused) == len(recipients):
            raise NotPerformed(f"the server refused every recipient: {refused}")
        data_sent = True
        code, reply = smtp.data(payload)
    except smtplib.SMTPDataError as exc:
        raise NotPerformed(
            f"the server rejected the message: {exc.smtp_code} {_text(exc.smtp_error)}"
        ) from None
    except (smtplib.SMTPException, OSError) as exc:
        if data_sent:
            raise
        raise NotPerformed(f"SMTP failed before the message was sent: {exc}") from None
    finally:
        with contextlib.suppress(smtplib.SMTPException, OSError):
            smtp.quit()
        smtp.close()
    accepted = [address for address in recipients if address not in refused]
    return {"accepted": accepted, "refused": refused, "server_reply": f"{code} {_text(reply)}"}


def deliver(config: MailConfig, payload: bytes, recipients: list[str]) -> dict[str, Any]:
    """Send one finished message (`payload`, CRLF line endings) to `recipients` now, blocking:
    `{"accepted", "refused", "server_reply"}`. Raises `NotPerformed` when certainly nothing was
    sent; any other `OSError` or `smtplib.SMTPException` leaves the outcome unknown. For
    senders that compose their own message (heron's mail channel); the model's tool is
    `send_mail`."""
    return _deliver(config, payload, recipients)


def _text(reply: bytes | str) -> str:
    return reply.decode("utf-8", "replace") if isinstance(reply, bytes) else reply


def _plan(
    config: MailConfig, to: list[str], cc: list[str], subject: str, body: str
) -> Callable[[str], Plan]:
    def plan(action_id: str) -> Plan:
        problems = _problems(config, to, cc, subject, body)
        if problems:
            raise InvalidAction("send_mail refused: " + "; ".join(problems))
        message = _message(config, to, cc, subject, body, action_id)
        payload = message.as_bytes()
        recipients = to + cc
        message_id = str(message["Message-ID"])

        async def execute() -> ToolResult:
            outcome = await asyncio.to_thread(_deliver, config, payload, recipients)
            text = (
                f"sent: Message-ID {message_id} accepted by {config.host}:{config.port} for "
                f"{', '.join(outcome['accepted'])} — server reply: {outcome['server_reply']}"
            )
            if outcome["refused"]:
                refused = "; ".join(f"{a}: {why}" for a, why in outcome["refused"].items())
                text += f"\nNOT delivered to these refused recipients: {refused}"
            return ToolResult.ok(text, data={"phase": "sent", "message_id": message_id, **outcome})

        summary = _summary(config, message, recipients, len(payload))
        data = {"message_id": message_id, "recipients": recipients, "size": len(payload)}
        check = f"look for Message-ID {message_id} in the sent folder, or ask a recipient"
        return Plan(summary=summary, execute=execute, data=data, if_unknown=check)

    return plan


def mail_tools(config: MailConfig, confirmations: Confirmations) -> list[Tool]:
    """`send_mail` over `config`, two-phase through `confirmations`."""
    gate = PreflightConfirm("send_mail", confirmations, timeout_s=config.timeout_s * 3)

    @tool(
        irreversible=True,
        open_world=True,
        owner="builtin",
        examples=[
            {"to": ["ana@example.com"], "subject": "Build 1432 failed", "body": "See the log."},
            {
                "to": ["ana@example.com"],
                "cc": ["ops@example.com"],
                "subject": "Build 1432 failed",
                "body": "See the log.",
                "confirmation_token": "cfm-3f2a9c0d1e2b4a5f-1710513000-<rest of the token>",
                "idempotency_key": "build-1432-failure-mail",
            },
        ],
    )
    async def send_mail(
        to: Recipients,
        subject: str,
        body: str,
        cc: list[str] | None = None,
        confirmation_token: str | None = None,
        idempotency_key: IdempotencyKey | None = None,
    ) -> ToolResult:
        """Send a plain-text e-mail. Sending cannot be undone, so it takes two calls: first
        call WITHOUT confirmation_token — nothing is sent; the result shows exactly what would
        be sent (envelope, headers, body, size) and a confirmation token. If that is right,
        call again with the SAME arguments plus that confirmation_token to send it once.

        A token is valid for 10 minutes, for one send, and only for the exact arguments it was
        issued for. Refuses addresses other than plain `name@example.com` (no display names,
        no quoted local parts), duplicate recipients, line breaks in the subject or addresses
        (header injection), and more than 50 recipients. The body is sent as UTF-8 text/plain;
        a final line break is added when missing. If a send ends with "outcome unknown" (the
        connection dropped after the message went out), do not retry: check first (e.g. ask
        the recipient about the Message-ID shown), then start again with a new preflight.
        Pass an idempotency_key to make a retry safe: the same key returns the first result.

        Args:
            to: Recipient addresses, e.g. `["ana@example.com"]`.
            subject: One-line subject.
            body: Plain-text body.
            cc: Copy recipients.
            confirmation_token: The token from this tool's preflight result; omit it to preflight.
            idempotency_key: A unique name for this one message, e.g. `invoice-2024-03-ana`.
        """
        arguments = {"to": to, "subject": subject, "body": body, "cc": cc or []}
        return await gate.run(
            arguments,
            confirmation_token=confirmation_token,
            idempotency_key=idempotency_key,
            plan=_plan(config, to, cc or [], subject, body),
        )

    return [send_mail]
