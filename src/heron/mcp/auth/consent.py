"""The consent step of an OAuth login, behind one small protocol.

The SDK's OAuth client builds the authorization URL (PKCE, state, scopes, resource) and needs
the address the authorization server redirects the operator's browser to. Between the two, a
person consents. `ConsentChannel` is that step:

- `present(request)` shows the authorization URL to the operator (a terminal line, a request
  on the durable desk that reaches their channels);
- `redirected(request)` waits for the redirected address — a callback that reached a listener
  (the callback route of `heron.mcp.auth.callback`, `LoopbackConsent`) or an address the
  operator pasted back (`TerminalConsent`, or any channel of `DeskConsent`).

A `ConsentRequest` carries the OAuth `state` the SDK generated; `parse_redirect` accepts an
address only when its `state` is that request's (so one login's redirect can never complete
another's), and turns an `error=access_denied` redirect into `ConsentRefused`. Who may answer
is `DeskConsent`'s concern (`heron.mcp.auth.desk_consent`: the approvers of `[approvals]`).

Implementations here (`DeskConsent`, what heron's commands use, has its own module):
`TerminalConsent` (URL on stderr, pasted address on stdin),
`LoopbackConsent` (a listener on 127.0.0.1 that receives the browser's redirect) and
`FollowRedirectConsent` (fetches the URL itself and takes the redirect, for authorization
servers that consent automatically: the conformance suite's, and tests').
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, TextIO
from urllib.parse import parse_qs, urlsplit

from mcp.shared.auth import AuthorizationCodeResult

from heron.errors import HeronError

__all__ = [
    "ConsentChannel",
    "ConsentError",
    "ConsentRefused",
    "ConsentRequest",
    "FollowRedirectConsent",
    "LoopbackConsent",
    "TerminalConsent",
    "parse_redirect",
]


class ConsentError(HeronError):
    """The consent step failed: no usable redirect (wrong state, no code, unreachable)."""


class ConsentRefused(ConsentError):
    """The authorization server redirected with an error: the operator (or policy) said no."""

    def __init__(self, error: str, description: str | None = None) -> None:
        self.error = error
        self.description = description
        super().__init__(f"consent refused ({error}{': ' + description if description else ''})")


@dataclass(frozen=True, kw_only=True, slots=True)
class ConsentRequest:
    """One pending consent: what to show and what the redirect must match."""

    request_id: str
    """heron's id of this login request (not the OAuth state, which stays out of logs)."""
    server: str
    """The MCP server (configuration name) the login is for."""
    url: str
    """The authorization URL to open in a browser."""
    state: str
    """The OAuth `state` of this authorization request; the redirect must carry it."""
    redirect_uri: str
    scope: str | None = None
    """The scopes asked for, as the URL says them."""

    @classmethod
    def for_url(cls, server: str, url: str, *, redirect_uri: str) -> ConsentRequest:
        query = parse_qs(urlsplit(url).query)
        return cls(
            request_id=f"login-{secrets.token_hex(6)}",
            server=server,
            url=url,
            state=(query.get("state") or [""])[0],
            redirect_uri=redirect_uri,
            scope=query["scope"][0] if query.get("scope") else None,
        )


class ConsentChannel(Protocol):
    """Shows an authorization URL to an operator and brings back the redirected address."""

    def redirect_uri(self, server: str) -> str | None:
        """The redirect URI this channel receives on (None: the configured one is used)."""
        ...

    async def present(self, request: ConsentRequest) -> None:
        """Show the request to the operator (returns once shown, not once answered)."""
        ...

    async def redirected(self, request: ConsentRequest) -> str:
        """The address the operator's browser was redirected to (a URL or its query)."""
        ...


def parse_redirect(address: str, request: ConsentRequest) -> AuthorizationCodeResult:
    """The authorization code of `address`, checked against `request`.

    Raises `ConsentRefused` for an error redirect, `ConsentError` when the state is not this
    request's or there is no code.
    """
    text = address.strip()
    query = urlsplit(text).query if "://" in text else text.lstrip("?")
    params = {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items()}
    state = params.get("state")
    if not state or not secrets.compare_digest(state, request.state):
        raise ConsentError(
            f"the redirected address does not belong to login request {request.request_id} "
            "(its state does not match)"
        )
    if "error" in params:
        raise ConsentRefused(params["error"], params.get("error_description"))
    code = params.get("code")
    if not code:
        raise ConsentError("the redirected address carries no authorization code")
    return AuthorizationCodeResult(code=code, state=state, iss=params.get("iss"))


async def _stdin_line() -> str:
    # A thread blocked in readline cannot be interrupted; acceptable for an interactive login.
    return await asyncio.to_thread(sys.stdin.readline)


