"""Local HTTP servers that speak the OpenAI Chat Completions and Anthropic Messages protocols.

The real SDKs talk to these over 127.0.0.1, so tests exercise the actual wire format: JSON error
bodies, SSE streams (chunked transfer encoding), `Retry-After`, and connections that die in the
middle of a stream. A server plays queued `Reply`s in order and records every request.

Builders produce the event sequences each provider sends: `openai_stream(...)` and
`anthropic_stream(...)`. The last section holds what the adapter tests of both providers share:
a tool spec and a real tool, a request builder, a retry policy that records its waits instead of
waiting, and helpers that pick parts out of a stream.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from heron import tool
from heron.messages import Message, UserMessage
from heron.models.base import ModelPart, ModelRequest, ModelToolCall, TextDelta
from heron.models.retry import RetryingModel, RetryPolicy
from heron.tools.definition import ToolSpec


@dataclass(frozen=True, kw_only=True, slots=True)
class SSE:
    """One server-sent event: an optional event name and its JSON (or literal) data."""

    data: Any
    event: str | None = None

    def encode(self) -> bytes:
        data = self.data if isinstance(self.data, str) else json.dumps(self.data)
        head = f"event: {self.event}\n" if self.event else ""
        return f"{head}data: {data}\n\n".encode()


@dataclass(frozen=True, kw_only=True, slots=True)
class Reply:
    """What the server answers to one request: a JSON body, or a stream of events."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    events: Sequence[SSE] = ()
    drop_after: int | None = None
    """Reset the connection after this many events, without ending the chunked body."""
    stall_after: int | None = None
    """Go silent after this many events until the server stops (for client timeouts)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class ProtocolServer:
    """A threaded HTTP server on 127.0.0.1 that plays queued replies and records requests.

    When the queue is empty it answers with `default`, or else a 500 naming the problem.
    """

    def __init__(self, *, default: Reply | None = None) -> None:
        self.requests: list[Recorded] = []
        self._default = default
        self._replies: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        # A short poll interval keeps `stop()` (which waits for the next poll) fast.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def start(self) -> ProtocolServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _next(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            if self._replies:
                return self._replies.popleft()
        if self._default is not None:
            return self._default
        return Reply(status=500, json={"error": {"message": "no scripted reply left"}})

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Events go out one small write each; Nagle's algorithm would hold them back
                # for the client's delayed ACK and add ~40 ms to every stream.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: tests read `requests`, not stderr."""

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                body = json.loads(raw) if raw else None
                recorded = Recorded(
                    method="POST",
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                self._answer(server._next(recorded))

            def _answer(self, reply: Reply) -> None:
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                if not reply.events:
                    payload = json.dumps(reply.json if reply.json is not None else {}).encode()
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for index, event in enumerate(reply.events):
                    if reply.drop_after is not None and index == reply.drop_after:
                        self._reset()
                        return
                    if reply.stall_after is not None and index == reply.stall_after:
                        server._stopping.wait(timeout=30)
                        self._reset()
                        return
                    chunk = event.encode()
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                if reply.drop_after is not None:
                    self._reset()
                    return
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def _reset(self) -> None:
                # An abortive close (RST) mid-body, as when a proxy or the provider drops it.
                self.wfile.flush()
                linger_off = struct.pack("ii", 1, 0)  # on, zero timeout: close sends RST
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger_off)
                self.close_connection = True

        return Handler


@contextmanager
def serve() -> Iterator[ProtocolServer]:
    """A running `ProtocolServer`, stopped on exit."""
    server = ProtocolServer().start()
    try:
        yield server
    finally:
        server.stop()


# -- OpenAI Chat Completions ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class OpenAICall:
    """A streamed tool call: `pieces` are the argument fragments, one chunk each."""

    id: str
    name: str
    pieces: Sequence[str]
    index: int | None = None


def openai_chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: dict[str, Any] | None = None,
) -> SSE:
    choices = (
        [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}]
        if delta is not None or finish_reason is not None
        else []
    )
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": choices,
    }
    if usage is not None:
        chunk["usage"] = usage
    return SSE(data=chunk)


