"""`WebhookServer`: the webhook ingress, turning signed POSTs into bus events.

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

HTTP is `heron.always_on.http.HttpFront`'s (Starlette on uvicorn): `heron serve` mounts
`asgi_routes` on its one front beside the gateway, under its one body limit; `start` serves
them alone (tests, embedding).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from heron.always_on.http import HttpFront

log = logging.getLogger("heron.always_on.channels.webhook")

Publish = Callable[[BusEvent], Awaitable[bool]]
WakeFilter = Callable[[BusEvent], bool]
"""True when an event should reach the agent (e.g. `should_wake(event, subscriptions)`); it
sees the event with its session set."""
Admit = Callable[[str], "str | None"]
"""Why a session is not served here, or `None` when it is."""
KeySession = Callable[[str], Awaitable["str | None"]]
"""The session that already holds an idempotency key (`BusStore.key_session`), or `None`."""

_PAYLOAD_STATUS = {
    400: HTTPStatus.BAD_REQUEST,
    413: HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
    422: HTTPStatus.UNPROCESSABLE_ENTITY,
}
"""`PayloadError.status` → the answer: malformed, over the size limit, refused JSON."""
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
"""Every method reaches `handle`, which answers 405 with its JSON body."""


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
        self._front: HttpFront | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

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

    # -- HTTP ----------------------------------------------------------------------------------

    def asgi_routes(self) -> list[Any]:
        """The routes of this listener for `heron.always_on.http.HttpFront`: every path, and
        the same path followed by `/<session>`, for any method (405 is answered here)."""
        return self._asgi_routes(list(self.routes))

    def add_routes(self, routes: Sequence[WebhookRoute]) -> list[Any]:
        """Take `routes` too, from now on (the ones `heron serve` mounts once its agent side
        is up, `heron.always_on.intake`); their routes for the `HttpFront`."""
        for route in routes:
            if route.path in self.routes:
                raise ValueError("two webhook routes share a path")
            self.routes[route.path] = route
        return self._asgi_routes([route.path for route in routes])

    def _asgi_routes(self, paths: list[str]) -> list[Any]:
        from starlette.routing import Route

        routes: list[Any] = []
        for path in paths:
            for pattern in (path, path + "/{rest:path}"):
                routes.append(Route(pattern, self._asgi, methods=_METHODS))
        return routes

    async def _asgi(self, request: Any) -> Any:
        from starlette.requests import ClientDisconnect

        try:  # a body too slow to arrive is the front's to answer (`heron.always_on.http`)
            body = await request.body()
        except ClientDisconnect:
            response = self._answer("invalid", HTTPStatus.BAD_REQUEST, error="incomplete request")
        else:
            headers = {name.lower(): value for name, value in request.headers.items()}
            response = await self.handle(
                WebhookRequest(
                    method=request.method, path=request.url.path, headers=headers, body=body
                )
            )
        return _response(response)

    async def start(self) -> None:
        """Listen on `host:port` alone (`heron serve` mounts `asgi_routes` on its one front
        instead); `port` is the bound port afterwards."""
        from heron.always_on.http import HttpFront

        self._front = HttpFront(
            self.asgi_routes(), addresses=[(self.host, self.port)], max_body=self.max_body
        )
        await self._front.start()
        self.port = self._front.addresses[0][1]

    async def aclose(self) -> None:
        if self._front is not None:
            await self._front.aclose()
            self._front = None


def _response(response: WebhookResponse) -> Any:
    """The answer as senders have always seen it: `json.dumps`'s spacing."""
    from starlette.responses import Response

    return Response(
        json.dumps(response.body), status_code=response.status, media_type="application/json"
    )
