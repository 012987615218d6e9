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

Every route is under the limits of `heron._support.http_limits`, applied before any route
reads a byte: one body limit (413), deadlines for a request's head and body (408) and a cap on
open connections (503). The nesting and size rules of JSON are the one `heron._support.limits`
check, where each route parses its body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from heron._support.http_limits import (
    BODY_TIMEOUT_S,
    DEFAULT_MAX_BODY,
    HEAD_TIMEOUT_S,
    default_max_connections,
    guarded_uvicorn,
)
from heron.errors import HeronError

if TYPE_CHECKING:
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp

__all__ = ["DEFAULT_MAX_BODY", "HttpFront", "ListenError"]


class ListenError(HeronError, OSError):
    """A socket could not be bound (a port in use)."""

    def __init__(self, index: int, address: str, reason: str) -> None:
        super().__init__(f"cannot listen on {address}: {reason}")
        self.index = index
        """Which of the front's addresses."""
        self.address = address
        self.reason = reason


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


class HttpFront:
    """One Starlette app on one uvicorn server, listening on `addresses` until `aclose()`."""

    def __init__(
        self,
        routes: Sequence[BaseRoute],
        *,
        addresses: Sequence[tuple[str, int]],
        max_body: int = DEFAULT_MAX_BODY,
        head_timeout: float = HEAD_TIMEOUT_S,
        body_timeout: float = BODY_TIMEOUT_S,
        max_connections: int | None = None,
        starting: bool = False,
        websockets: bool = True,
    ) -> None:
        self.routes = list(routes)
        self.addresses = list(addresses)
        """`(host, port)` to bind; port 0 picks a free one, and holds the bound port after
        `start()`."""
        self.max_body = max_body
        self.head_timeout = head_timeout
        self.body_timeout = body_timeout
        self.max_connections = max_connections or default_max_connections()
        """Open connections at once, event streams included; `None`:
        `default_max_connections()`."""
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

        app = Starlette(routes=self.routes, exception_handlers={404: _not_found(self)})
        self._app = app
        return app

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
        config = guarded_uvicorn(
            self.app(),
            max_body=self.max_body,
            head_timeout=self.head_timeout,
            body_timeout=self.body_timeout,
            max_connections=self.max_connections,
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
