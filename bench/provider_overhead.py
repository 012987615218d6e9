"""Adapter overhead per streamed turn, against the local protocol servers.

One turn = one streaming request with a 20-message history and two tool specs, answered by
40 text chunks, one tool call split over 4 fragments, and usage. For each provider, measured
in the same run over the same keep-alive HTTP stack:

* raw HTTP: POST the same JSON body and read the SSE bytes, nothing decoded;
* SDK only: the official SDK's streaming call, iterating its parsed events;
* adapter: heron's adapter (history rendering, SDK call, assembling parts).

Prints µs per turn; "heron" is adapter minus SDK only (negative where the adapter skips SDK
work: the OpenAI SDK's per-message request transform), "total overhead" adapter minus raw HTTP.
The server runs in a child process, so its threads do not compete with the client for the GIL.

    python bench/provider_overhead.py
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx2

from heron.messages import AssistantMessage, Message, ToolCallPart, ToolResultMessage, UserMessage
from heron.models.anthropic_messages import AnthropicMessagesModel
from heron.models.base import ModelRequest
from heron.models.openai_chat import OpenAIChatModel
from heron.tools.definition import ToolSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.protocol_servers import (
    OpenAICall,
    ProtocolServer,
    Reply,
    Text,
    ToolUse,
    anthropic_stream,
    openai_stream,
    openai_usage,
)

TURNS = 100
REPEATS = 5
TEXT = [f"word{i} " for i in range(40)]
FRAGMENTS = ['{"path": ', '"notes/', 'today.md", ', '"limit": 20}']

SPECS = tuple(
    ToolSpec(
        name=name,
        description=f"The {name} tool.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["path"],
        },
    )
    for name in ("read_file", "list_dir")
)


def history() -> list[Message]:
    messages: list[Message] = [UserMessage(content="Summarise my notes.")]
    for i in range(6):
        call = ToolCallPart(id=f"c{i}", name="read_file", arguments={"path": f"n{i}.md"})
        messages.append(AssistantMessage(text="Reading.", tool_calls=(call,)))
        messages.append(ToolResultMessage(call_id=f"c{i}", name="read_file", content="x" * 400))
        messages.append(UserMessage(content=f"also file {i}"))
    return messages[:20]


REQUEST = ModelRequest(system="You are a careful assistant.", messages=history(), tools=SPECS)

OPENAI_REPLY = Reply(
    events=openai_stream(
        text=TEXT,
        calls=[OpenAICall(id="c9", name="read_file", pieces=FRAGMENTS)],
        usage=openai_usage(900, 60, 800),
    )
)
ANTHROPIC_REPLY = Reply(
    events=anthropic_stream(
        Text(pieces=TEXT), ToolUse(id="toolu_9", name="read_file", pieces=FRAGMENTS)
    )
)

Runner = Callable[[], Awaitable[None]]


def _serve(reply: Reply, conn: Connection) -> None:
    server = ProtocolServer(default=reply).start()
    conn.send(server.url)
    conn.recv()
    server.stop()


@contextmanager
def server_process(reply: Reply) -> Iterator[str]:
    """The URL of a protocol server, in a child process, answering every request with `reply`."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(reply, child), daemon=True)
    process.start()
    try:
        yield parent.recv()
    finally:
        parent.send("stop")
        process.join(timeout=10)


async def per_turn(run: Runner) -> float:
    for _ in range(5):
        await run()  # warm the connection and caches
    started = time.perf_counter()
    for _ in range(TURNS):
        await run()
    return (time.perf_counter() - started) / TURNS * 1e6


async def measure(provider: str, url: str) -> dict[str, float]:
    adapter: OpenAIChatModel | AnthropicMessagesModel
    if provider == "openai":
        adapter = OpenAIChatModel("bench", api_key="unused", base_url=f"{url}/v1")
        path = "/v1/chat/completions"
    else:
        adapter = AnthropicMessagesModel("bench", api_key="unused", base_url=url)
        path = "/v1/messages"
    body = adapter.request_body(REQUEST)
    payload = json.dumps(body).encode()
    raw_client = httpx2.AsyncClient(base_url=url)
    # The SDK exactly as documented: parameters passed as such, events iterated.
    sdk: Any = adapter._client

    async def raw() -> None:
        headers = {"content-type": "application/json"}
        async with raw_client.stream("POST", path, content=payload, headers=headers) as response:
            async for _ in response.aiter_bytes():
                pass

    async def sdk_only() -> None:
        if provider == "openai":
            stream = await sdk.chat.completions.create(**body)
        else:
            stream = await sdk.messages.create(**body)
        async for _ in stream:
            pass

    async def heron() -> None:
        async for _ in adapter.stream(REQUEST):
            pass

    try:
        return {
            "raw": await per_turn(raw),
            "sdk": await per_turn(sdk_only),
            "adapter": await per_turn(heron),
        }
    finally:
        await raw_client.aclose()
        await adapter.aclose()


def run(provider: str) -> dict[str, float]:
    reply = OPENAI_REPLY if provider == "openai" else ANTHROPIC_REPLY
    samples: list[dict[str, float]] = []
    with server_process(reply) as url:
        for _ in range(REPEATS):
            gc.collect()
            samples.append(asyncio.run(measure(provider, url)))
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def main() -> None:
    header = (
        f"{'provider':<10} {'raw HTTP':>9} {'SDK only':>9} {'adapter':>9} "
        f"{'heron':>8} {'total overhead':>15}   (µs per streamed turn)"
    )
    print(header)
    for provider in ("openai", "anthropic"):
        r = run(provider)
        print(
            f"{provider:<10} {r['raw']:>9.0f} {r['sdk']:>9.0f} {r['adapter']:>9.0f} "
            f"{r['adapter'] - r['sdk']:>8.0f} {r['adapter'] - r['raw']:>15.0f}"
        )
    print(f"history rendering alone: {rendering_us():.0f} µs per request (both adapters)")


def rendering_us() -> float:
    """heron's own request work: history and tool specs to the two wire formats."""
    openai = OpenAIChatModel("bench", api_key="unused", base_url="http://127.0.0.1:9/v1")
    anthropic = AnthropicMessagesModel("bench", api_key="unused", base_url="http://127.0.0.1:9")
    rounds = 2000
    started = time.perf_counter()
    for _ in range(rounds):
        openai.request_body(REQUEST)
        anthropic.request_body(REQUEST)
    return (time.perf_counter() - started) / rounds * 1e6


if __name__ == "__main__":
    main()
