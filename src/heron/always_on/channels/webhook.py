"""`WebhookServer`: a small asyncio HTTP/1.1 listener that turns signed POSTs into bus events.

Each `WebhookRoute` binds a path to an adapter (`heron.always_on.channels.adapters`) and a
secret; the route also answers below its path, where the rest names a session
(`/webhook/<session>`). For every request: the path must be known (404) and the method POST
(405); the body fits `max_body` (413) and comes with a `Content-Length` (411); the adapter
verifies the signature with `heron.safety.signing` (401, without saying which part failed
beyond what the adapter reports); the session is chosen by `route_session`
(`heron.always_on.bus.routing`: the `X-Heron-Session` header, else the path, else the default)
and must be a valid name (400) that `admit` accepts (403); the adapter builds the event (400 for
a malformed body, 413 and 422 for one over the input limits of `heron._support.limits`: too
large, nested too deep, a lone surrogate, a number that is not finite); an idempotency key
already stored in any session (`key_session`) is a duplicate; the `wake` filter (trigger
subscriptions) may hold it back (200 `filtered`); otherwise it is published on the bus — 202
`accepted` once durable, 200 `duplicate` when its idempotency key was seen before. The response
is sent only after the publish returned, so a sender that got 202 may forget the event.
Anything else going wrong (a bug) is logged and answered 503, so the sender retries; the
listener goes on.

One request per connection (`Connection: close`): webhook senders do not pipeline, and it keeps
the parser small. No chunked bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from heron._support.clock import Clock, RealClock, timestamp
from heron.always_on.bus.model import BusEvent
from heron.always_on.bus.routing import (
    SESSION_HEADER,
    SessionAddress,
    check_hosted_name,
    route_session,
)
from heron.always_on.channels.adapters import (
    Adapter,
    Handled,
    Ignored,
    PayloadError,
    WebhookRequest,
)
from heron.errors import HeronError

log = logging.getLogger("heron.always_on.channels.webhook")

Publish = Callable[[BusEvent], Awaitable[bool]]
WakeFilter = Callable[[BusEvent], bool]
"""True when an event should reach the agent (e.g. `should_wake(event, subscriptions)`); it
sees the event with its session set."""
Admit = Callable[[str], "str | None"]
"""Why a session is not served here, or `None` when it is."""
KeySession = Callable[[str], Awaitable["str | None"]]
"""The session that already holds an idempotency key (`BusStore.key_session`), or `None`."""

MAX_HEADERS = 100
_PAYLOAD_STATUS = {
    400: HTTPStatus.BAD_REQUEST,
    413: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    422: HTTPStatus.UNPROCESSABLE_ENTITY,
}
"""`PayloadError.status` → the answer: malformed, over the size limit, refused JSON."""
READ_TIMEOUT_S = 10.0


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookRoute:
    """Requests to `path` are verified with `secret` and translated by `adapter`."""

    path: str
    adapter: Adapter
    secret: bytes


@dataclass(frozen=True, kw_only=True, slots=True)
class WebhookResponse:
    status: int
    body: dict[str, Any]


class _BadRequest(HeronError):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


class WebhookServer:
    """Listens on `host:port` (port 0 picks a free one) until `aclose()`."""

    def __init__(
        self,
        routes: Sequence[WebhookRoute],
        publish: Publish,
        *,
        session: str = "default",
        wake: WakeFilter | None = None,
        quiet_session: str | Callable[[str], str] | None = None,
        admit: Admit | None = None,
        key_session: KeySession | None = None,
        clock: Clock | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body: int = 1 << 20,
    ) -> None:
        self.routes = {route.path: route for route in routes}
        if len(self.routes) != len(routes):
            raise ValueError("two webhook routes share a path")
        self.publish = publish
        self.session = session
        """The default session: where a request that names none goes."""
        self.wake = wake
        self.quiet_session = quiet_session
        """Where events the `wake` filter holds back are kept: one session, or a function of
        the event's session (`None`: dropped)."""
        self.admit = admit
        """Which sessions may be addressed (`None`: every valid name)."""
        self.key_session = key_session
        """Looks an idempotency key up across sessions, so a copy sent to another session is
        a duplicate too (`None`: keys are checked per session only, by the bus)."""
        self.clock: Clock = clock or RealClock()
        self.host = host
        self.port = port
        self.max_body = max_body
        self.counts: Counter[str] = Counter()
        """Outcomes so far: accepted, duplicate, filtered, ignored, rejected, invalid, failed."""
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        """Bind and start accepting; `port` is the bound port afterwards."""
        self._server = await asyncio.start_server(self._client, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def handle(self, request: WebhookRequest) -> WebhookResponse:
        """Everything after HTTP parsing: route, verify, choose the session, translate, filter,
        publish. An unexpected failure is logged and answered 503: the sender retries."""
        try:
            return await self._handle(request)
        except Exception:
            log.exception("webhook %s %s failed", request.method, request.path)
            error = "the event could not be handled; retry later"
            return self._answer("failed", HTTPStatus.SERVICE_UNAVAILABLE, error=error)

    def route(self, path: str) -> tuple[WebhookRoute, str | None] | None:
        """The route for `path` and the session named after it (`/webhook/<session>`)."""
        route = self.routes.get(path)
        if route is not None:
            return route, None
        for prefix, route in self.routes.items():
            if path.startswith(prefix + "/"):
                return route, path[len(prefix) + 1 :] or None
        return None

    async def _handle(self, request: WebhookRequest) -> WebhookResponse:
        found = self.route(request.path)
        if found is None:
            return self._answer("invalid", HTTPStatus.NOT_FOUND, error="no webhook at this path")
        route, in_path = found
        if request.method != "POST":
            return self._answer("invalid", HTTPStatus.METHOD_NOT_ALLOWED, error="POST only")
        problem = route.adapter.verify(request, route.secret, self.clock.time())
        if problem is not None:
            return self._answer("rejected", HTTPStatus.UNAUTHORIZED, error=problem)
        named = request.headers.get(SESSION_HEADER.lower(), "").strip() or None
        session = route_session(SessionAddress(named=named, path=in_path), self.session)
        try:
            check_hosted_name(session)
        except ValueError as exc:
            return self._answer("invalid", HTTPStatus.BAD_REQUEST, error=str(exc))
        refused = self.admit(session) if self.admit is not None else None
        if refused is not None:
            return self._answer("refused", HTTPStatus.FORBIDDEN, error=refused)
        try:
            event = route.adapter.to_event(request, session)
        except PayloadError as exc:  # 400, 413 or 422: refused once, never "retry later"
            return self._answer("invalid", _PAYLOAD_STATUS[exc.status], error=str(exc))
        except (LookupError, TypeError, ValueError, AttributeError) as exc:
            # A payload of the right overall shape with a wrong part deep inside.
            error = f"malformed {route.adapter.name} payload ({type(exc).__name__}: {exc})"
            return self._answer("invalid", HTTPStatus.BAD_REQUEST, error=error)
        if isinstance(event, Ignored):
            return self._answer("ignored", HTTPStatus.OK, reason=event.reason)
        if isinstance(event, Handled):
            return self._answer(event.outcome, HTTPStatus(event.status), **event.body)
        key = event.idempotency_key
        if key is not None and self.key_session is not None:
            try:
                seen = await self.key_session(key)
            except Exception as exc:  # the sender retries; the idempotency key makes that safe
                return self._unstored(exc)
            if seen is not None:
                return self._answer("duplicate", HTTPStatus.OK, key=key)
        event = event.model_copy(update={"timestamp": timestamp(self.clock)})
        filtered = self.wake is not None and not self.wake(event)
        quiet = self.quiet_session
        if filtered and quiet is None:
            return self._answer("filtered", HTTPStatus.OK, reason="no subscription wants it")
        if filtered and quiet is not None:
            stored_in = quiet if isinstance(quiet, str) else quiet(session)
            event = event.model_copy(update={"session": stored_in})
        try:
            stored = await self.publish(event)
        except Exception as exc:  # the sender retries; the idempotency key makes that safe
            return self._unstored(exc)
        if not stored:
            return self._answer("duplicate", HTTPStatus.OK, key=key)
        if filtered:
            return self._answer("filtered", HTTPStatus.OK, stored_in=event.session)
        return self._answer("accepted", HTTPStatus.ACCEPTED, event=event.id)

    def _unstored(self, exc: Exception) -> WebhookResponse:
        error = f"could not store the event ({type(exc).__name__}); retry later"
        return self._answer("failed", HTTPStatus.SERVICE_UNAVAILABLE, error=error)

    def _answer(self, outcome: str, status: HTTPStatus, **body: Any) -> WebhookResponse:
        self.counts[outcome] += 1
        return WebhookResponse(status=status.value, body={"status": outcome, **body})

    # -- HTTP -------------------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                request = await asyncio.wait_for(self._read(reader), READ_TIMEOUT_S)
            except _BadRequest as exc:
                response = self._answer("invalid", exc.status, error=str(exc))
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                response = self._answer(
                    "invalid", HTTPStatus.BAD_REQUEST, error="incomplete request"
                )
            else:
                response = await self.handle(request)  # answers even a bug (503)
            _write(writer, response)
            await writer.drain()
        except ConnectionError:
            pass  # the sender went away; nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _read(self, reader: asyncio.StreamReader) -> WebhookRequest:
        line = (await reader.readuntil(b"\r\n")).decode("latin-1").rstrip("\r\n")
        parts = line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise _BadRequest(HTTPStatus.BAD_REQUEST, "malformed request line")
        method, target, _ = parts
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            raw = (await reader.readuntil(b"\r\n")).decode("latin-1").rstrip("\r\n")
            if not raw:
                break
            name, sep, value = raw.partition(":")
            if not sep:
                raise _BadRequest(HTTPStatus.BAD_REQUEST, "malformed header line")
            headers[name.strip().lower()] = value.strip()
        else:
            raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "too many headers")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise _BadRequest(HTTPStatus.LENGTH_REQUIRED, "send a Content-Length, not chunks")
        length = headers.get("content-length", "0" if method != "POST" else "")
        if not length.isdigit():
            raise _BadRequest(HTTPStatus.LENGTH_REQUIRED, "Content-Length required")
        if int(length) > self.max_body:
            raise _BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large")
        body = await reader.readexactly(int(length))
        path = target.split("?", 1)[0]
        return WebhookRequest(method=method, path=path, headers=headers, body=body)


def _write(writer: asyncio.StreamWriter, response: WebhookResponse) -> None:
    payload = json.dumps(response.body).encode()
    reason = HTTPStatus(response.status).phrase
    head = (
        f"HTTP/1.1 {response.status} {reason}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    )
    writer.write(head.encode("latin-1") + payload)
