"""The OpenAI Chat Completions adapter, driven through the real `openai` SDK against a local
server that speaks the protocol (JSON errors, SSE streams, dropped connections)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from heron import Agent
from heron.messages import (
    AssistantMessage,
    Message,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from heron.models.base import (
    ModelPart,
    ModelToolCall,
    ReasoningDelta,
    StreamInterrupted,
    TextDelta,
    Usage,
)
from heron.models.openai_chat import OpenAIChatModel
from heron.models.retry import ProviderError, RetriesExhaustedError, RetryingModel, RetryPolicy
from heron.safety.secrets import Secret
from support.engine import Events
from support.protocol_servers import (
    SSE,
    WEATHER,
    OpenAICall,
    ProtocolServer,
    Reply,
    Sleeps,
    ask,
    calls_in,
    calls_made,
    collect,
    openai_chunk,
    openai_error,
    openai_stream,
    openai_usage,
    retrying,
    serve,
    text_in,
    weather,
)

KEY = "proxy-key-0123456789abcdef"


@pytest.fixture
async def model(protocol_server: ProtocolServer) -> AsyncIterator[OpenAIChatModel]:
    adapter = OpenAIChatModel("gpt-test", api_key=KEY, base_url=f"{protocol_server.url}/v1")
    yield adapter
    await adapter.aclose()


# -- streaming ------------------------------------------------------------------------------


async def test_tool_call_split_across_chunks_is_emitted_once_and_complete(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    pieces = ['{"ci', 'ty": "Pa', 'ris"}']
    protocol_server.queue(
        Reply(events=openai_stream(calls=[OpenAICall(id="c1", name="weather", pieces=pieces)]))
    )
    parts = await collect(model)
    assert calls_in(parts) == [
        ModelToolCall(
            id="c1", name="weather", arguments={"city": "Paris"}, arguments_json='{"city": "Paris"}'
        )
    ]


async def test_parallel_tool_calls_with_interleaved_fragments_keep_their_ids_and_order(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    calls = [
        OpenAICall(id="c1", name="weather", pieces=['{"city"', ': "Oslo"}']),
        OpenAICall(id="c2", name="weather", pieces=['{"city"', ': "Rome"}']),
    ]
    protocol_server.queue(Reply(events=openai_stream(calls=calls, interleave=True)))
    parts = await collect(model)
    assert [(c.id, c.arguments) for c in calls_in(parts)] == [
        ("c1", {"city": "Oslo"}),
        ("c2", {"city": "Rome"}),
    ]


async def test_a_server_reusing_one_index_for_two_calls_still_yields_both(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    calls = [
        OpenAICall(id="c1", name="weather", pieces=['{"city": "Oslo"}'], index=0),
        OpenAICall(id="c2", name="weather", pieces=['{"city": "Rome"}'], index=0),
    ]
    protocol_server.queue(Reply(events=openai_stream(calls=calls)))
    parts = await collect(model)
    assert [(c.id, c.arguments) for c in calls_in(parts)] == [
        ("c1", {"city": "Oslo"}),
        ("c2", {"city": "Rome"}),
    ]


async def test_malformed_tool_call_json_is_passed_on_raw(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    broken = '{"city": "Paris"'
    protocol_server.queue(
        Reply(events=openai_stream(calls=[OpenAICall(id="c1", name="weather", pieces=[broken])]))
    )
    [call] = calls_in(await collect(model))
    assert call.arguments is None
    assert call.arguments_json == broken


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_text_and_reasoning_stream_as_separate_deltas_in_order(
    protocol_server: ProtocolServer, model: OpenAIChatModel, field: str
) -> None:
    protocol_server.queue(
        Reply(
            events=openai_stream(
                reasoning=["Think", "ing."], reasoning_field=field, text=["Sun", "ny."]
            )
        )
    )
    parts = await collect(model)
    assert parts == [
        ReasoningDelta(text="Think"),
        ReasoningDelta(text="ing."),
        TextDelta(text="Sun"),
        TextDelta(text="ny."),
    ]


async def test_usage_comes_last_with_input_output_and_cached_tokens(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    protocol_server.queue(
        Reply(events=openai_stream(text=["Hi"], usage=openai_usage(120, 7, cached=100)))
    )
    parts = await collect(model)
    assert parts[-1] == Usage(input_tokens=120, output_tokens=7, cached_tokens=100)
    assert protocol_server.requests[0].body["stream_options"] == {"include_usage": True}


# -- request shape --------------------------------------------------------------------------


async def test_history_and_tools_are_sent_as_chat_messages_and_function_specs(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    history: list[Message] = [
        UserMessage(content="Weather in Paris and Rome?"),
        AssistantMessage(
            text="Checking.",
            tool_calls=(
                ToolCallPart(id="c1", name="weather", arguments={"city": "Paris"}),
                ToolCallPart(id="c2", name="weather", arguments={"city": "Rome"}),
            ),
            reasoning="private thoughts",
        ),
        ToolResultMessage(call_id="c1", name="weather", content="sunny"),
        ToolResultMessage(call_id="c2", name="weather", content="Error: no data", is_error=True),
        UserMessage(content="And tomorrow?"),
    ]
    protocol_server.queue(Reply(events=openai_stream(text=["Unknown."])))
    await collect(model, ask(history))
    body = protocol_server.requests[0].body
    assert protocol_server.requests[0].path == "/v1/chat/completions"
    assert body["model"] == "gpt-test" and body["stream"] is True
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: no data"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Current weather for a city.",
                "parameters": dict(WEATHER.parameters),
            },
        }
    ]


async def test_tool_specs_share_the_parameters_dict_and_are_built_once_per_tool_set(
    model: OpenAIChatModel,
) -> None:
    request = ask()
    first = model.request_body(request)["tools"]
    again = model.request_body(ask())["tools"]
    assert first[0]["function"]["parameters"] is WEATHER.parameters
    assert again is first
    changed = model.request_body(ask(tools=(WEATHER, WEATHER)))["tools"]
    assert changed is not first and len(changed) == 2


async def test_an_assistant_turn_with_only_calls_sends_null_content(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    history: list[Message] = [
        UserMessage(content="Weather?"),
        AssistantMessage(tool_calls=(ToolCallPart(id="c1", name="weather", arguments={}),)),
        ToolResultMessage(call_id="c1", name="weather", content="sunny"),
    ]
    protocol_server.queue(Reply(events=openai_stream(text=["Sunny."])))
    await collect(model, ask(history))
    assistant = protocol_server.requests[0].body["messages"][2]
    assert assistant["content"] is None and assistant["tool_calls"][0]["id"] == "c1"


async def test_text_protocol_mode_sends_no_tools_and_renders_calls_and_results_as_text(
    protocol_server: ProtocolServer,
) -> None:
    model = OpenAIChatModel(
        "small", api_key="unused", base_url=f"{protocol_server.url}/v1", native_tools=False
    )
    history: list[Message] = [
        UserMessage(content="Weather in Paris?"),
        AssistantMessage(
            text="Let me check.",
            tool_calls=(ToolCallPart(id="c1", name="weather", arguments={"city": "Paris"}),),
        ),
        ToolResultMessage(call_id="c1", name="weather", content="sunny"),
    ]
    protocol_server.queue(Reply(events=openai_stream(text=["Sunny."])))
    try:
        parts = await collect(model, ask(history, tools=()))
    finally:
        await model.aclose()
    assert text_in(parts) == "Sunny."
    body = protocol_server.requests[0].body
    assert "tools" not in body
    assistant, results = body["messages"][2], body["messages"][3]
    assert assistant["role"] == "assistant" and "tool_calls" not in assistant
    assert assistant["content"].startswith("Let me check.\n\n<tool_call>")
    assert '"name": "weather"' in assistant["content"]
    assert results["role"] == "user"
    assert (
        '<tool_result name="weather" id="c1" status="ok">\nsunny\n</tool_result>'
        in (results["content"])
    )


# -- faults ---------------------------------------------------------------------------------


async def test_a_429_with_retry_after_waits_exactly_that_long_then_succeeds(
    protocol_server: ProtocolServer, model: OpenAIChatModel, sleeps: Sleeps
) -> None:
    protocol_server.queue(
        openai_error(429, "Rate limit reached", {"Retry-After": "7"}),
        Reply(events=openai_stream(text=["Done."])),
    )
    parts = await collect(retrying(model, sleeps))
    assert text_in(parts) == "Done."
    assert sleeps.calls == [7.0]
    assert len(protocol_server.requests) == 2


async def test_a_500_then_success_is_retried_after_exponential_backoff(
    protocol_server: ProtocolServer, model: OpenAIChatModel, sleeps: Sleeps
) -> None:
    protocol_server.queue(
        openai_error(500, "boom"),
        openai_error(503, "busy"),
        Reply(events=openai_stream(text=["Done."])),
    )
    parts = await collect(retrying(model, sleeps, base_delay_s=0.5))
    assert text_in(parts) == "Done."
    assert sleeps.calls == [0.5, 1.0]


async def test_jitter_shortens_the_backoff_by_at_most_its_fraction(
    protocol_server: ProtocolServer, model: OpenAIChatModel, sleeps: Sleeps
) -> None:
    protocol_server.queue(
        openai_error(502, "bad gateway"), Reply(events=openai_stream(text=["ok"]))
    )
    policy = RetryPolicy(sleep=sleeps, random=lambda: 1.0, base_delay_s=2.0, jitter=0.25)
    await collect(RetryingModel(model, policy))
    assert sleeps.calls == [1.5]


async def test_retries_stop_after_the_last_attempt_with_a_clear_error(
    protocol_server: ProtocolServer, model: OpenAIChatModel, sleeps: Sleeps
) -> None:
    protocol_server.queue(*[openai_error(500, "still broken") for _ in range(3)])
    with pytest.raises(RetriesExhaustedError) as caught:
        await collect(retrying(model, sleeps, max_attempts=3))
    assert "HTTP 500" in str(caught.value) and "still broken" in str(caught.value)
    assert "gave up after 3 attempts" in str(caught.value)
    assert len(sleeps.calls) == 2 and len(protocol_server.requests) == 3


async def test_a_retry_after_longer_than_heron_waits_fails_at_once(
    protocol_server: ProtocolServer, model: OpenAIChatModel, sleeps: Sleeps
) -> None:
    protocol_server.queue(openai_error(429, "quota", {"Retry-After": "3600"}))
    with pytest.raises(RetriesExhaustedError, match="asks to wait 3600 s"):
        await collect(retrying(model, sleeps))
    assert sleeps.calls == []


@pytest.mark.parametrize(
    ("status", "kind"),
    [(400, "request"), (401, "auth"), (403, "auth"), (404, "request"), (422, "request")],
)
async def test_client_errors_are_not_retried_and_say_what_the_server_said(
    protocol_server: ProtocolServer, model: OpenAIChatModel, sleeps: Sleeps, status: int, kind: str
) -> None:
    protocol_server.queue(openai_error(status, "model 'gpt-test' does not exist"))
    with pytest.raises(ProviderError) as caught:
        await collect(retrying(model, sleeps))
    error = caught.value
    assert (error.status, error.kind, error.retryable) == (status, kind, False)
    assert f"HTTP {status}" in str(error) and "does not exist" in str(error)
    assert sleeps.calls == [] and len(protocol_server.requests) == 1


async def test_a_connection_dropped_mid_stream_raises_stream_interrupted_with_the_partial_text(
    protocol_server: ProtocolServer, model: OpenAIChatModel, sleeps: Sleeps
) -> None:
    # Role chunk, reasoning, then two text chunks arrive; the connection dies on the third.
    events = openai_stream(reasoning=["Hmm."], text=["The wea", "ther is", " sunny"])
    protocol_server.queue(Reply(events=events, drop_after=4))
    seen: list[ModelPart] = []
    with pytest.raises(StreamInterrupted) as caught:
        async for part in retrying(model, sleeps).stream(ask()):
            seen.append(part)
    assert caught.value.partial_text == "The weather is"
    assert caught.value.partial_reasoning == "Hmm."
    assert text_in(seen) == "The weather is"
    assert len(protocol_server.requests) == 1, "output was already shown, so nothing is retried"


async def test_a_connection_dropped_before_any_output_is_retried(
    protocol_server: ProtocolServer, model: OpenAIChatModel, sleeps: Sleeps
) -> None:
    protocol_server.queue(
        Reply(events=openai_stream(text=["lost"]), drop_after=1),
        Reply(events=openai_stream(text=["Done."])),
    )
    parts = await collect(retrying(model, sleeps))
    assert text_in(parts) == "Done."
    assert len(sleeps.calls) == 1


async def test_a_stream_that_ends_before_the_model_finished_is_not_silently_truncated(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    events = [openai_chunk({"role": "assistant"}), openai_chunk({"content": "Half an ans"})]
    protocol_server.queue(Reply(events=events))
    with pytest.raises(StreamInterrupted) as caught:
        await collect(model)
    assert caught.value.partial_text == "Half an ans"


async def test_losing_only_the_trailing_usage_chunk_keeps_the_complete_answer(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    call = OpenAICall(id="c1", name="weather", pieces=['{"city": "Oslo"}'])
    events = openai_stream(calls=[call], usage=openai_usage(10, 2))
    protocol_server.queue(Reply(events=events, drop_after=len(events) - 2))
    parts = await collect(model)
    assert [c.arguments for c in calls_in(parts)] == [{"city": "Oslo"}]
    assert not any(isinstance(p, Usage) for p in parts)


async def test_an_error_event_inside_the_stream_is_a_retryable_provider_error(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    events = [SSE(data={"error": {"message": "overloaded, try later", "type": "server_error"}})]
    protocol_server.queue(Reply(events=events))
    with pytest.raises(ProviderError) as caught:
        await collect(model)
    assert caught.value.retryable and "overloaded, try later" in str(caught.value)


async def test_a_silent_server_times_out_with_a_retryable_error(
    protocol_server: ProtocolServer,
) -> None:
    model = OpenAIChatModel(
        "gpt-test", api_key=KEY, base_url=f"{protocol_server.url}/v1", timeout_s=0.2
    )
    protocol_server.queue(Reply(events=openai_stream(text=["never"]), stall_after=0))
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(model)
    finally:
        await model.aclose()
    assert caught.value.kind == "timeout" and caught.value.retryable
    assert "within 0.2 s" in str(caught.value)


async def test_an_unreachable_server_is_a_connection_error_naming_the_url() -> None:
    with serve() as gone:
        url = f"{gone.url}/v1"
    model = OpenAIChatModel("gpt-test", api_key=KEY, base_url=url)
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(model)
    finally:
        await model.aclose()
    assert caught.value.kind == "connection" and url in str(caught.value)


async def test_the_api_key_never_appears_in_errors_reprs_or_logs(
    protocol_server: ProtocolServer, caplog: pytest.LogCaptureFixture, sleeps: Sleeps
) -> None:
    caplog.set_level(logging.DEBUG)
    model = OpenAIChatModel("gpt-test", api_key=Secret(KEY), base_url=f"{protocol_server.url}/v1")
    wrapped = retrying(model, sleeps)
    protocol_server.queue(openai_error(401, f"Incorrect API key provided: {KEY}"))
    try:
        with pytest.raises(ProviderError) as caught:
            await collect(wrapped)
    finally:
        await model.aclose()
    assert protocol_server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    surfaces = [str(caught.value), repr(caught.value), repr(model), repr(wrapped), caplog.text]
    surfaces += [str(vars(caught.value))]
    assert all(KEY not in surface for surface in surfaces)
    assert "Incorrect API key provided" in str(caught.value)


# -- through the engine ---------------------------------------------------------------------


async def test_an_agent_runs_a_real_tool_through_the_provider_and_finishes(
    protocol_server: ProtocolServer, model: OpenAIChatModel, events: Events
) -> None:
    calls_made.clear()
    call = OpenAICall(id="call_1", name="weather", pieces=['{"city":', ' "Lyon"}'])
    protocol_server.queue(
        Reply(events=openai_stream(text=["Checking."], calls=[call])),
        Reply(events=openai_stream(text=["Lyon is ", "sunny."], usage=openai_usage(50, 4))),
    )
    result = await Agent(model=model, tools=[weather], autonomy="full").run(
        "Weather in Lyon?", sink=events
    )
    assert result.ok and result.text == "Lyon is sunny."
    assert calls_made == ["Lyon"]
    second = protocol_server.requests[1].body["messages"]
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Lyon: 21 C and sunny",
    }
    events.assert_one_pair_per_call()


async def test_malformed_arguments_from_the_server_are_reported_to_the_model(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    calls_made.clear()
    call = OpenAICall(id="call_1", name="weather", pieces=['{"city": "Ly'])
    protocol_server.queue(
        Reply(events=openai_stream(calls=[call])),
        Reply(events=openai_stream(text=["Sorry."])),
    )
    result = await Agent(model=model, tools=[weather], autonomy="full").run("Weather?")
    assert result.ok and calls_made == []
    report = protocol_server.requests[1].body["messages"][-1]
    assert report["role"] == "tool" and report["tool_call_id"] == "call_1"
    assert "are not a JSON object (invalid JSON" in report["content"]


async def test_arguments_over_the_input_limits_from_the_server_are_refused_like_a_type_error(
    protocol_server: ProtocolServer, model: OpenAIChatModel
) -> None:
    calls_made.clear()
    calls = [
        OpenAICall(id="call_nan", name="weather", pieces=['{"city": Na', "N}"]),
        OpenAICall(id="call_big", name="weather", pieces=['{"city": 1e400}']),
        OpenAICall(
            id="call_deep", name="weather", pieces=['{"city": ' + "[" * 5000, "]" * 5000 + "}"]
        ),
        OpenAICall(id="call_odd", name="weather", pieces=['{"city": "\\ud800"}']),
    ]
    protocol_server.queue(
        Reply(events=openai_stream(calls=calls)),
        Reply(events=openai_stream(text=["Sorry."])),
    )
    result = await Agent(model=model, tools=[weather], autonomy="full").run("Weather?")
    assert result.ok and calls_made == []
    reports = {
        m["tool_call_id"]: m["content"] for m in protocol_server.requests[1].body["messages"][-4:]
    }
    assert reports["call_nan"].startswith(
        "Error: invalid arguments for 'weather': city: expected a finite number, got NaN."
    )
    assert "city: expected a finite number, got 1e400" in reports["call_big"]
    assert "arguments: nested more than 64 levels deep" in reports["call_deep"]
    assert "city: text holds a lone surrogate (\\ud800)" in reports["call_odd"]


async def test_request_options_reach_the_server_but_never_replace_heron_fields(
    protocol_server: ProtocolServer,
) -> None:
    options = {"temperature": 0.2, "reasoning_effort": "low", "model": "other", "stream": False}
    model = OpenAIChatModel(
        "gpt-test", api_key=KEY, base_url=f"{protocol_server.url}/v1", request_options=options
    )
    protocol_server.queue(Reply(events=openai_stream(text=["ok"])))
    try:
        await collect(model)
    finally:
        await model.aclose()
    body = protocol_server.requests[0].body
    assert body["temperature"] == 0.2 and body["reasoning_effort"] == "low"
    assert body["model"] == "gpt-test" and body["stream"] is True
