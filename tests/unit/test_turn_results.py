"""Results as the model and the UI see them: normalisation, errors, bounding, receipts, observer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from heron import (
    Agent,
    Receipt,
    RecordingObserver,
    RuntimeKnobs,
    ScriptedModel,
    ToolContext,
    ToolResult,
    tool,
)
from heron.messages import ToolResultMessage
from heron.turn.bounds import render_bounded, render_bounded_twice
from heron.turn.observer import ToolCallRecord
from heron.turn.receipts import ReceiptKeyStore, ReceiptScope, parse_receipt, verify_receipt
from support.engine import Events, call, calls_turn


@tool(read_only=True)
def silent() -> str:
    """Returns nothing at all."""
    return ""


@tool(read_only=True)
def failing(reason: str) -> ToolResult:
    """Fails with the given reason.

    Args:
        reason: Why it fails.
    """
    return ToolResult.fail(reason)


@tool(read_only=True)
def exploding() -> str:
    """Raises."""
    raise RuntimeError("disk on fire")


@tool(read_only=True)
def repeat(text: str, times: int) -> str:
    """Repeat text.

    Args:
        text: What to repeat.
        times: How often.
    """
    return text * times


@tool(read_only=True)
def leak() -> str:
    """Returns a credential in its output."""
    return 'config: api_key = "sk-live-abcd1234efgh5678"'


def tool_messages(history: list[Any]) -> dict[str, ToolResultMessage]:
    return {m.call_id: m for m in history if isinstance(m, ToolResultMessage)}


async def run(turns: list[dict[str, Any]], tools: list[Any], events: Events, **agent_kw: Any):
    agent = Agent(model=ScriptedModel(turns), tools=tools, **agent_kw)
    return await agent.run("go", sink=events)


async def test_empty_successful_output_becomes_no_output(events: Events) -> None:
    result = await run([calls_turn(call("silent")), {"text": "ok"}], [silent], events)
    assert tool_messages(result.history)["c_silent"].content == "(no output)"
    assert events.results()["c_silent"].status == "ok"


async def test_tool_failure_is_an_error_result_and_the_loop_continues(events: Events) -> None:
    result = await run(
        [calls_turn(call("failing", reason="no such file")), {"text": "handled"}], [failing], events
    )
    message = tool_messages(result.history)["c_failing"]
    assert message.content == "Error: no such file"
    assert message.is_error
    assert result.text == "handled"


async def test_tool_exception_becomes_error_result_naming_the_tool(events: Events) -> None:
    result = await run([calls_turn(call("exploding")), {"text": "ok"}], [exploding], events)
    content = tool_messages(result.history)["c_exploding"].content
    assert content == "Error: 'exploding' raised RuntimeError: disk on fire"
    assert events.results()["c_exploding"].status == "error"


async def test_strict_validation_refuses_string_for_integer_and_never_runs(events: Events) -> None:
    ran: list[int] = []

    @tool(read_only=True)
    def count(n: int) -> str:
        """Count.

        Args:
            n: How many.
        """
        ran.append(n)
        return str(n)

    result = await run(
        [calls_turn(call("count", n="5"), call("count", "c2", n=1.0)), {"text": "ok"}],
        [count],
        events,
    )
    messages = tool_messages(result.history)
    assert messages["c_count"].content.startswith("Error: invalid arguments for 'count': ")
    assert "Nothing was run" in messages["c_count"].content
    assert messages["c2"].is_error
    assert ran == []
    events.assert_one_pair_per_call()


async def test_malformed_json_arguments_are_reported_not_replaced_by_empty(events: Events) -> None:
    turns = [{"tool_calls": [{"id": "x", "name": "repeat", "arguments": '{"text": "a",'}]}]
    result = await run([*turns, {"text": "ok"}], [repeat], events)
    content = tool_messages(result.history)["x"].content
    assert "not a JSON object" in content and "invalid JSON" in content
    assert events.results()["x"].status == "error"


async def test_unknown_tool_gets_a_result_listing_the_tools_and_the_loop_continues(
    events: Events,
) -> None:
    result = await run([calls_turn(call("nope")), {"text": "sorry"}], [silent], events)
    content = tool_messages(result.history)["c_nope"].content
    assert content == "Unknown tool: 'nope'. Tools you can call: silent."
    assert events.results()["c_nope"].status == "unknown"
    assert result.text == "sorry"
    events.assert_one_pair_per_call()


async def test_results_over_the_limit_are_bounded_with_marker_and_truncated_event(
    events: Events,
) -> None:
    knobs = RuntimeKnobs(max_tool_result_chars=300)
    result = await run(
        [calls_turn(call("repeat", text="x", times=5000)), {"text": "ok"}],
        [repeat],
        events,
        knobs=knobs,
    )
    content = tool_messages(result.history)["c_repeat"].content
    assert len(content) <= 300
    assert "characters omitted by heron's tool-result limit" in content
    (cut,) = events.of("truncated")
    assert (cut.id, cut.original_chars, cut.retained_chars) == ("c_repeat", 5000, len(content))


async def test_zero_limit_disables_bounding(events: Events) -> None:
    knobs = RuntimeKnobs(max_tool_result_chars=0)
    result = await run(
        [calls_turn(call("repeat", text="y", times=200_000)), {"text": "ok"}],
        [repeat],
        events,
        knobs=knobs,
    )
    assert len(tool_messages(result.history)["c_repeat"].content) == 200_000
    assert events.of("truncated") == []


async def test_receipts_sign_raw_untruncated_output_and_only_successes(
    events: Events, tmp_path: Path
) -> None:
    store = ReceiptKeyStore(tmp_path)
    knobs = RuntimeKnobs(max_tool_result_chars=200)
    result = await run(
        [
            calls_turn(call("repeat", text="ab", times=400), call("failing", reason="bad")),
            {"text": "ok"},
        ],
        [repeat, failing],
        events,
        knobs=knobs,
        receipts=ReceiptScope("run", store=store),
    )
    messages = tool_messages(result.history)
    ok_content = messages["c_repeat"].content
    assert ok_content.count("[receipt: heron-receipt-") == 1
    receipt = events.results()["c_repeat"].receipt
    assert receipt is not None and ok_content.endswith(f"[receipt: {receipt}]")
    parsed = parse_receipt(receipt)
    assert parsed is not None
    key = store.load(parsed[0])
    assert key is not None
    args = {"text": "ab", "times": 400}
    assert verify_receipt(receipt, key=key, tool="repeat", arguments=args, output="ab" * 400)
    assert not verify_receipt(receipt, key=key, tool="repeat", arguments=args, output="ab")
    assert events.results()["c_failing"].receipt is None
    assert "[receipt:" not in messages["c_failing"].content
    assert result.receipts == [Receipt(tool="repeat", call_id="c_repeat", receipt=receipt)]


async def test_data_path_stays_raw_while_events_and_observer_are_scrubbed(events: Events) -> None:
    observer = RecordingObserver()
    result = await run(
        [calls_turn(call("leak")), {"text": "ok"}], [leak], events, observer=observer
    )
    assert "sk-live-abcd1234efgh5678" in tool_messages(result.history)["c_leak"].content
    shown = events.results()["c_leak"].output
    assert "sk-live-abcd1234efgh5678" not in shown and "[REDACTED]" in shown
    end = next(r for r in observer.records if isinstance(r, ToolCallRecord))
    assert "sk-live-abcd1234efgh5678" not in end.result and "[REDACTED]" in end.result
    assert (end.tool, end.call_id, end.success, end.status) == ("leak", "c_leak", True, "ok")


async def test_observer_gets_start_and_end_with_correlation_fields(events: Events) -> None:
    observer = RecordingObserver()
    agent = Agent(
        model=ScriptedModel([calls_turn(call("silent")), {"text": "ok"}]),
        tools=[silent],
        observer=observer,
        name="helper",
    )
    result = await agent.run("go", sink=events, channel="web")
    start, end = observer.records
    assert start.call_id == end.call_id == "c_silent"
    assert start.turn_id == end.turn_id == result.turn_id
    assert (start.channel, start.agent, end.channel, end.agent) == (
        "web",
        "helper",
        "web",
        "helper",
    )
    assert start.otel_attributes()["gen_ai.tool.name"] == "silent"


async def test_tool_progress_lines_stream_scrubbed(events: Events) -> None:
    @tool(read_only=True)
    def reader(ctx: ToolContext) -> str:
        """Reads."""
        ctx.progress("reading src/main.py with token=abcdefgh12345678")
        return "done"

    await run([calls_turn(call("reader")), {"text": "ok"}], [reader], events)
    (line,) = events.of("progress")
    assert line.id == "c_reader"
    assert "reading src/main.py" in line.message and "abcdefgh12345678" not in line.message


async def test_runtime_tool_timeout_is_an_error_result_the_model_sees(events: Events) -> None:
    import asyncio

    @tool(read_only=True)
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "unreachable"

    knobs = RuntimeKnobs(tool_timeout_s=0.05)
    result = await run([calls_turn(call("hang")), {"text": "ok"}], [hang], events, knobs=knobs)
    content = tool_messages(result.history)["c_hang"].content
    assert content == "Error: 'hang' timed out after 0.05 s and was stopped."
    assert result.text == "ok"


async def test_tool_call_events_scrub_credentials_but_the_tool_gets_them_raw(
    events: Events,
) -> None:
    seen: list[str] = []

    @tool(read_only=True)
    def login(user: str, password: str) -> str:
        """Log in.

        Args:
            user: User name.
            password: The password.
        """
        seen.append(password)
        return "ok"

    await run(
        [calls_turn(call("login", user="ana", password="hunter2-very-secret")), {"text": "ok"}],
        [login],
        events,
    )
    assert seen == ["hunter2-very-secret"]
    (card,) = events.of("tool_call")
    assert card.arguments == {"user": "ana", "password": "[REDACTED]"}


async def test_progress_from_a_sync_tool_in_a_worker_thread_reaches_the_sink_on_the_loop(
    events: Events,
) -> None:
    import threading

    loop_thread = threading.get_ident()
    sink_threads: list[int] = []

    @tool(read_only=True)
    def crunch(ctx: ToolContext) -> str:
        """Runs in a worker thread."""
        assert threading.get_ident() != loop_thread
        ctx.progress("halfway")
        return "done"

    def sink(event: object) -> None:
        sink_threads.append(threading.get_ident())
        events(event)  # type: ignore[arg-type]

    agent = Agent(model=ScriptedModel([calls_turn(call("crunch")), {"text": "ok"}]), tools=[crunch])
    await agent.run("go", sink=sink)
    assert [p.message for p in events.of("progress")] == ["halfway"]
    assert set(sink_threads) == {loop_thread}


# -- structured data ---------------------------------------------------------------------------


@tool(read_only=True)
def rows() -> ToolResult:
    """Returns rows as text and as data."""
    return ToolResult.ok(
        "2 rows: alice, bob",
        data={"rows": [{"name": "alice"}, {"name": "bob"}], "api_key": "sk-live-abcd1234efgh5678"},
    )


@tool(read_only=True)
def as_dict() -> dict[str, Any]:
    """Returns a mapping."""
    return {"count": 2, "when": "2024-03-15T14:30:00Z"}


async def test_structured_data_reaches_the_result_event_scrubbed_and_the_tool_text_the_model(
    events: Events,
) -> None:
    result = await run([calls_turn(call("rows")), {"text": "ok"}], [rows], events)
    event = events.results()["c_rows"]
    assert event.data == {"rows": [{"name": "alice"}, {"name": "bob"}], "api_key": "[REDACTED]"}
    assert event.data_omitted_chars is None
    # heron's ToolResult contract: `output` is what the model sees, `data` is for programs.
    assert tool_messages(result.history)["c_rows"].content == "2 rows: alice, bob"
    assert "data" in event.model_dump_json()


async def test_a_returned_mapping_is_the_models_json_text_and_the_events_data(
    events: Events,
) -> None:
    result = await run([calls_turn(call("as_dict")), {"text": "ok"}], [as_dict], events)
    event = events.results()["c_as_dict"]
    assert event.data == {"count": 2, "when": "2024-03-15T14:30:00Z"}
    content = tool_messages(result.history)["c_as_dict"].content
    assert json.loads(content) == event.data


async def test_structured_data_over_the_limit_is_left_out_whole_and_its_size_reported(
    events: Events,
) -> None:
    @tool(read_only=True)
    def big() -> ToolResult:
        """Big data."""
        return ToolResult.ok("many rows", data={"rows": ["x" * 50] * 40})

    await run(
        [calls_turn(call("big")), {"text": "ok"}],
        [big],
        events,
        knobs=RuntimeKnobs(max_tool_result_chars=500),
    )
    event = events.results()["c_big"]
    assert event.data is None
    expected = len(json.dumps({"rows": ["x" * 50] * 40}, separators=(",", ":")))
    assert event.data_omitted_chars == expected


async def test_a_tool_without_data_has_no_data_in_its_event(events: Events) -> None:
    await run([calls_turn(call("silent")), {"text": "ok"}], [silent], events)
    event = events.results()["c_silent"]
    assert event.data is None and event.data_omitted_chars is None
    assert '"data"' not in event.model_dump_json(exclude_none=True)


async def test_a_nested_tool_call_returns_the_inner_tools_data(events: Events) -> None:
    seen: list[Any] = []

    @tool(read_only=True)
    async def outer(ctx: ToolContext) -> str:
        """Calls rows."""
        assert ctx.call_tool is not None
        inner = await ctx.call_tool("rows", {})
        seen.append(inner.data)
        return "done"

    await run([calls_turn(call("outer")), {"text": "ok"}], [outer, rows], events)
    assert seen == [
        {"rows": [{"name": "alice"}, {"name": "bob"}], "api_key": "sk-live-abcd1234efgh5678"}
    ]


def _mcp_tool(result: Any) -> Any:
    """An MCP-style tool whose server answers `result` (a `CallToolResult`)."""
    from heron.mcp.client.tool import render_call_result
    from heron.tools.definition import ToolAnnotations, ToolSpec

    class Weather:
        spec = ToolSpec(
            name="wx__now",
            description="Current weather.",
            parameters={"type": "object", "properties": {}},
            annotations=ToolAnnotations(read_only=True),
            owner="mcp:wx",
        )

        def validate(self, arguments: Any) -> dict[str, Any]:
            return dict(arguments)

        async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return render_call_result(result)

    return Weather()


async def test_mcp_structured_content_missing_from_the_text_is_shown_to_the_model(
    events: Events,
) -> None:
    import mcp_types

    from heron.mcp.client.tool import STRUCTURED_LABEL

    weather = {"temperature": 21.5, "conditions": "Sunny", "city": "Zürich"}
    answer = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="It is sunny.")],
        structured_content=weather,
    )
    result = await run([calls_turn(call("wx__now")), {"text": "ok"}], [_mcp_tool(answer)], events)
    content = tool_messages(result.history)["c_wx__now"].content
    compact = json.dumps(weather, ensure_ascii=False, separators=(",", ":"))
    assert content == f"It is sunny.\n\n{STRUCTURED_LABEL}\n{compact}"
    assert events.results()["c_wx__now"].data == weather


WEATHER = {"temperature": 21.5, "conditions": "Sunny"}


@pytest.mark.parametrize(
    ("structured", "text"),
    [
        (WEATHER, json.dumps(WEATHER)),
        (WEATHER, json.dumps(WEATHER, indent=2)),
        (WEATHER, f"Now: {json.dumps(WEATHER, separators=(',', ':'))}"),
        (WEATHER, "Sunny at 21.5 degrees."),
        ({"result": "42"}, "42"),  # how SDKs wrap a plain return value
        ({"content": "remember the milk\n"}, "remember the milk\n"),
    ],
)
async def test_mcp_structured_content_already_in_the_text_is_not_repeated(
    structured: dict[str, Any], text: str
) -> None:
    import mcp_types

    answer = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=text)], structured_content=structured
    )
    result = await run([calls_turn(call("wx__now")), {"text": "ok"}], [_mcp_tool(answer)], Events())
    assert tool_messages(result.history)["c_wx__now"].content == text


async def test_mcp_structured_content_without_text_is_the_text(events: Events) -> None:
    import mcp_types

    answer = mcp_types.CallToolResult(content=[], structured_content={"n": 1})
    result = await run([calls_turn(call("wx__now")), {"text": "ok"}], [_mcp_tool(answer)], events)
    assert tool_messages(result.history)["c_wx__now"].content == '{"n": 1}'
    assert events.results()["c_wx__now"].data == {"n": 1}


# --- one scrub for a call's card and its observer record -------------------------------------

SHAPED = "token=QWxhZGRpbjpvcGVuIHNlc2FtZQ== "


@pytest.mark.parametrize(
    ("text", "card", "record"),
    [
        ("4", 20_000, 1000),
        (SHAPED * 3, 20_000, 1000),
        (SHAPED * 5, 20_000, 30),  # cut by the record's limit, pre-cut by neither
        (SHAPED * 400, 20_000, 1000),  # pre-cut for the record only
        (SHAPED * 400, 0, 1000),  # an unbounded card
        ("x" * 50 + SHAPED, 10, 10),  # pre-cut for both
    ],
)
def test_render_bounded_twice_is_render_bounded_for_each_limit(
    text: str, card: int, record: int
) -> None:
    assert render_bounded_twice(text, card, record) == (
        render_bounded(text, card),
        render_bounded(text, record),
    )
