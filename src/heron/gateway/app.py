"""`Gateway`: the HTTP API, the event streams and the web console of `heron serve`.

The gateway is a set of Starlette routes mounted on the server's one HTTP front
(`heron.always_on.http.HttpFront`, beside the webhooks, under the same body limit) plus what
it adds to the server: a session sink per session that keeps the turn log
(`heron.gateway.eventlog`; opened on the server's session store the first time it is needed,
and made one of that store's companions, so its rows commit with the history) and an
approver channel, `gateway`, so that `[approvals.approvers]
gateway = ["alice"]` lets the principal `alice` answer from the console or the API.

    gateway = Gateway(config)
    server = HeronServer(serve_config, make_agent,
                         session_sink=gateway.sinks(inner), http_routes=gateway.routes(),
                         request_channels=[gateway.channel])
    gateway.server = server
    server.on_close.append(gateway.end_streams)

`routes(extra)` takes more routes to serve on the same app (an OAuth callback): they are
served as given, without the gateway's authentication or its `Host` check.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from starlette.requests import HTTPConnection, Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Match, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from heron._support.clock import Clock, RealClock
from heron.gateway.api import Api, Handler
from heron.gateway.auth import ApiError, Guard, LoginSessions, RateLimiter, TokenBook
from heron.gateway.config import GatewayConfig, Role
from heron.gateway.eventlog import TurnLog, TurnRecorder
from heron.gateway.sqlite_store import SqliteTurnLog
from heron.gateway.stream import Frame, Hub, session_frames
from heron.humans.store import HumanRequest
from heron.turn.events import EventSink

if TYPE_CHECKING:
    from heron.always_on.server import HeronServer
    from heron.telemetry.metrics import MetricsRegistry

__all__ = ["Gateway", "GatewayChannel"]

STATIC = Path(__file__).with_name("static")
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
CONSOLE_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "form-action 'self'"
)


class GatewayChannel:
    """Approvers `gateway:<principal>`: a request is delivered by being in the store, where the
    console and `GET /v1/approvals` show it (live, through the session's event stream)."""

    name = "gateway"

    async def deliver(self, request: HumanRequest) -> str:
        return "ok"


class Gateway:
    """See the module docstring."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        clock: Clock | None = None,
        environ: Mapping[str, str] = os.environ,
        metrics: MetricsRegistry | None = None,
        poll_interval_s: float = 1.0,
    ) -> None:
        self.config = config
        self.clock: Clock = clock or RealClock()
        self.server: HeronServer | None = None
        self.metrics = metrics
        self.poll_interval_s = poll_interval_s
        limits = config.limits
        self.guard = Guard(
            config,
            TokenBook.from_config(config, environ),
            LoginSessions(ttl_s=config.session_ttl_s, clock=self.clock),
            RateLimiter(
                per_minute=limits.requests_per_minute, burst=limits.burst, clock=self.clock
            ),
        )
        self.hub = Hub()
        self._recorder: TurnRecorder | None = None
        self.channel = GatewayChannel()
        self.api = Api(self)
        self.counts: Counter[tuple[str, int]] = Counter()
        self.frames_sent = 0
        self._stopping: asyncio.Event | None = None
        self._watched: Any = None

    # -- what the server is given -------------------------------------------------------------

    def sinks(self, inner: Callable[[str], EventSink] | None = None) -> Callable[[str], EventSink]:
        """The server's `session_sink`: `inner(session)` (if any), then the turn log."""
        return lambda session: self.recorder.sink(
            session, inner(session) if inner is not None else None
        )

    def attach(self) -> None:
        """Join the server's session store (`HeronServer.on_open`): before a session wakes, so
        the results repair writes for calls a dead process left open are logged."""
        _ = self.recorder

    @property
    def recorder(self) -> TurnRecorder:
        """The turn log's recorder, over the running server's session store (opened and made
        a companion of the store on first use: the stores open when the server starts)."""
        if self._recorder is None:
            server = self.server
            if server is None or server.bus is None:
                raise ApiError(503, "heron serve is not running")
            loop = asyncio.get_running_loop()

            def stored(session: str) -> None:
                # From the appending thread, inside its transaction: wake after it.
                loop.call_soon_threadsafe(self.hub.wake, session)

            sessions = server.bus.sessions
            log = open_turn_log(sessions, news=stored)
            self._recorder = TurnRecorder(log, clock=self.clock, stored=stored, live=self.hub.live)
            sessions.companions.append(self._recorder.written)
        return self._recorder

    @property
    def log(self) -> TurnLog:
        return self.recorder.log

    def routes(self, extra: Sequence[BaseRoute] = ()) -> list[BaseRoute]:
        """The gateway's routes, then `extra` (served as given)."""
        routes: list[BaseRoute] = [
            GatewayRoute("/", self._console, methods=["GET"], gateway=self),
            ConsoleFiles("/console", StaticFiles(directory=STATIC), "console", gateway=self),
            GatewayRoute("/healthz", self._open(self.api.healthz), methods=["GET"], gateway=self),
            GatewayRoute("/v1/login", self._open(self.api.login), methods=["POST"], gateway=self),
            SessionRoute(
                "/v1/sessions/{session:path}/events",
                self._guarded("viewer", self._events),
                methods=["GET"],  # a POST or DELETE opened the stream as well
                gateway=self,
            ),
            SessionSocketRoute("/v1/sessions/{session:path}/ws", self._socket, gateway=self),
        ]
        for method, path, role, handler in self.api.table():
            guarded = self._guarded(role, handler)
            routes.append(SessionRoute(path, guarded, methods=[method], gateway=self))
        # A session name may hold `/`, so the deepest routes are tried first: `a/jobs/j/
        # interrupt` is job `j`'s, not the interrupt of a session `a/jobs/j` (encode that one).
        routes.sort(key=lambda r: -str(getattr(r, "path", "")).count("/"))
        return [*routes, *extra]

    # -- serving ------------------------------------------------------------------------------

    def _open(self, handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                response: Response = await handler(request)
            except ApiError as exc:
                response = _refusal(exc)
            return self._sent(request, response)

        return endpoint

    def _guarded(self, need: Role, handler: Handler) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                who = self.guard.check(request, need)
                response = await handler(request, who)
            except ApiError as exc:
                response = _refusal(exc)
            return self._sent(request, response)

        return endpoint

    def _sent(self, request: HTTPConnection, response: Response) -> Response:
        self.counts[(self._route_path(request), response.status_code)] += 1
        for name, value in _HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    async def _console(self, request: Request) -> Response:
        response = FileResponse(STATIC / "index.html", media_type="text/html")
        response.headers["Content-Security-Policy"] = CONSOLE_CSP
        response.headers["X-Frame-Options"] = "DENY"
        return self._sent(request, response)

    @property
    def stopping(self) -> asyncio.Event:
        if self._stopping is None:
            self._stopping = asyncio.Event()
        return self._stopping

    def _frames(self, conn: HTTPConnection) -> AsyncGenerator[list[Frame]]:
        """The frames of the connection's session, from its `Last-Event-ID` (or `?after=`:
        a browser's `EventSource` and `WebSocket` cannot set headers)."""
        server = self.api.running()
        session = self.api.session_name(conn)
        if self.hub.clients >= self.config.limits.max_clients:
            raise ApiError(503, "too many event streams open; retry later")
        if self._watched is not server.bus:
            # This process's publishes wake the streams of their session at once.
            server.bus.watch(lambda event: self.hub.wake(event.session))
            self._watched = server.bus
        return session_frames(
            session,
            bus=server.bus,
            log=self.log,
            hub=self.hub,
            start=conn.headers.get("last-event-id") or conn.query_params.get("after"),
            replay_max=self.config.limits.replay_max,
            poll_interval_s=self.poll_interval_s,
            stopping=self.stopping,
        )

    async def _events(self, request: Request, who: Any) -> Response:
        frames = self._frames(request)

        async def body() -> Any:
            yield ": heron event stream\n\n"
            async for chunk in frames:
                self.frames_sent += len(chunk)
                yield "".join(frame.encode() for frame in chunk)

        return StreamingResponse(
            body(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def _socket(self, websocket: WebSocket) -> None:
        """`GET /v1/sessions/{session}/ws`: the frames of the event stream, one JSON text
        message each (`{"event", "id", "data"}`, `id` null for a live frame), with the same
        cursor, replay and resync rules. A refusal is the HTTP answer to the handshake."""
        try:
            self.guard.check(websocket, "viewer", socket=True)
            frames = self._frames(websocket)
        except ApiError as exc:
            refusal = _refusal(exc)
            self.counts[(self._route_path(websocket), refusal.status_code)] += 1
            await websocket.send_denial_response(refusal)
            return
        self.counts[(self._route_path(websocket), 101)] += 1
        await websocket.accept()

        async def send() -> None:
            async for chunk in frames:
                self.frames_sent += len(chunk)
                for frame in chunk:
                    await websocket.send_text(frame.message())

        async def gone() -> None:
            while (await websocket.receive())["type"] != "websocket.disconnect":
                pass  # the client has nothing to say; only its going away matters

        sending, watching = asyncio.ensure_future(send()), asyncio.ensure_future(gone())
        try:
            await asyncio.wait([sending, watching], return_when=asyncio.FIRST_COMPLETED)
            left = watching.done()
        finally:
            for task in (sending, watching):
                task.cancel()
            await asyncio.gather(sending, watching, return_exceptions=True)
            await frames.aclose()
        if not left:  # the stream ended: the server is stopping
            with contextlib.suppress(RuntimeError, OSError):
                await websocket.close(1001, "the server is stopping")

    def _route_path(self, conn: HTTPConnection) -> str:
        return str(getattr(conn.scope.get("route"), "path", "?"))

    # -- metrics --------------------------------------------------------------------------------

    def render_metrics(self) -> str:
        """The process's tool and model metrics, and the gateway's own."""
        out = [self.metrics.render_prometheus().rstrip("\n")] if self.metrics is not None else []
        out += [
            "# HELP heron_gateway_requests_total Gateway requests, by route and status.",
            "# TYPE heron_gateway_requests_total counter",
            *(
                f'heron_gateway_requests_total{{route="{path}",status="{status}"}} {n}'
                for (path, status), n in sorted(self.counts.items())
            ),
            "# HELP heron_gateway_stream_clients Event streams open now.",
            "# TYPE heron_gateway_stream_clients gauge",
            f"heron_gateway_stream_clients {self.hub.clients}",
            "# HELP heron_gateway_frames_total Event-stream frames sent.",
            "# TYPE heron_gateway_frames_total counter",
            f"heron_gateway_frames_total {self.frames_sent}",
        ]
        return "\n".join(out) + "\n"

    def end_streams(self) -> None:
        """Ends every event stream at once (the server is closing: its HTTP front waits for
        open responses)."""
        self.stopping.set()
        self.hub.wake_all()

    def close(self) -> None:
        """Ends every stream and closes the turn log (the connection it shares stays open: its
        session store closes it)."""
        self.end_streams()
        if self._recorder is not None:
            self._recorder.log.close()


def open_turn_log(sessions: Any, *, news: Callable[[str], None] | None = None) -> TurnLog:
    """The turn log on the database of `sessions` (SQLite: its connection; PostgreSQL: its
    pool). PostgreSQL: `news(session)` is called, from a thread, whenever a worker (this one
    too) committed records of `session`."""
    if hasattr(sessions, "conn"):
        return SqliteTurnLog(sessions.conn)
    from heron.gateway.postgres_store import PostgresTurnLog

    return PostgresTurnLog(sessions.pool, news=news)


class _Gated(BaseRoute):
    """A route of the gateway's: a request for a host it does not serve is refused (421)
    before anything of the route runs, WebSocket handshakes and static files included (the
    webhooks beside it are signed, and their senders may name any host). Refusals here are
    counted as the endpoints' answers are."""

    path: str

    def __init__(self, *args: Any, gateway: Gateway, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gateway = gateway

    def refuse(self, scope: Scope) -> None:
        """`ApiError` for a request the route does not run."""
        self.gateway.guard.served.check_host(HTTPConnection(scope))

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            self.refuse(scope)
        except ApiError as exc:
            refusal = self.gateway._sent(HTTPConnection(scope), _refusal(exc))
            if scope["type"] == "websocket":
                await WebSocket(scope, receive, send).send_denial_response(refusal)
            else:
                await refusal(scope, receive, send)
            return
        await super().handle(scope, receive, send)


class GatewayRoute(_Gated, Route):
    """A route whose wrong method is answered in JSON, as every other error (Starlette's is
    plain text)."""

    def refuse(self, scope: Scope) -> None:
        super().refuse(scope)
        if self.methods and scope["method"] not in self.methods:
            allow = ", ".join(sorted(self.methods))
            error = f"method {scope['method']} is not allowed here (allowed: {allow})"
            raise ApiError(405, error, headers={"Allow": allow})


class ConsoleFiles(_Gated, Mount):
    """The console's static files."""


class SessionRoute(GatewayRoute):
    """A route whose `{session:path}` may hold a `/`: written as is where the rest of the path
    still tells the route (`/v1/sessions/team/a/messages`), or percent-encoded as `%2F`, which
    always works (`/v1/sessions/team%2Fa`: the session `team/a` itself, not the route `…/a`).
    Routes are matched against the path with `%2F` still encoded; `Api.session_name` decodes
    it."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return super().matches(encoded_slashes(scope))


class SessionSocketRoute(_Gated, WebSocketRoute):
    """`SessionRoute` for a WebSocket."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return super().matches(encoded_slashes(scope))


def encoded_slashes(scope: Scope) -> Scope:
    """`scope` with its path decoded except for `%2F` (ASGI servers decode it to `/`, which
    would make a name's slash a separator)."""
    raw: bytes | None = scope.get("raw_path")
    if not raw or b"%2f" not in raw.lower():
        return scope
    text = raw.decode("latin-1").partition("?")[0]
    path = "%2F".join(unquote(part) for part in re.split("%2[fF]", text))
    return {**scope, "path": path}


def _refusal(exc: ApiError) -> Response:
    return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)
