"""The OAuth callback route: where the operator's browser lands after consenting.

`oauth_callback_routes(desk)` is one Starlette route (`GET /mcp/oauth/callback`) that the
gateway mounts under `[gateway] public_url` and `heron mcp login` serves on loopback when there
is no gateway (`desk` may be a function giving the desk: `heron serve` opens its desk after its
routes are built). The redirect it receives answers the login's consent request on the desk
(`heron.mcp.auth.desk_consent`):

- the request is the active consent request whose OAuth `state` this is (stored as a SHA-256);
  a redirect with no `state`, or one that belongs to no waiting login, is answered 400 and
  settles nothing — the state is the proof the browser took part in this login;
- the whole redirected address is sealed to the waiting process's key before it is stored;
- the first answer wins (the store's compare-and-set): a second redirect, or one after an
  operator pasted the address, is answered 409.

A refused consent (`error=access_denied`) is an answer too: the waiting login reads it and
fails as refused. Nothing of the query is logged or shown back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route

from heron.humans.desk import RequestDesk
from heron.humans.sealing import seal, sealing_key_of
from heron.humans.store import Settlement
from heron.mcp.auth.desk_consent import MAX_ADDRESS_CHARS, pending_consent

__all__ = ["CALLBACK_PATH", "REDIRECT_BY", "callback_uri", "oauth_callback_routes"]

CALLBACK_PATH: Final = "/mcp/oauth/callback"
REDIRECT_BY: Final = "gateway:oauth-redirect"
"""Who answered a consent request through the callback (the browser's redirect)."""


def callback_uri(public_url: str) -> str:
    """The redirect URI of logins under the gateway's public address."""
    return public_url.rstrip("/") + CALLBACK_PATH


def _page(status: int, text: str) -> HTMLResponse:
    body = (
        "<!doctype html><meta charset=utf-8><title>heron</title>"
        f"<p style='font-family:sans-serif'>{text}</p>"
    )
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def oauth_callback_routes(
    desk: RequestDesk | Callable[[], RequestDesk | None], *, path: str = CALLBACK_PATH
) -> list[Route]:
    """The callback route over `desk` (see the module docstring)."""

    async def callback(request: Request) -> HTMLResponse:
        current = desk() if callable(desk) else desk
        if current is None:
            return _page(503, "heron is not ready to take a login's answer yet.")
        return _answer(current, request.url.query)

    return [Route(path, callback, methods=["GET"])]


def _answer(desk: RequestDesk, query: str) -> HTMLResponse:
    if len(query) > MAX_ADDRESS_CHARS:
        return _page(400, "This address is too long to be a login's answer.")
    states = parse_qs(query).get("state") or []
    if len(states) != 1 or not states[0]:
        return _page(400, "This is not a login heron is waiting for.")
    found = pending_consent(desk, state=states[0])
    if not found:
        return _page(400, "This is not a login heron is waiting for (or it has ended).")
    pending = found[0]
    key = sealing_key_of(pending.schema)
    redirect_uri = pending.arguments.get("redirect_uri")
    if key is None or not isinstance(redirect_uri, str):
        return _page(400, "This login request cannot take an answer here.")
    sealed = seal(f"{redirect_uri}?{query}", key, request_id=pending.id)
    result = desk.store.settle(
        pending.id,
        Settlement(
            status="completed",
            outcome="answered",
            by=REDIRECT_BY,
            at=desk.clock.time(),
            reason="the browser's redirect",
            answer=sealed,
        ),
    )
    if not result.settled:
        return _page(409, "This login was already answered.")
    return _page(200, "heron received the answer. You can close this window.")
