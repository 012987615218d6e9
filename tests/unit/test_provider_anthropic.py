"""The Anthropic Messages adapter, driven through the real `anthropic` SDK against a local
server that speaks the protocol (JSON errors, SSE event streams, dropped connections)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from heron import Agent
from heron.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from heron.models.anthropic_messages import AnthropicMessagesModel
from heron.models.base import (
    ModelPart,
    ModelToolCall,
    ReasoningDelta,
    StreamInterrupted,
    TextDelta,
    Usage,
)
from heron.models.retry import ProviderError
from support.engine import Events
from support.protocol_servers import (
    SSE,
    WEATHER,
    ProtocolServer,
    Reply,
    Sleeps,
    Text,
    Thinking,
    ToolUse,
    anthropic_error,
    anthropic_stream,
    ask,
    calls_in,
    calls_made,
    collect,
    retrying,
    text_in,
    weather,
)

KEY = "gateway-key-0123456789abcdef"


@pytest.fixture
async def model(protocol_server: ProtocolServer) -> AsyncIterator[AnthropicMessagesModel]:
    adapter = AnthropicMessagesModel("claude-test", api_key=KEY, base_url=protocol_server.url)
    yield adapter
    await adapter.aclose()


# -- streaming ------------------------------------------------------------------------------


async def test_thinking_text_and_a_split_tool_use_stream_in_order(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel
) -> None:
    protocol_server.queue(
        Reply(
            events=anthropic_stream(
                Thinking(pieces=["User wants ", "weather."]),
                Text(pieces=["Let me ", "check."]),
                ToolUse(id="toolu_1", name="weather", pieces=['{"ci', 'ty": "Pa', 'ris"}']),
            )
        )
    )
    parts = await collect(model)
    assert parts[:5] == [
        ReasoningDelta(text="User wants "),
        ReasoningDelta(text="weather."),
        TextDelta(text="Let me "),
        TextDelta(text="check."),
        ModelToolCall(
            id="toolu_1",
            name="weather",
            arguments={"city": "Paris"},
            arguments_json='{"city": "Paris"}',
        ),
    ]


async def test_parallel_tool_uses_are_each_emitted_when_their_block_ends(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel
) -> None:
    protocol_server.queue(
        Reply(
            events=anthropic_stream(
                ToolUse(id="toolu_1", name="weather", pieces=['{"city": "Oslo"}']),
                ToolUse(id="toolu_2", name="weather", pieces=['{"city"', ': "Rome"}']),
            )
        )
    )
    parts = await collect(model)
    assert [(c.id, c.arguments) for c in calls_in(parts)] == [
        ("toolu_1", {"city": "Oslo"}),
        ("toolu_2", {"city": "Rome"}),
    ]


async def test_a_tool_use_without_input_fragments_has_empty_arguments(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel
) -> None:
    protocol_server.queue(
        Reply(events=anthropic_stream(ToolUse(id="toolu_1", name="weather", pieces=[])))
    )
    [call] = calls_in(await collect(model))
    assert call.arguments == {} and call.arguments_json == "{}"


async def test_malformed_tool_input_json_is_passed_on_raw(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel
) -> None:
    protocol_server.queue(
        Reply(events=anthropic_stream(ToolUse(id="toolu_1", name="weather", pieces=['{"city":'])))
    )
    [call] = calls_in(await collect(model))
    assert call.arguments is None and call.arguments_json == '{"city":'


async def test_usage_counts_cache_reads_and_writes_as_input_and_reads_as_cached(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel
) -> None:
    protocol_server.queue(
        Reply(
            events=anthropic_stream(
                Text(pieces=["Hi"]),
                input_tokens=12,
                cache_read=900,
                cache_creation=40,
                output_tokens=6,
            )
        )
    )
    parts = await collect(model)
    assert parts[-1] == Usage(input_tokens=952, output_tokens=6, cached_tokens=900)


# -- request shape --------------------------------------------------------------------------


async def test_system_is_separate_and_parallel_results_share_the_next_user_turn(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel
) -> None:
    history: list[Message] = [
        UserMessage(content="Weather in Paris and Rome?"),
        AssistantMessage(
            tool_calls=(
                ToolCallPart(id="toolu_1", name="weather", arguments={"city": "Paris"}),
                ToolCallPart(id="toolu_2", name="weather", arguments={"city": "Rome"}),
            ),
            reasoning="private thoughts",
        ),
        ToolResultMessage(call_id="toolu_1", name="weather", content="sunny"),
        ToolResultMessage(call_id="toolu_2", name="weather", content="Error: down", is_error=True),
        UserMessage(content="And tomorrow?", source="user"),
    ]
    protocol_server.queue(Reply(events=anthropic_stream(Text(pieces=["Unknown."]))))
    await collect(model, ask(history))
    request = protocol_server.requests[0]
    assert request.path == "/v1/messages"
    body = request.body
    assert body["system"] == "You are terse."
    assert body["max_tokens"] == 8192 and body["stream"] is True
    assert body["cache_control"] == {"type": "ephemeral"}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Rome?"}]},
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "weather",
                    "input": {"city": "Paris"},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "Error: down",
                    "is_error": True,
                },
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "weather",
            "description": "Current weather for a city.",
            "input_schema": dict(WEATHER.parameters),
        }
    ]


async def test_tool_specs_share_the_parameters_dict(model: AnthropicMessagesModel) -> None:
    tools = model.request_body(ask())["tools"]
    assert tools[0]["input_schema"] is WEATHER.parameters
    assert model.request_body(ask())["tools"] is tools


async def test_no_system_and_no_tools_leave_both_fields_out(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel
) -> None:
    protocol_server.queue(Reply(events=anthropic_stream(Text(pieces=["Hi."]))))
    await collect(model, ask(tools=(), system=""))
    assert (
        "system" not in protocol_server.requests[0].body
        and "tools" not in protocol_server.requests[0].body
    )


async def test_text_protocol_mode_sends_no_tools_and_renders_calls_and_results_as_text(
    protocol_server: ProtocolServer,
) -> None:
    model = AnthropicMessagesModel(
        "claude-test", api_key=KEY, base_url=protocol_server.url, native_tools=False
    )
    history: list[Message] = [
        UserMessage(content="Weather in Paris?"),
        AssistantMessage(
            text="Checking.",
            tool_calls=(ToolCallPart(id="c1", name="weather", arguments={"city": "Paris"}),),
        ),
        ToolResultMessage(call_id="c1", name="weather", content="sunny"),
    ]
    protocol_server.queue(Reply(events=anthropic_stream(Text(pieces=["Sunny."]))))
    try:
        await collect(model, ask(history, tools=()))
    finally:
        await model.aclose()
    body = protocol_server.requests[0].body
    assert "tools" not in body
    [assistant_block] = body["messages"][1]["content"]
    assert assistant_block["type"] == "text"
    assert assistant_block["text"].startswith("Checking.\n\n<tool_call>")
    [result_block] = body["messages"][2]["content"]
    assert body["messages"][2]["role"] == "user"
    assert '<tool_result name="weather" id="c1" status="ok">' in result_block["text"]


async def test_a_system_message_in_history_joins_the_system_field(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel
) -> None:
    history: list[Message] = [
        SystemMessage(content="Project rules."),
        UserMessage(content="Hi"),
    ]
    protocol_server.queue(Reply(events=anthropic_stream(Text(pieces=["Hi."]))))
    await collect(model, ask(history))
    body = protocol_server.requests[0].body
    assert body["system"] == "You are terse.\n\nProject rules."
    assert [m["role"] for m in body["messages"]] == ["user"]


async def test_request_options_such_as_thinking_reach_the_server(
    protocol_server: ProtocolServer,
) -> None:
    thinking = {"type": "enabled", "budget_tokens": 2048}
    model = AnthropicMessagesModel(
        "claude-test",
        api_key=KEY,
        base_url=protocol_server.url,
        max_tokens=4096,
        prompt_cache=False,
        request_options={"thinking": thinking},
    )
    protocol_server.queue(Reply(events=anthropic_stream(Text(pieces=["ok"]))))
    try:
        await collect(model)
    finally:
        await model.aclose()
    body = protocol_server.requests[0].body
    assert body["thinking"] == thinking and body["max_tokens"] == 4096
    assert "cache_control" not in body


# -- faults ---------------------------------------------------------------------------------


async def test_overloaded_529_with_retry_after_is_retried_after_exactly_that_wait(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel, sleeps: Sleeps
) -> None:
    protocol_server.queue(
        anthropic_error(529, "overloaded_error", "Overloaded", {"retry-after": "3"}),
        Reply(events=anthropic_stream(Text(pieces=["Done."]))),
    )
    parts = await collect(retrying(model, sleeps))
    assert text_in(parts) == "Done." and sleeps.calls == [3.0]


async def test_an_overload_event_before_any_output_is_retried(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel, sleeps: Sleeps
) -> None:
    start = anthropic_stream(Text(pieces=["x"]))[0]
    overloaded = SSE(
        event="error",
        data={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    protocol_server.queue(
        Reply(events=[start, overloaded]),
        Reply(events=anthropic_stream(Text(pieces=["Done."]))),
    )
    parts = await collect(retrying(model, sleeps))
    assert text_in(parts) == "Done." and len(sleeps.calls) == 1


async def test_an_invalid_request_is_not_retried_and_says_why(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel, sleeps: Sleeps
) -> None:
    protocol_server.queue(anthropic_error(400, "invalid_request_error", "max_tokens: too large"))
    with pytest.raises(ProviderError) as caught:
        await collect(retrying(model, sleeps))
    assert caught.value.kind == "request" and not caught.value.retryable
    assert "HTTP 400: invalid_request_error: max_tokens: too large" in str(caught.value)
    assert sleeps.calls == []


async def test_a_connection_dropped_mid_stream_raises_stream_interrupted_with_the_partial_text(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel, sleeps: Sleeps
) -> None:
    events = anthropic_stream(Text(pieces=["The wea", "ther is", " sunny"]), ping=False)
    # message_start, block start and two deltas arrive; the connection dies on the third.
    protocol_server.queue(Reply(events=events, drop_after=4))
    with pytest.raises(StreamInterrupted) as caught:
        await collect(retrying(model, sleeps))
    assert caught.value.partial_text == "The weather is"
    assert len(protocol_server.requests) == 1


async def test_a_drop_after_a_complete_tool_use_is_an_interruption_not_a_retry(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel, sleeps: Sleeps
) -> None:
    events = anthropic_stream(
        ToolUse(id="toolu_1", name="weather", pieces=['{"city": "Oslo"}']),
        ToolUse(id="toolu_2", name="weather", pieces=['{"city"', ': "Rome"}']),
        ping=False,
    )
    # message_start and the whole first block arrive; the connection dies in the second.
    protocol_server.queue(Reply(events=events, drop_after=5))
    seen: list[ModelPart] = []
    with pytest.raises(StreamInterrupted) as caught:
        async for part in retrying(model, sleeps).stream(ask()):
            seen.append(part)
    assert [c.id for c in calls_in(seen)] == ["toolu_1"]
    assert caught.value.partial_text == ""
    assert len(protocol_server.requests) == 1 and sleeps.calls == []


async def test_a_stream_without_message_stop_is_not_silently_truncated(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel
) -> None:
    events = anthropic_stream(Text(pieces=["Half"]), ping=False)[:-1]
    protocol_server.queue(Reply(events=events))
    with pytest.raises(StreamInterrupted) as caught:
        await collect(model)
    assert caught.value.partial_text == "Half"


async def test_the_api_key_never_appears_in_errors_reprs_or_logs(
    protocol_server: ProtocolServer,
    model: AnthropicMessagesModel,
    caplog: pytest.LogCaptureFixture,
    sleeps: Sleeps,
) -> None:
    caplog.set_level(logging.DEBUG)
    wrapped = retrying(model, sleeps)
    protocol_server.queue(anthropic_error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    with pytest.raises(ProviderError) as caught:
        await collect(wrapped)
    assert KEY in protocol_server.requests[0].headers["authorization"]
    surfaces = [str(caught.value), repr(caught.value), repr(model), repr(wrapped), caplog.text]
    assert all(KEY not in surface for surface in surfaces)
    assert caught.value.kind == "auth" and "authentication_error" in str(caught.value)


# -- through the engine ---------------------------------------------------------------------


async def test_an_agent_runs_a_real_tool_through_the_provider_and_finishes(
    protocol_server: ProtocolServer, model: AnthropicMessagesModel, events: Events
) -> None:
    calls_made.clear()
    protocol_server.queue(
        Reply(
            events=anthropic_stream(
                Text(pieces=["Checking."]),
                ToolUse(id="toolu_1", name="weather", pieces=['{"city":', ' "Lyon"}']),
            )
        ),
        Reply(events=anthropic_stream(Text(pieces=["Lyon is ", "sunny."]))),
    )
    agent = Agent(model=model, tools=[weather], autonomy="full", system_prompt="Be brief.")
    result = await agent.run("Weather in Lyon?", sink=events)
    assert result.ok and result.text == "Lyon is sunny."
    assert calls_made == ["Lyon"]
    second = protocol_server.requests[1].body
    assert second["system"] == "Be brief."
    assert second["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Lyon: 21 C and sunny"}
        ],
    }
    events.assert_one_pair_per_call()