def openai_usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def openai_stream(
    *,
    text: Sequence[str] = (),
    reasoning: Sequence[str] = (),
    reasoning_field: str = "reasoning_content",
    calls: Sequence[OpenAICall] = (),
    interleave: bool = False,
    usage: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    done: bool = True,
) -> list[SSE]:
    """The chunks of one streamed completion: reasoning, text, then tool calls split by
    argument piece (`interleave` alternates the calls' pieces, as parallel calls may)."""
    events = [openai_chunk({"role": "assistant", "content": ""})]
    events += [openai_chunk({reasoning_field: piece}) for piece in reasoning]
    events += [openai_chunk({"content": piece}) for piece in text]
    streams = []
    for position, call in enumerate(calls):
        index = position if call.index is None else call.index
        first = {
            "index": index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        rest = [{"index": index, "function": {"arguments": piece}} for piece in call.pieces]
        streams.append([first, *rest])
    if interleave:
        longest = max((len(s) for s in streams), default=0)
        order = [s[i] for i in range(longest) for s in streams if i < len(s)]
    else:
        order = [part for s in streams for part in s]
    events += [openai_chunk({"tool_calls": [part]}) for part in order]
    reason = finish_reason or ("tool_calls" if calls else "stop")
    events.append(openai_chunk({}, finish_reason=reason))
    if usage is not None:
        events.append(openai_chunk(usage=usage))
    if done:
        events.append(SSE(data="[DONE]"))
    return events


def openai_error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return Reply(status=status, json=body, headers=headers or {})


# -- Anthropic Messages --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Text:
    pieces: Sequence[str]


@dataclass(frozen=True, kw_only=True, slots=True)
class Thinking:
    pieces: Sequence[str]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolUse:
    id: str
    name: str
    pieces: Sequence[str]


def anthropic_stream(
    *blocks: Text | Thinking | ToolUse,
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int = 0,
    cache_creation: int = 0,
    stop_reason: str | None = None,
    ping: bool = True,
) -> list[SSE]:
    """The events of one streamed message, with a `ping` after `message_start` as the API
    sends."""
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "test-model",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "output_tokens": 1,
            "cache_read_input_tokens": cache_read,
            "cache_creation_input_tokens": cache_creation,
        },
    }
    events = [SSE(event="message_start", data={"type": "message_start", "message": message})]
    if ping:
        events.append(SSE(event="ping", data={"type": "ping"}))
    for index, block in enumerate(blocks):
        if isinstance(block, Text):
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in block.pieces]
        elif isinstance(block, Thinking):
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in block.pieces]
            deltas.append({"type": "signature_delta", "signature": "c2ln"})
        else:
            start = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in block.pieces]
        events.append(
            SSE(
                event="content_block_start",
                data={"type": "content_block_start", "index": index, "content_block": start},
            )
        )
        events += [
            SSE(
                event="content_block_delta",
                data={"type": "content_block_delta", "index": index, "delta": delta},
            )
            for delta in deltas
        ]
        events.append(
            SSE(event="content_block_stop", data={"type": "content_block_stop", "index": index})
        )
    reason = stop_reason or (
        "tool_use" if any(isinstance(b, ToolUse) for b in blocks) else "end_turn"
    )
    events.append(
        SSE(
            event="message_delta",
            data={
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    events.append(SSE(event="message_stop", data={"type": "message_stop"}))
    return events


def anthropic_error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Reply(status=status, json=body, headers=headers or {})


# -- shared by the adapter tests -----------------------------------------------------------

WEATHER = ToolSpec(
    name="weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


class Sleeps:
    """Records the waits a retry policy asks for, without waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def retrying(model: Any, sleeps: Sleeps, **policy: Any) -> RetryingModel:
    """`model` under a retry policy without jitter whose waits `sleeps` records."""
    return RetryingModel(model, RetryPolicy(sleep=sleeps, random=lambda: 0.0, **policy))


def ask(
    messages: list[Message] | None = None,
    tools: tuple[ToolSpec, ...] = (WEATHER,),
    system: str = "You are terse.",
) -> ModelRequest:
    return ModelRequest(
        system=system,
        messages=messages or [UserMessage(content="Weather in Paris?")],
        tools=tools,
    )


async def collect(model: Any, request: ModelRequest | None = None) -> list[ModelPart]:
    return [part async for part in model.stream(request or ask())]


def calls_in(parts: list[ModelPart]) -> list[ModelToolCall]:
    return [p for p in parts if isinstance(p, ModelToolCall)]


def text_in(parts: list[ModelPart]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextDelta))


calls_made: list[str] = []
"""The cities `weather` was called for; tests clear it first."""


@tool(read_only=True)
def weather(city: str) -> str:
    """Current weather for a city.

    Args:
        city: City name.
    """
    calls_made.append(city)
    return f"{city}: 21 C and sunny"
