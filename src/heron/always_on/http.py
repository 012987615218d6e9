"""`HttpFront`: the one HTTP listener of `heron serve`, an ASGI app served by uvicorn.

Every HTTP route of the process — the signed webhooks (`heron.always_on.channels.webhook`),
the gateway's API and web console (`heron.gateway`), and whatever another feature mounts —
is a Starlette route of one app on one uvicorn server, which may listen on several sockets
(`--webhook-port` and `--http-port`). Starlette and uvicorn are a small, well-kept ASGI stack
(the MCP SDK's HTTP transport runs on the same pair), so heron keeps no HTTP parser of its own.

`heron serve` starts the front listener-first (`heron.always_on.intake`): with the webhooks
alone, while the agent side is still being built; the other routes are `mount`ed once it is
up, and until then a request no route takes is answered 503 `starting` (with `Retry-After`)
rather than 404, since its route may be one of those.

One body limit for all of them, applied here before any route reads a byte: a request whose
`Content-Length` is over `max_body`, or whose streamed body grows past it, is answered 413.
The nesting and size rules of JSON are the one `heron._support.limits` check, where each route
parses its body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from heron.errors import HeronError

if TYPE_CHECKING:
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BODY = 1 << 20
"""1 MiB: larger than any webhook or API body heron takes; the JSON limits apply inside it."""


class ListenError(HeronError, OSError):
    """A socket could not be bound (a port in use)."""

    def __init__(self, index: int, address: str, reason: str) -> None:
        super().__init__(f"cannot listen on {address}: {reason}")
        self.index = index
        """Which of the front's addresses."""
        self.address = address
        self.reason = reason


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_body` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, *, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await _too_large(send)
            return
        seen = 0
        over = False

        async def limited() -> Message:
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    # The app sees the sender go away; the answer is ours.
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not over:
                await send(message)

        try:
            await self.app(scope, limited, guarded_send)
        except Exception:
            if not over:
                raise
        if over:
            await _too_large(send)


def _not_found(front: HttpFront) -> Any:
    """No route here: the JSON answer every route of the front gives, not a text page; while
    routes are still to be mounted, 503 `starting`."""
    from starlette.responses import Response

    async def answer(_request: Any, _exc: Exception) -> Any:
        if front.starting:
            error = "heron serve is starting and does not take this path yet; retry later"
            body = json.dumps({"status": "starting", "error": error})
            headers = {"Retry-After": "1"}
            return Response(body, status_code=503, media_type="application/json", headers=headers)
        body = json.dumps({"status": "invalid", "error": "nothing at this path"})
        return Response(body, status_code=404, media_type="application/json")

    return answer


async def _too_large(send: Send) -> None:
    body = json.dumps({"status": "invalid", "error": "body too large"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class HttpFront:
    """One Starlette app on one uvicorn server, listening on `addresses` until `aclose()`."""

    def __init__(
        self,
        routes: Sequence[BaseRoute],
        *,
        addresses: Sequence[tuple[str, int]],
        max_body: int = DEFAULT_MAX_BODY,
        starting: bool = False,
        websockets: bool = True,
    ) -> None:
        self.routes = list(routes)
        self.addresses = list(addresses)
        """`(host, port)` to bind; port 0 picks a free one, and holds the bound port after
        `start()`."""
        self.max_body = max_body
        self.starting = starting
        """More routes are to be `mount`ed: an unknown path is answered 503, not 404."""
        self.websockets = websockets
        """Serve WebSocket routes (the gateway's); without, uvicorn does not import its
        WebSocket protocol (tens of ms of a start)."""
        self._app: Any = None
        self._server: Any = None
        self._sockets: list[socket.socket] = []
        self._loop_task: asyncio.Task[None] | None = None

    def url(self, index: int = 0) -> str:
        host, port = self.addresses[index]
        return f"http://{host}:{port}"

    def app(self) -> ASGIApp:
        from starlette.applications import Starlette

        self._app = Starlette(routes=self.routes, exception_handlers={404: _not_found(self)})
        return BodyLimit(self._app, max_body=self.max_body)

    def mount(self, routes: Sequence[BaseRoute]) -> None:
        """Add `routes` to the running app, and end `starting`: a path none takes is 404."""
        self.routes += routes
        if self._app is not None:
            self._app.router.routes.extend(routes)
        self.starting = False

    async def start(self) -> None:
        """Bind every address (a refusal raises `ListenError` and binds nothing), then serve."""
        import uvicorn

        for i, (host, port) in enumerate(self.addresses):
            try:
                sock = socket.create_server((host, port), reuse_port=False)
            except OSError as exc:
                for bound in self._sockets:
                    bound.close()
                self._sockets.clear()
                reason = os.strerror(exc.errno) if exc.errno else str(exc)
                raise ListenError(i, f"{host}:{port}", reason) from None
            self._sockets.append(sock)
            self.addresses[i] = (host, sock.getsockname()[1])
        config = uvicorn.Config(
            self.app(),
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
            ws="websockets-sansio" if self.websockets else "none",
        )
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=self._sockets)
        self._server = server
        self._loop_task = asyncio.ensure_future(server.main_loop())

    async def aclose(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.should_exit = True
        if self._loop_task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        await server.shutdown(sockets=self._sockets)
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
