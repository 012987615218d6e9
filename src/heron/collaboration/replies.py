"""Answers that come back by mail: the first line of a reply, and an approver's answer to a
request.

**The first line that counts** is the first non-empty line of the reply's text outside the
quoted part: lines starting with `>` are skipped, and the text ends at the signature (`-- `) or
at the quote a mail client puts before the original (`On … wrote:`, `-----Original
Message-----`, a `From:` header block). A reply to a card whose first line is one of its
buttons' labels presses that button.

**An approver's answer** to a mail about a durable request to a human — to an approval
`approve`, `approve: reason`, `deny: reason` (and the synonyms `yes`, `no`, `ok`, `reject`), to
a question the first line itself (its value: an option, the redirected address of an OAuth
login, JSON when the question's schema is not a string) — is accepted only when:

1. the reply answers a mail heron sent that approver: its `In-Reply-To`/`References` carry a
   reply token (`heron.collaboration.tokens`, purpose `reply`) minted for that request and that
   approver — per approver, so one approver's mail cannot be answered by another;
2. the token verifies and has not expired (a late answer is refused), and is used for the first
   time (`IdempotencyLedger.use_token`: a replayed reply is refused);
3. the From address is the approver's;
4. for a high-risk request, the mail is authenticated by a trusted server
   (`heron.collaboration.mail_auth`): a From header alone is trivially forged;
5. a question's answer fits the question (`check`: the desk's own check, before the token is
   spent, so a refused answer — an OAuth address of another login — loses nothing and the
   approver may reply again).

Every refusal says why, so the sender can be told.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from email.message import EmailMessage, Message
from typing import Any, Literal

from heron.collaboration.mail_auth import check_authentication, sender_address
from heron.collaboration.tokens import TOKEN_PATTERN, TokenError, TokenSigner
from heron.humans.store import HumanRequest
from heron.safety.idempotency import IdempotencyLedger

__all__ = [
    "MailAnswer",
    "MailRefusal",
    "ReplyDecision",
    "first_reply_line",
    "parse_decision",
    "read_mail_answer",
    "reply_message_id",
    "reply_text",
]

REPLY_PURPOSE = "reply"
_TOKEN_IN_ID = re.compile(rf"<heron\.reply\.(?P<token>{TOKEN_PATTERN})@[^<>\s]+>")
_QUOTE_HEAD = re.compile(
    r"^(on .{1,200} wrote:|-{2,}\s*original message\s*-{2,}|_{10,}|from:\s.+@.+)$", re.I
)
_DECISION = re.compile(
    r"^(?P<word>approve|approved|yes|ok|deny|denied|no|reject|rejected)\b\s*"
    r"(?:[:\-–—]\s*)?(?P<reason>.*)$",
    re.I,
)
_YES = {"approve", "approved", "yes", "ok"}


def reply_text(message: Message) -> str:
    """The reply's own text: its first `text/plain` part (`""` when it has none)."""
    part = message
    if message.is_multipart():
        found = next(
            (p for p in message.walk() if p.get_content_type() == "text/plain"),
            None,
        )
        if found is None:
            return ""
        part = found
    if isinstance(part, EmailMessage):
        try:
            return str(part.get_content())
        except (LookupError, ValueError):
            pass
    payload = part.get_payload(decode=True)
    if isinstance(payload, bytes):
        return payload.decode(part.get_content_charset() or "utf-8", "replace")
    return str(part.get_payload())


def first_reply_line(text: str) -> str | None:
    """The first non-empty line outside the quoted text, stripped; `None` when there is
    none."""
    for raw in text.splitlines():
        line = raw.strip()
        if raw.rstrip("\r") == "-- " or line == "--":
            return None
        if line.startswith(">"):
            continue
        if _QUOTE_HEAD.match(line):
            return None
        if line:
            return line
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class ReplyDecision:
    kind: Literal["yes", "no"]
    reason: str | None = None


def parse_decision(line: str) -> ReplyDecision | None:
    """`approve`, `approve: looks right`, `deny: not on Fridays`, … (any case); `None` for
    anything else."""
    match = _DECISION.match(line.strip())
    if match is None:
        return None
    reason = match["reason"].strip() or None
    return ReplyDecision(kind="yes" if match["word"].casefold() in _YES else "no", reason=reason)


