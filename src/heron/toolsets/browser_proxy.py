"""The filtering HTTP proxy the browser tools make Chromium use for all of its traffic.

Route interception in `heron.toolsets.browser` sees the requests a page makes, but not
redirect hops, WebSockets or the address a host name resolves to when Chromium connects. The
proxy sees every connection: it checks the target with the `UrlPolicy`, connects to the address
it checked (so a DNS answer cannot change in between) and carries one request per upstream
connection, so a kept-alive connection never reaches a host that was not checked. `CONNECT`
tunnels (HTTPS, WebSockets over TLS) are checked the same way and then relayed as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import urlsplit

from heron.safety.url_policy import UrlPolicy, UrlRefused

__all__ = ["FilteringProxy"]

_HOP_HEADERS = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization"}
)


class FilteringProxy:
    """An HTTP proxy for Chromium that lets a connection through only when the policy allows it.

    Refusals of hosts that resolve are appended to `blocked` as `url (reason)`; `timeout_s`
    bounds each upstream connect.
    """

    def __init__(self, policy: UrlPolicy, blocked: list[str], timeout_s: float) -> None:
        self._policy = policy
        self._blocked = blocked
        self._timeout_s = timeout_s
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> str:
        """Listen on a free port of 127.0.0.1; returns the proxy URL for Chromium."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        """Stop listening and end every connection in progress."""
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, ValueError, EOFError, asyncio.LimitOverrunError):
            pass  # the browser hung up or sent garbage; nothing to report
        except asyncio.CancelledError:
            # Only `close` cancels these tasks; asyncio's server logs a cancelled handler as an
            # error, so the handler ends normally instead.
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        line, _, headers = head.partition(b"\r\n")
        method, target, _version = line.decode("latin-1").split(" ", 2)
        tunnel = method.upper() == "CONNECT"
        url = f"https://{target}/" if tunnel else target
        try:
            checked = await self._policy.resolve(url)
            upstream = await asyncio.wait_for(
                asyncio.open_connection(checked.address, checked.port), self._timeout_s
            )
        except UrlRefused as exc:
            if await _resolves(url):
                self._blocked.append(f"{url} (connection stopped by the proxy: {exc})")
            await _answer(writer, 403, f"blocked by heron's URL policy: {exc}")
            return
        except (OSError, TimeoutError) as exc:
            await _answer(writer, 502, f"cannot connect to {target}: {exc}")
            return
        if tunnel:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            parts = urlsplit(target)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            kept = [h for h in headers.split(b"\r\n") if h and _name(h) not in _HOP_HEADERS]
            # One request per upstream connection: a kept-alive connection could otherwise
            # carry the next request to a host that was never checked.
            request = [f"{method} {path} HTTP/1.1".encode("latin-1"), *kept, b"Connection: close"]
            upstream[1].write(b"\r\n".join(request) + b"\r\n\r\n")
        await asyncio.gather(_copy(reader, upstream[1]), _copy(upstream[0], writer))


def _name(header: bytes) -> bytes:
    return header.split(b":", 1)[0].strip().lower()


async def _resolves(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    try:
        await asyncio.get_running_loop().getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return True


async def _answer(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = text.encode()
    reason = {403: "Forbidden", 502: "Bad Gateway"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
    writer.write(f"{head}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    sink.close()  # ends the other direction too: its reader sees the end of the stream
