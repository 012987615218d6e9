"""A loopback Ollama: `GET /api/tags` lists models, and the OpenAI-compatible chat endpoint
(`POST /v1/chat/completions`) plays queued replies like any `ProtocolServer`.

Those are the two endpoints heron uses: the tags to pick a model when none is configured
(`heron.config.detect_model`), the chat endpoint through the `ollama:` adapter.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from support.protocol_servers import ProtocolServer

MODEL_VARIABLES = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
"""What heron (and the provider SDKs) read to find a model."""


def closed_port() -> int:
    """A loopback port nothing listens on (bound once, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def without_models(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """`env` with no provider key or endpoint and `OLLAMA_HOST` on a closed port: nothing for
    heron to pick when no model is configured."""
    for name in MODEL_VARIABLES:
        env.pop(name, None)
    env["OLLAMA_HOST"] = f"127.0.0.1:{closed_port()}"
    return env


class OllamaServer(ProtocolServer):
    """A `ProtocolServer` that also answers `GET /api/tags` with `models`."""

    def __init__(self, models: Sequence[str]) -> None:
        self.models = list(models)
        self.tag_requests = 0
        super().__init__()

    @property
    def host(self) -> str:
        """The value for `OLLAMA_HOST`: `127.0.0.1:PORT`."""
        return self.url.removeprefix("http://")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self
        base = super()._handler_class()

        class Handler(base):  # type: ignore[valid-type,misc]
            def do_GET(self) -> None:
                if self.path != "/api/tags":
                    self.send_error(404)
                    return
                server.tag_requests += 1
                models = [{"name": name, "model": name, "size": 1} for name in server.models]
                payload = json.dumps({"models": models}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


@contextmanager
def ollama(models: Sequence[str]) -> Iterator[OllamaServer]:
    """A running `OllamaServer` listing `models`, stopped on exit."""
    server = OllamaServer(models)
    server.start()
    try:
        yield server
    finally:
        server.stop()
