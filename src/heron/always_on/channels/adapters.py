"""Webhook adapters: verify a provider's signature and turn its payload into one `BusEvent`.

Every adapter answers two questions about a `WebhookRequest`: is it authentic (`verify`, a
problem string or `None`), and which event does it carry (`to_event`, or `Ignored` when there is
nothing to wake an agent for, like GitHub's `ping`). Payloads are third-party content: the
events say `source="contact"` (a sender listed in `contacts`) or `"stranger"`, never `"user"`,
so the bus frames them as data and a sender cannot speak as the operator.

Two signature schemes, both checked by `heron.safety.signing`:

- **heron's own** (`signing.check`): `X-Heron-Timestamp` (Unix seconds) and
  `X-Heron-Signature: sha256=<hex>` over `"<timestamp>." + body`. A timestamp outside the replay
  window is refused, so a captured request cannot be sent again later; one sent again inside
  the window carries the same idempotency key and is stored once.
- **GitHub's** (`signing.check_github`, `X-Hub-Signature-256: sha256=<hex>` over the body):
  GitHub signs no timestamp, so replay protection is the delivery id (`X-GitHub-Delivery`) as
  idempotency key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from heron._support.limits import InputRejected, RejectKind, parse_json
from heron.always_on.bus.model import BusEvent, EventContent, EventContext
from heron.errors import HeronError
from heron.safety import signing

MAX_TEXT_CHARS = 8_000
"""Longer issue bodies, comments and messages are cut; the event keeps a link to the rest."""


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookRequest:
    """One received HTTP request. Header names are lower case."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class Ignored:
    """An authentic request that carries nothing to wake an agent for."""

    reason: str


@dataclass(frozen=True, slots=True)
class Handled:
    """An authentic request the adapter acted on itself, with no event (an answer to a
    request to a human: its outcome reaches the session through the request): the HTTP
    status and body to answer with."""

    status: int
    outcome: str
    body: Mapping[str, Any]


class PayloadError(HeronError, ValueError):
    """The body is not the shape this adapter expects: answered with `status` — 400 for a body
    that is not JSON (or not UTF-8) or not the expected shape, 413 for one over the input size
    limit, 422 for JSON heron refuses to take in (nested deeper than the input limit, a lone
    surrogate, a number that is not finite). Never stored, never "retry later"."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


_REJECT_STATUS: Mapping[RejectKind, int] = {
    "size": 413,
    "syntax": 400,
    "depth": 422,
    "number": 422,
    "text": 422,
    "type": 422,
}


class Adapter(Protocol):
    """Verifies and translates one provider's webhooks."""

    @property
    def name(self) -> str: ...

    def verify(self, request: WebhookRequest, secret: bytes, now: float) -> str | None:
        """Why the request is not authentic, or `None` when it is."""
        ...

    def to_event(self, request: WebhookRequest, session: str) -> BusEvent | Ignored | Handled:
        """The event the request carries; raises `PayloadError` for a malformed body."""
        ...


# -- adapters -------------------------------------------------------------------------------


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        # The one check of the body against heron's input limits, before anything recurses.
        payload = parse_json(body)
    except InputRejected as exc:
        status = _REJECT_STATUS[exc.kind]
        what = "body is not JSON" if status == 400 else "body refused"
        raise PayloadError(f"{what}: {exc.problem_at('body')}", status=status) from None
    if not isinstance(payload, dict):
        raise PayloadError("body must be a JSON object")
    return payload


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + " […cut]"


def _source(sender: str, contacts: frozenset[str]) -> Literal["contact", "stranger"]:
    return "contact" if sender.casefold() in contacts else "stranger"


def _problem(loc: tuple[int | str, ...], msg: str) -> str:
    return f"{'.'.join(map(str, loc))}: {msg}"


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:32]


class GitHubAdapter:
    """GitHub issue, pull-request and issue-comment events (`X-GitHub-Event`)."""

    EVENTS: frozenset[str] = frozenset({"issues", "pull_request", "issue_comment"})

    def __init__(self, *, contacts: frozenset[str] = frozenset()) -> None:
        """`contacts`: GitHub logins whose events count as from a known contact."""
        self.contacts = frozenset(c.casefold() for c in contacts)

    @property
    def name(self) -> str:
        return "github"

    def verify(self, request: WebhookRequest, secret: bytes, now: float) -> str | None:
        return signing.check_github(secret, request.body, request.headers)

    def to_event(self, request: WebhookRequest, session: str) -> BusEvent | Ignored:
        kind = request.headers.get("x-github-event", "")
        if kind == "ping":
            return Ignored(reason="GitHub ping")
        if kind not in self.EVENTS:
            return Ignored(reason=f"GitHub event {kind or '(none)'} is not handled")
        payload = _json_object(request.body)
        try:
            action = str(payload.get("action", ""))
            repo = str(payload["repository"]["full_name"])
            sender = str(payload["sender"]["login"])
            item = payload["pull_request" if kind == "pull_request" else "issue"]
            number = int(item["number"])
            title = str(item.get("title") or "")
        except (KeyError, TypeError, ValueError) as exc:
            raise PayloadError(f"GitHub {kind} payload lacks {exc}") from None
        what = "pull request" if kind == "pull_request" else "issue"
        data: dict[str, Any] = {
            "provider": "github",
            "event": kind,
            "action": action,
            "repo": repo,
            "number": number,
            "title": title,
            "url": item.get("html_url"),
            "state": item.get("state"),
            "sender": sender,
            "labels": [str(label.get("name")) for label in item.get("labels") or []],
        }
        body = item.get("body") or ""
        if kind == "issue_comment":
            comment = payload.get("comment") or {}
            body = comment.get("body") or ""
            data["comment_url"] = comment.get("html_url")
            headline = f"GitHub comment {action} on {what} {repo}#{number} by {sender}: {title}"
        else:
            headline = f"GitHub {what} {action} {repo}#{number} by {sender}: {title}"
        if kind == "pull_request":
            data["merged"] = item.get("merged")
            data["head"] = (item.get("head") or {}).get("ref")
            data["base"] = (item.get("base") or {}).get("ref")
        delivery = request.headers.get("x-github-delivery") or _digest(request.body)
        return BusEvent(
            kind="webhook.received",
            source=_source(sender, self.contacts),
            channel="webhook",
            session=session,
            content=EventContent(text=_cut(f"{headline}\n\n{body}".rstrip()), data=data),
            context=EventContext(thread=f"github:{repo}#{number}"),
            idempotency_key=f"github:{delivery}",
        )