def reply_message_id(token: str, domain: str) -> str:
    """The Message-ID of a request's mail to one approver: the reply token, so the reply's
    `In-Reply-To` carries it back."""
    return f"<heron.reply.{token}@{domain}>"


@dataclass(frozen=True, kw_only=True, slots=True)
class MailAnswer:
    """A verified answer: `approver` (`mail:<address>`) decided `decision` on the approval
    `request_id`, or answered its question with `value`."""

    request_id: str
    approver: str
    decision: ReplyDecision | None
    authenticated: bool
    value: Any = None
    """A question's answer (`decision` is then None)."""
    """The mail passed the trusted-server check (required for a high-risk call)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MailRefusal:
    """Why a mail answer was not accepted, for telling the sender; `request_id` when known."""

    reason: str
    request_id: str | None = None


def read_mail_answer(
    message: Message,
    *,
    signer: TokenSigner,
    ledger: IdempotencyLedger,
    trusted_authserv_ids: Collection[str] = (),
    request_of: Callable[[str], HumanRequest | None] = lambda _request_id: None,
    check: Callable[[HumanRequest, Any], str | None] = lambda _request, _value: None,
) -> MailAnswer | MailRefusal | None:
    """The approver's answer a reply carries, a refusal saying why it is not one, or `None`
    when the mail answers no request at all (an ordinary mail). `request_of` looks the request
    up (unknown: read as an approval); `check` says why a question's answer does not fit."""
    references = f"{message.get('In-Reply-To', '')} {message.get('References', '')}"
    tokens = [m["token"] for m in _TOKEN_IN_ID.finditer(references)]
    if not tokens:
        return None
    try:
        claim = signer.verify(tokens[0], REPLY_PURPOSE)
    except TokenError as exc:
        return MailRefusal(reason=f"this reply cannot answer a request: {exc}")
    if len(claim.parts) != 2:
        return MailRefusal(reason="this reply cannot answer a request: malformed token")
    request_id, approver = claim.parts
    if sender_address(message) != approver.removeprefix("mail:").casefold():
        return MailRefusal(
            reason=f"only {approver.removeprefix('mail:')} may answer this mail",
            request_id=request_id,
        )
    request = request_of(request_id)
    line = first_reply_line(reply_text(message))
    value: Any = None
    decision = None
    if request is not None and request.kind == "question":
        value = _question_value(line, request)
        if value is None:
            return MailRefusal(
                reason="the first line of the reply must be your answer"
                + (" (JSON)" if _wants_json(request) else ""),
                request_id=request_id,
            )
    else:
        decision = parse_decision(line or "")
        if decision is None:
            return MailRefusal(
                reason="the first line of the reply must be 'approve' or 'deny: reason'",
                request_id=request_id,
            )
    authenticated = False
    if request is not None and request.risk == "high":
        verdict = check_authentication(message, trusted_authserv_ids)
        if not verdict.passed:
            return MailRefusal(
                reason=f"a high-risk request is answered by mail only from an authenticated "
                f"mail ({verdict.reason})",
                request_id=request_id,
            )
        authenticated = True
    if request is not None and decision is None:
        unfit = check(request, value)
        if unfit is not None:
            return MailRefusal(reason=unfit, request_id=request_id)
    if not ledger.use_token(claim.digest, "mail-reply", claim.expires):
        return MailRefusal(reason="this reply was already used to answer", request_id=request_id)
    return MailAnswer(
        request_id=request_id,
        approver=approver,
        decision=decision,
        authenticated=authenticated,
        value=value,
    )


def _wants_json(request: HumanRequest) -> bool:
    return request.schema is not None and request.schema.get("type", "string") != "string"


def _question_value(line: str | None, request: HumanRequest) -> Any:
    """A question's answer on the reply's first line (None: there is none); a mail client
    may wrap an address in angle brackets."""
    if not line:
        return None
    text = line[1:-1].strip() if line.startswith("<") and line.endswith(">") else line
    if not _wants_json(request):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return None
