"""Limits for every HTTP server of heron, applied before any route reads a byte.

heron's HTTP servers are uvicorn (with h11) under Starlette: `heron serve`'s one front
(`heron.always_on.http`: webhooks, the gateway, the console) and `heron mcp serve --transport
http`. Neither library bounds what a hostile sender may hold, so every server is built by
`guarded_uvicorn`:

- one body limit: a request whose `Content-Length` is over `max_body`, or whose streamed body
  grows past it, is answered 413 (`BodyLimit`);
- a sender that is slow on purpose costs nothing and holds a socket (and a file descriptor)
  for as long as it is let, so time and count are bounded too: the request's head must be
  complete `head_timeout` seconds after the connection opened or, on a kept-alive connection,
  after its first byte (else 408 and the connection closes: h11 waits for ever, and uvicorn's
  keep-alive timer only covers the gap between requests); the body must be in `body_timeout`
  seconds after the head (408); and beyond `max_connections` open connections a new one is
  answered 503 with `Retry-After` and closed. A response that streams (an event stream) is not
  timed once its request is read.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BODY = 1 << 20
"""1 MiB: larger than any webhook or API body heron takes; the JSON limits apply inside it."""
HEAD_TIMEOUT_S = 10.0
"""A request line and headers are a few hundred bytes: ten seconds is any real sender."""
BODY_TIMEOUT_S = 30.0
"""1 MiB in 30 s is 35 KB/s, slower than any link a webhook sender or an operator is on."""
LINGER_S = 1.0
"""How long a connection refused without a request (408 for its head, 503 past the cap) is
read and dropped before it is closed, unless its sender closes first."""


def default_max_connections() -> int:
    """Half the process's file descriptors: the other half is for its database, its child
    processes and their pipes, and its outgoing connections (the usual soft limit of 1,024
    gives 512)."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 2048 if soft == resource.RLIM_INFINITY else max(soft // 2, 1)


class BodyLimit:
    """ASGI middleware: 413 for a body over `max_body` bytes, declared or streamed; 408 for
    one not in by `body_timeout` seconds after the head."""

    def __init__(self, app: ASGIApp, *, max_body: int, body_timeout: float) -> None:
        self.app = app
        self.max_body = max_body
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            await _refuse(send, 413, "body too large")
            return
        deadline = asyncio.get_running_loop().time() + self.body_timeout
        seen = 0
        read = False
        refusal: tuple[int, str] | None = None

        async def limited() -> Message:
            nonlocal seen, read, refusal
            if refusal is not None:
                return {"type": "http.disconnect"}
            if read:  # what follows the body is the sender going away: not timed
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                refusal = (408, f"the body did not arrive within {self.body_timeout:g} s")
                return {"type": "http.disconnect"}
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                read = not message.get("more_body", False)
                if seen > self.max_body:
                    refusal = (413, "body too large")
            # The app sees the sender go away; the answer is ours.
            return {"type": "http.disconnect"} if refusal else message

        async def guarded_send(message: Message) -> None:
            if refusal is None:
                await send(message)

        try:
            await self.app(scope, limited, guarded_send)
        except Exception:
            if refusal is None:
                raise
        if refusal is not None:
            await _refuse(send, *refusal)


def _refusal_body(error: str) -> bytes:
    return json.dumps({"status": "invalid", "error": error}).encode()


async def _refuse(send: Send, status: int, error: str) -> None:
    """The answer; after a 408 the connection closes (its sender stalled). A 413's sender may
    still be sending: closing on unread bytes resets the connection and can lose the answer,
    so h11 reads the rest of it and drops it."""
    body = _refusal_body(error)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 408:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _raw_refusal(status: str, error: str, *extra: str) -> bytes:
    """A whole response written straight to a socket, where no request was parsed to answer."""
    body = _refusal_body(error)
    head = [
        f"HTTP/1.1 {status}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        *extra,
        "connection: close",
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _guarded_h11(
    *, head_timeout: float, body_timeout: float, max_connections: int
) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the head deadline, the connection cap and a deadline for
    the rest of a body answered before it was in (a 413: h11 reads the rest and drops it).

    Made here, not at import: uvicorn is imported only when a front starts."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    busy = _raw_refusal(
        "503 Service Unavailable", "too many open connections; retry later", "retry-after: 1"
    )
    late = _raw_refusal(
        "408 Request Timeout", f"the request's head did not arrive within {head_timeout:g} s"
    )

    class GuardedH11Protocol(H11Protocol):
        _timer: asyncio.TimerHandle | None = None
        """The deadline of what `_waiting` names; after a refusal, the end of the linger."""
        _waiting: str | None = None
        """`head`, or `rest` (of a body already answered)."""
        _refused = False
        """Past the cap: never a connection of uvicorn's."""
        _ended = False
        """A raw refusal was written: what the sender still sends is dropped."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            if len(self.connections) >= max_connections:
                self._refused = True
                self._end(cast("asyncio.Transport", transport), busy)
                return
            super().connection_made(cast("asyncio.Transport", transport))
            self._time_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_timer()
            if not self._refused:
                super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._ended:
                return
            super().data_received(data)
            if self.conn.their_state is h11.IDLE:
                if data and self._waiting != "head":  # a kept-alive connection's next head
                    self._time_head()
            elif self.conn.their_state is h11.SEND_BODY and self.conn.our_state is h11.DONE:
                if self._waiting != "rest":
                    self._stop_timer()
                    self._waiting = "rest"
                    self._timer = self.loop.call_later(body_timeout, self.transport.close)
            else:
                self._stop_timer()

        def _time_head(self) -> None:
            self._stop_timer()
            self._waiting = "head"
            self._timer = self.loop.call_later(head_timeout, self._head_late)

        def _stop_timer(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._waiting = None

        def _head_late(self) -> None:
            self._timer = self._waiting = None
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._end(self.transport, late)

        def _end(self, transport: asyncio.Transport, answer: bytes) -> None:
            """`answer`, then linger: closing on bytes the sender is still sending would reset
            the connection, and a reset can discard the answer before the sender reads it."""
            self._ended = True
            transport.write(answer)
            if transport.can_write_eof():
                transport.write_eof()
            self._timer = self.loop.call_later(LINGER_S, transport.close)

    return GuardedH11Protocol


def guarded_uvicorn(
    app: ASGIApp,
    *,
    max_body: int,
    head_timeout: float = HEAD_TIMEOUT_S,
    body_timeout: float = BODY_TIMEOUT_S,
    max_connections: int | None = None,
    **options: Any,
) -> uvicorn.Config:
    """A uvicorn configuration serving `app` under the limits of the module docstring;
    `options` are uvicorn's own; `max_connections` `None`: `default_max_connections()`."""
    import uvicorn

    return uvicorn.Config(
        BodyLimit(app, max_body=max_body, body_timeout=body_timeout),
        http=_guarded_h11(
            head_timeout=head_timeout,
            body_timeout=body_timeout,
            max_connections=max_connections or default_max_connections(),
        ),
        **options,
    )
