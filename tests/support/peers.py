"""Real local peers for the outbound channels: an HTTP receiver and an SMTP server, both on
127.0.0.1, recording what they get."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session


class HttpReceiver:
    """A real HTTP endpoint that records every POST (lower-case headers, body) and answers
    `status`."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.status = 204
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Silence the default stderr log."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


@contextmanager
def http_receiver() -> Iterator[HttpReceiver]:
    receiver = HttpReceiver()
    try:
        yield receiver
    finally:
        receiver.close()


class SmtpSink:
    """What an SMTP server on loopback received; `refuse` makes it refuse recipients."""

    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []
        self.refuse: set[str] = set()
        self.port = 0
        self.arrived = asyncio.Event()

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        if address in self.refuse:
            return "550 5.1.1 no such mailbox"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.envelopes.append(envelope)
        self.arrived.set()
        return "250 2.0.0 queued"

    def message(self, index: int = 0) -> EmailMessage:
        content = self.envelopes[index].content
        assert isinstance(content, bytes)
        parsed = message_from_bytes(content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


@asynccontextmanager
async def smtp_sink() -> AsyncIterator[SmtpSink]:
    """An aiosmtpd server on 127.0.0.1 (a free port), on the running loop."""
    sink = SmtpSink()
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(
        lambda: SMTP(sink, hostname="mx.heron.test"), "127.0.0.1", 0
    )
    sink.port = listener.sockets[0].getsockname()[1]
    try:
        yield sink
    finally:
        listener.close()
        await listener.wait_closed()


@contextmanager
def smtp_sink_thread() -> Iterator[SmtpSink]:
    """The same server on its own thread and loop, for tests that drive a subprocess."""
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def serve() -> None:
        loop = asyncio.new_event_loop()
        holder["loop"] = loop

        async def start() -> None:
            sink = SmtpSink()
            listener = await loop.create_server(
                lambda: SMTP(sink, hostname="mx.heron.test"), "127.0.0.1", 0
            )
            sink.port = listener.sockets[0].getsockname()[1]
            holder["sink"], holder["listener"] = sink, listener
            ready.set()

        loop.run_until_complete(start())
        loop.run_forever()
        holder["listener"].close()
        loop.run_until_complete(holder["listener"].wait_closed())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield holder["sink"]
    finally:
        holder["loop"].call_soon_threadsafe(holder["loop"].stop)
        thread.join(10)
