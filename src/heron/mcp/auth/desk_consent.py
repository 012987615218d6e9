"""The consent step as a request to a human on the durable desk (`heron.humans`).

`DeskConsent` is the `ConsentChannel` of a login that may outlive a terminal: the authorization
URL becomes a question on the `RequestDesk`, delivered to the approvers of `[approvals]` on
their channels (the console — `heron approvals`, the web console over the same store — and
mail), and the redirected address comes back as the question's answer, from whichever channel
is first:

- the browser's redirect reaching the callback route (`heron.mcp.auth.callback`, mounted by the
  gateway at `[gateway] public_url`, or served on loopback by `heron mcp login`);
- the operator pasting the address back (`heron mcp login NAME --paste`, `heron approvals answer
  ID ADDRESS`, the web console, a reply to the request's mail) — only an approver of the
  request may.

The request is bound to the login and its approvers: its arguments carry the SHA-256 of the
OAuth `state` (the callback finds its request by it), its schema binds every answer to that
state (`heron.humans.binding`: the desk refuses an address of another login before settling
anything, on every channel), it is `risk="high"` (a mail answer must pass the mail channel's
trusted-server check, as for a high-risk call: the answer hands heron a credential), and its
answer is sealed to a key that exists only in the memory of the waiting process
(`heron.humans.sealing`), so the authorization code in the address never sits in the store in
the clear. Its ending is read here, never reported to a session (no model sees it).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from typing import Final

from heron._support.vocabulary import ACTIVE_STATUSES
from heron.humans.binding import bound_query, digest
from heron.humans.desk import RequestDesk
from heron.humans.refusals import ended_text
from heron.humans.sealing import SealingError, SealingKey, sealed_schema
from heron.humans.store import HumanRequest
from heron.mcp.auth.consent import ConsentError, ConsentRefused, ConsentRequest

__all__ = [
    "CONSENT_SESSION",
    "CONSENT_TOOL",
    "MAX_ADDRESS_CHARS",
    "DeskConsent",
    "pending_consent",
    "state_digest",
]

CONSENT_TOOL: Final = "mcp_oauth_login"
"""The `tool` of a consent request on the desk."""
CONSENT_SESSION: Final = "#mcp-oauth"
"""The `session` of consent requests: no conversation has such a name (like the `#mcp/<server>`
of an MCP server's input requests), so no turn ever reads them."""
MAX_ADDRESS_CHARS: Final = 8192
"""The longest redirected address taken in (a URL with a code and a state is far shorter)."""
REFUSALS: Final = frozenset({"no", "refuse", "deny"})
"""Answers that refuse the consent at heron's side."""

Announce = Callable[[ConsentRequest, HumanRequest], Awaitable[None]]


def state_digest(state: str) -> str:
    """What a consent request stores of the OAuth `state`."""
    return digest(state)


def pending_consent(
    desk: RequestDesk, *, state: str | None = None, server: str | None = None
) -> list[HumanRequest]:
    """The active consent requests (of the login with this `state`, or for `server`)."""
    desk.expire()
    digest = state_digest(state) if state is not None else None
    found = []
    for request in desk.store.list(statuses=ACTIVE_STATUSES, session=CONSENT_SESSION):
        args = request.arguments
        if request.tool != CONSENT_TOOL:
            continue
        if server is not None and args.get("server") != server:
            continue
        stored = args.get("state_sha256")
        if digest is not None and not (
            isinstance(stored, str) and secrets.compare_digest(stored, digest)
        ):
            continue
        found.append(request)
    return found


def consent_question(request: ConsentRequest) -> str:
    scope = f" for {request.scope}" if request.scope else ""
    return (
        f"MCP server {request.server!r} needs your consent{scope}. Open this address and "
        f"sign in:\n\n  {request.url}\n\nIf the page you land on afterwards is not heron's "
        f"(it starts with {request.redirect_uri}), answer with that whole address: as the "
        f"first line of a reply to this request's mail, or with `heron mcp login "
        f"{request.server} --paste`; answer `no` to refuse."
    )


class DeskConsent:
    """A `ConsentChannel` over the durable desk (see the module docstring).

    `redirect_uri` is where the authorization server sends the browser: the callback route's
    address. `announce` is also told of each opened request (a terminal prints it).
    `timeout_s` is the request's deadline; `poll_s` how often the store is read while waiting
    (an answer may come from another process). `desk=None`: the desk comes later (`open_on`,
    `heron serve` once its own desk with every channel is open); a login waits for it.
    """

    def __init__(
        self,
        desk: RequestDesk | None,
        *,
        redirect_uri: str,
        timeout_s: float = 900.0,
        poll_s: float = 0.25,
        announce: Announce | None = None,
    ) -> None:
        self.desk = desk
        self._opened = asyncio.Event()
        if desk is not None:
            self._opened.set()
        self._redirect_uri = redirect_uri
        self._timeout_s = timeout_s
        self._poll_s = poll_s
        self._announce = announce
        self._pending: dict[str, tuple[str, SealingKey]] = {}

    def open_on(self, desk: RequestDesk) -> None:
        """Ask on `desk` from now on; logins that started before it was open go on."""
        self.desk = desk
        self._opened.set()

    def redirect_uri(self, server: str) -> str | None:
        return self._redirect_uri

    async def _desk(self) -> RequestDesk:
        await self._opened.wait()
        assert self.desk is not None
        return self.desk

    async def present(self, request: ConsentRequest) -> None:
        key = SealingKey()
        desk = await self._desk()
        opened = await desk.open_question(
            session=CONSENT_SESSION,
            call_id=request.request_id,
            question=consent_question(request),
            tool=CONSENT_TOOL,
            arguments={
                "server": request.server,
                "state_sha256": state_digest(request.state),
                "redirect_uri": request.redirect_uri,
                "scope": request.scope,
            },
            schema={
                **sealed_schema(key, maxLength=MAX_ADDRESS_CHARS),
                **bound_query("state", request.state, refusals=REFUSALS),
            },
            urgency="high",
            risk="high",
            timeout_s=self._timeout_s,
            report=False,
        )
        if not opened.active:
            raise ConsentError(f"nobody could be asked for consent: {ended_text(opened)}")
        self._pending[request.state] = (opened.id, key)
        if self._announce is not None:
            await self._announce(request, opened)

    async def redirected(self, request: ConsentRequest) -> str:
        try:
            request_id, key = self._pending.pop(request.state)
        except KeyError:
            raise ConsentError(f"login request {request.request_id} was not presented") from None
        desk = await self._desk()
        try:
            current = desk.get(request_id)
            while current.active:
                await asyncio.sleep(self._poll_s)  # answers come from other processes too
                current = desk.get(request_id)
        except BaseException:
            desk.cancel(request_id, "the login stopped waiting")
            raise
        if current.outcome != "answered":
            raise ConsentError(f"no consent: {ended_text(current)}")
        try:
            address = key.open(current.answer, request_id=request_id)
        except SealingError as exc:
            raise ConsentError(str(exc)) from None
        if address.strip().lower() in REFUSALS:
            raise ConsentRefused("access_denied", f"refused by {current.answered_by}")
        return address