class _ImSender(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    name: str = ""


class _ImMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    platform: str
    message_id: str
    sender: _ImSender
    text: str
    chat: str | None = None
    thread: str | None = None
    reply_to: str | None = None


class ImAdapter:
    """A generic instant-message shape, signed with heron's scheme::

    {"platform": "slack", "message_id": "m1", "sender": {"id": "U1", "name": "Ana"},
     "chat": "C7", "thread": "t3", "reply_to": "m0", "text": "hello"}
    """

    def __init__(
        self,
        *,
        contacts: frozenset[str] = frozenset(),
        window_s: float = signing.DEFAULT_REPLAY_WINDOW_S,
    ) -> None:
        """`contacts`: sender ids (or `platform:id`) that count as known contacts."""
        self.contacts = frozenset(c.casefold() for c in contacts)
        self.window_s = window_s

    @property
    def name(self) -> str:
        return "im"

    def verify(self, request: WebhookRequest, secret: bytes, now: float) -> str | None:
        return signing.check(secret, request.body, request.headers, now=now, window_s=self.window_s)

    def to_event(self, request: WebhookRequest, session: str) -> BusEvent | Ignored:
        try:
            message = _ImMessage.model_validate(_json_object(request.body))
        except ValidationError as exc:
            problems = "; ".join(_problem(e["loc"], e["msg"]) for e in exc.errors())
            raise PayloadError(f"not an IM message: {problems}") from None
        qualified = f"{message.platform}:{message.sender.id}"
        source = _source(message.sender.id, self.contacts)
        if source == "stranger":
            source = _source(qualified, self.contacts)
        return BusEvent(
            kind="im.message",
            source=source,
            channel="im",
            session=session,
            content=EventContent(
                text=_cut(message.text),
                needs_reply=True,
                data={
                    "platform": message.platform,
                    "message_id": message.message_id,
                    "sender_id": message.sender.id,
                    "sender_name": message.sender.name,
                    "chat": message.chat,
                },
            ),
            context=EventContext(
                thread=f"{message.platform}:{message.thread or message.chat or message.sender.id}",
                reply_to=message.reply_to,
            ),
            idempotency_key=f"im:{message.platform}:{message.message_id}",
        )


class GenericAdapter:
    """Any JSON object, signed with heron's scheme. `text` (if a string) becomes the event
    text, the whole object its data. The idempotency key is the payload's `id`, else the
    `Idempotency-Key` header, else a digest of the timestamp and body (so a replay inside the
    window is stored once)."""

    def __init__(
        self,
        *,
        name: str = "generic",
        source: Literal["contact", "stranger"] = "stranger",
        window_s: float = signing.DEFAULT_REPLAY_WINDOW_S,
    ) -> None:
        self._name = name
        self.source: Literal["contact", "stranger"] = source
        self.window_s = window_s

    @property
    def name(self) -> str:
        return self._name

    def verify(self, request: WebhookRequest, secret: bytes, now: float) -> str | None:
        return signing.check(secret, request.body, request.headers, now=now, window_s=self.window_s)

    def to_event(self, request: WebhookRequest, session: str) -> BusEvent | Ignored:
        payload = _json_object(request.body)
        text = payload.get("text")
        # The body is signed, the header is not: a signed `id` is never replaced by a header
        # a replayer may vary.
        key = str(payload["id"]) if "id" in payload else request.headers.get("idempotency-key")
        if key is None:
            stamp = request.headers.get(signing.TIMESTAMP_HEADER.lower(), "").encode()
            key = _digest(stamp + b"." + request.body)
        return BusEvent(
            kind="webhook.received",
            source=self.source,
            channel="webhook",
            session=session,
            content=EventContent(text=_cut(text) if isinstance(text, str) else "", data=payload),
            context=EventContext(thread=f"webhook:{self._name}"),
            idempotency_key=f"webhook:{self._name}:{key}",
        )
