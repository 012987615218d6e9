"""The prompt cache survives discovery, measured per provider adapter against local servers that
speak each protocol: requests N (the search) and N+1 (after it loaded tools) are compared byte
for byte, in the order the provider reads a prompt, up to the point that may change.

- Anthropic (`defer_loading` + `tool_reference`): the tool list and the system prompt are
  identical and request N's messages are a byte prefix of N+1's — loading a tool only appends.
- Text protocol: no tool list; the system prompt (which carries the protocol and the static
  tools) is identical and the messages only grow — the loaded schemas are in the search result.
- OpenAI Chat (no deferred-loading mechanism): the tool list gains the loaded tools at its end,
  after the unchanged static tools, so the conversation after it is one cache miss; the request
  after that (N+2) again has N+1's tool list, byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from test_discovery_tool import catalogue_tools

from heron import Agent
from heron.mcp.assembly import DiscoveryOptions, assemble_tools
from heron.mcp.config import McpConfig
from heron.models.anthropic_messages import AnthropicMessagesModel
from heron.models.openai_chat import OpenAIChatModel
from heron.tools.registry import ActivatedToolSet, ToolRegistry
from support.engine import Events
from support.protocol_servers import (
    OpenAICall,
    ProtocolServer,
    Reply,
    Text,
    ToolUse,
    anthropic_stream,
    openai_stream,
    serve,
)

NEED = '{"need": "I need to look up stock prices"}'


@pytest.fixture
def server() -> Iterator[ProtocolServer]:
    with serve() as running:
        yield running


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def prefix_of(before: list[Any], after: list[Any]) -> bool:
    """`before`'s bytes, without the closing bracket, start `after`'s bytes."""
    return dumps(after).startswith(dumps(before)[:-1])


async def run_discovery(model: Any, events: Events) -> Any:
    tools = catalogue_tools()
    mcp = assemble_tools(
        McpConfig(exposure="deferred"),
        tools,
        autonomy="full",
        allowed_tools=None,
        excluded_tools=(),
        activated=ActivatedToolSet(),
        discovery=DiscoveryOptions(tool="discover_tools"),
    )
    registry = ToolRegistry()
    mcp.register(registry)
    agent = Agent(
        model=model,
        tools=registry,
        system_prompt=mcp.system_prompt(
            "You are a test agent.", native_tools=model.native_tools, strict_tool_parsing=False
        ),
        autonomy="full",
        activated=mcp.activated,
        catalogue=mcp.catalogue,
    )
    result = await agent.run("Quote ACME", sink=events)
    assert result.ok, result.outcome
    assert tools[0].calls == [{"symbol": "ACME"}]
    return result


@pytest.fixture
async def anthropic(server: ProtocolServer) -> AsyncIterator[AnthropicMessagesModel]:
    adapter = AnthropicMessagesModel("claude-test", api_key="k" * 20, base_url=server.url)
    yield adapter
    await adapter.aclose()


async def test_anthropic_loading_a_tool_only_appends_to_the_conversation(
    server: ProtocolServer, anthropic: AnthropicMessagesModel, events: Events
) -> None:
    server.queue(
        Reply(events=anthropic_stream(ToolUse(id="toolu_1", name="discover_tools", pieces=[NEED]))),
        Reply(
            events=anthropic_stream(
                ToolUse(id="toolu_2", name="markets__stock_quote", pieces=['{"symbol": "ACME"}'])
            )
        ),
        Reply(events=anthropic_stream(Text(pieces=["ACME is up."]))),
    )
    await run_discovery(anthropic, events)
    n, n1, n2 = (r.body for r in server.requests)
    # The provider reads tools, then system, then messages.
    assert dumps(n1["tools"]) == dumps(n["tools"]) == dumps(n2["tools"])
    assert n1["system"] == n["system"]
    assert prefix_of(n["messages"], n1["messages"]) and prefix_of(n1["messages"], n2["messages"])
    tools = {t["name"]: t for t in n["tools"]}
    assert "defer_loading" not in tools["discover_tools"]
    assert tools["markets__stock_quote"]["defer_loading"] is True
    assert all(t.get("defer_loading") for name, t in tools.items() if name != "discover_tools")
    # The search result loads the tools it lists with tool_reference blocks, after its text.
    result = n1["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_1"
    text, *references = result["content"]
    assert text["type"] == "text" and text["text"].startswith("Loaded ")
    assert references[0] == {"type": "tool_reference", "tool_name": "markets__stock_quote"}
    assert all(r["type"] == "tool_reference" for r in references)


async def test_anthropic_without_deferred_loading_appends_loaded_tools_like_openai(
    server: ProtocolServer, events: Events
) -> None:
    adapter = AnthropicMessagesModel(
        "claude-test", api_key="k" * 20, base_url=server.url, deferred_loading=False
    )
    server.queue(
        Reply(events=anthropic_stream(ToolUse(id="toolu_1", name="discover_tools", pieces=[NEED]))),
        Reply(
            events=anthropic_stream(
                ToolUse(id="toolu_2", name="markets__stock_quote", pieces=['{"symbol": "ACME"}'])
            )
        ),
        Reply(events=anthropic_stream(Text(pieces=["ACME is up."]))),
    )
    try:
        await run_discovery(adapter, events)
    finally:
        await adapter.aclose()
    n, n1, _ = (r.body for r in server.requests)
    assert [t["name"] for t in n["tools"]] == ["discover_tools"]
    assert n1["tools"][:1] == n["tools"] and len(n1["tools"]) > 1
    assert isinstance(n1["messages"][-1]["content"][0]["content"], str)


async def test_openai_chat_appends_loaded_tools_at_the_end_of_the_tool_list(
    server: ProtocolServer, events: Events
) -> None:
    adapter = OpenAIChatModel("gpt-test", api_key="k" * 20, base_url=server.url)
    server.queue(
        Reply(
            events=openai_stream(calls=[OpenAICall(id="c1", name="discover_tools", pieces=[NEED])])
        ),
        Reply(
            events=openai_stream(
                calls=[
                    OpenAICall(id="c2", name="markets__stock_quote", pieces=['{"symbol":"ACME"}'])
                ]
            )
        ),
        Reply(events=openai_stream(text=["ACME is up."])),
    )
    try:
        await run_discovery(adapter, events)
    finally:
        await adapter.aclose()
    n, n1, n2 = (r.body for r in server.requests)
    # The static tools stay first, byte for byte; the loaded ones follow: one cache miss.
    assert prefix_of(n["tools"], n1["tools"]) and len(n1["tools"]) > len(n["tools"])
    assert n1["tools"][len(n["tools"])]["function"]["name"] == "markets__stock_quote"
    assert prefix_of(n["messages"], n1["messages"])
    # After the activation nothing moves again.
    assert dumps(n2["tools"]) == dumps(n1["tools"])
    assert prefix_of(n1["messages"], n2["messages"])


async def test_text_protocol_keeps_the_system_prompt_and_carries_schemas_in_the_result(
    server: ProtocolServer, events: Events
) -> None:
    adapter = OpenAIChatModel(
        "local-test", api_key="k" * 20, base_url=server.url, native_tools=False
    )
    search = '<tool_call>\n{"name": "discover_tools", "arguments": ' + NEED + "}\n</tool_call>"
    quote = (
        '<tool_call>\n{"name": "markets__stock_quote", "arguments": {"symbol": "ACME"}}'
        "\n</tool_call>"
    )
    server.queue(
        Reply(events=openai_stream(text=[search])),
        Reply(events=openai_stream(text=[quote])),
        Reply(events=openai_stream(text=["ACME is up."])),
    )
    try:
        await run_discovery(adapter, events)
    finally:
        await adapter.aclose()
    n, n1, n2 = (r.body for r in server.requests)
    assert "tools" not in n and "tools" not in n1
    system = n["messages"][0]
    assert system["role"] == "system"
    assert n1["messages"][0] == system == n2["messages"][0]
    assert '"name": "markets__stock_quote"' not in system["content"]
    assert prefix_of(n["messages"], n1["messages"]) and prefix_of(n1["messages"], n2["messages"])
    # The loaded schema reached the model in the search's result.
    assert '"name": "markets__stock_quote"' in n1["messages"][-1]["content"]