class TerminalConsent:
    """Prints the authorization URL on stderr and reads the redirected address the operator
    pastes back (from the browser's address bar, even if the page there did not load)."""

    def __init__(
        self,
        *,
        out: TextIO | None = None,
        read_line: Callable[[], Awaitable[str]] = _stdin_line,
        redirect_uri: str | None = None,
    ) -> None:
        self._out = out
        self._read_line = read_line
        self._redirect_uri = redirect_uri

    def redirect_uri(self, server: str) -> str | None:
        return self._redirect_uri

    async def present(self, request: ConsentRequest) -> None:
        out = self._out or sys.stderr
        out.write(
            f"\nheron: MCP server {request.server!r} needs your consent "
            f"({request.scope or 'default scopes'}). Open this address:\n\n  {request.url}\n\n"
            "Then paste the address your browser was sent to (it starts with "
            f"{request.redirect_uri}):\n> "
        )
        out.flush()

    async def redirected(self, request: ConsentRequest) -> str:
        line = await self._read_line()
        if not line.strip():
            raise ConsentError("no redirected address was pasted")
        return line


@dataclass(kw_only=True)
class _Waiting:
    request: ConsentRequest
    future: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class LoopbackConsent:
    """Receives the browser's redirect on `http://127.0.0.1:PORT/callback`.

    `open_url` shows or opens the authorization URL (default: print it on stderr; tests pass
    a browser). Start it with `async with` (or `start()`); port 0 takes a free port, but a
    fixed port suits authorization servers that match redirect URIs exactly. A callback whose
    state belongs to no pending request is answered 400 and completes nothing.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        path: str = "/callback",
        open_url: Callable[[ConsentRequest], Awaitable[None]] | None = None,
    ) -> None:
        self._host = host
        self._port = port
        self._path = path
        self._open_url = open_url
        self._server: asyncio.Server | None = None
        self._waiting: dict[str, _Waiting] = {}

    async def __aenter__(self) -> LoopbackConsent:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, self._host, self._port)
            self._port = self._server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
            await server.wait_closed()
        for waiting in self._waiting.values():
            if not waiting.future.done():
                waiting.future.set_exception(ConsentError("the callback listener was closed"))
        self._waiting.clear()

    def redirect_uri(self, server: str) -> str | None:
        if self._server is None:
            raise ConsentError("the loopback listener is not started")
        return f"http://{self._host}:{self._port}{self._path}"

    async def present(self, request: ConsentRequest) -> None:
        self._waiting[request.state] = _Waiting(request=request)
        if self._open_url is not None:
            await self._open_url(request)
        else:
            sys.stderr.write(
                f"\nheron: MCP server {request.server!r} needs your consent. Open:\n\n"
                f"  {request.url}\n\n"
            )
            sys.stderr.flush()

    async def redirected(self, request: ConsentRequest) -> str:
        waiting = self._waiting.get(request.state)
        if waiting is None:
            raise ConsentError(f"login request {request.request_id} was not presented here")
        try:
            return await waiting.future
        finally:
            self._waiting.pop(request.state, None)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        status, body = 404, "Not found."
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            method, target, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            parts = urlsplit(target)
            if method == "GET" and parts.path == self._path:
                state = (parse_qs(parts.query).get("state") or [""])[0]
                waiting = self._waiting.get(state)
                if waiting is None or waiting.future.done():
                    status, body = 400, "This is not a login heron is waiting for."
                else:
                    waiting.future.set_result(f"{self.redirect_uri('')}?{parts.query}")
                    status, body = 200, "heron received the answer. You can close this window."
        except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            status, body = 400, "Bad request."
        payload = body.encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
        writer.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


class FollowRedirectConsent:
    """Consents by fetching the authorization URL and taking its redirect, for authorization
    servers that answer without a person (the conformance suite's scenario servers, tests).

    Never use it against a real authorization server: it is consent without a human.
    """

    def __init__(self, *, redirect_uri: str = "http://localhost:3000/callback") -> None:
        self._redirect_uri = redirect_uri
        self._answers: dict[str, str] = {}

    def redirect_uri(self, server: str) -> str | None:
        return self._redirect_uri

    async def present(self, request: ConsentRequest) -> None:
        import httpx2

        async with httpx2.AsyncClient(follow_redirects=False, timeout=30.0) as http:
            response = await http.get(request.url)
        location = response.headers.get("location")
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            raise ConsentError(
                f"the authorization server answered {response.status_code} instead of "
                "redirecting (it needs a person: use a terminal or loopback consent)"
            )
        self._answers[request.state] = location

    async def redirected(self, request: ConsentRequest) -> str:
        try:
            return self._answers.pop(request.state)
        except KeyError:
            raise ConsentError(f"no redirect for login request {request.request_id}") from None
