"""A loopback HTTP server for the connector tests: per-route scripted replies, every request
recorded. `LOCAL` is the URL policy that lets the connectors reach it; `closed_port()` is a port
nothing listens on; `run` calls one of a connector's tools by name, as the engine would."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from heron.safety.url_policy import UrlPolicy
from heron.tools.definition import Tool, ToolContext, ToolResult

LOCAL = UrlPolicy(allow_hosts=("127.0.0.1",))
CTX = ToolContext(call_id="c0", turn_id="t0")


@dataclass(kw_only=True)
class Reply:
    """What the server answers: JSON for dicts and lists, bytes or text otherwise."""

    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    wait: threading.Event | None = None
    """Block (up to 5 s) until this is set before answering."""


@dataclass(frozen=True, kw_only=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def query(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlsplit(self.path).query, True).items()}


Route = Callable[[Seen], Reply] | list[Reply]


class ApiServer:
    """A loopback server answering from per-route scripts; records every request.

    A route is `(method, path without query)`; a list of replies is played in order and its
    last reply repeats; a callable builds the reply from the request."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Route] = {}
        self.seen: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length", "0") or 0)
                seen = Seen(
                    method=self.command,
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=self.rfile.read(length) if length else b"",
                )
                server.seen.append(seen)
                reply = server.reply_for(seen)
                if reply.wait is not None:
                    reply.wait.wait(5)
                body = reply.body
                ctype = "application/json"
                if isinstance(body, dict | list):
                    body = json.dumps(body).encode()
                elif isinstance(body, str):
                    body, ctype = body.encode(), "text/plain; charset=utf-8"
                headers = {"Content-Type": ctype, **reply.headers}
                try:
                    self.send_response(reply.status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client gave up (a timeout test): nothing to report
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve
            do_PROPFIND = do_REPORT = do_OPTIONS = _serve

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> ApiServer:
        # A short poll interval keeps shutdown (and so each test's teardown) fast.
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def on(self, method: str, path: str, *replies: Reply, fn: Route | None = None) -> None:
        self.routes[(method, path)] = fn if fn is not None else list(replies)

    def reply_for(self, seen: Seen) -> Reply:
        route = self.routes.get((seen.method, urlsplit(seen.path).path))
        if route is None:
            return Reply(status=404, body={"message": "Not Found"})
        if callable(route):
            return route(seen)
        return route.pop(0) if len(route) > 1 else route[0]

    def hits(self, path: str) -> list[Seen]:
        return [s for s in self.seen if urlsplit(s.path).path == path]


def closed_port() -> int:
    """A loopback port nothing listens on (connection refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def run(tools: dict[str, Tool], name: str, **arguments: Any) -> ToolResult:
    """Validate `arguments` and execute the tool called `name`."""
    t = tools[name]
    return await t.execute(t.validate(arguments), CTX)
