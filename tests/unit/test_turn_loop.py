"""Loop control: final answers, iteration cap, loop detection, text protocol, steering, budgets,
and the provider history rules every request must satisfy."""

from __future__ import annotations

from typing import Any

import pytest

from heron import (
    Agent,
    FunctionModel,
    IterationBudget,
    ModelRequest,
    ModelTurn,
    RuntimeKnobs,
    ScriptedModel,
    TurnState,
    tool,
)
from heron.messages import AssistantMessage, ToolCallPart, ToolResultMessage, UserMessage
from heron.models import text_protocol
from heron.models.base import InvalidHistoryError
from heron.models.history_rules import HistoryChecker
from heron.models.scripted import ScriptMismatchError
from heron.turn.events import ErrorEvent, ending, ending_now
from support.engine import Events, call, calls_turn

counter: dict[str, int] = {"n": 0}


@tool(read_only=True)
def ping(host: str) -> str:
    """Ping a host.

    Args:
        host: Host name.
    """
    return f"pong from {host}"


@tool(read_only=True)
def tick() -> str:
    """Returns a new number every call."""
    counter["n"] += 1
    return str(counter["n"])


async def test_final_answer_ends_the_turn_with_one_final_event(events: Events) -> None:
    model = ScriptedModel([{"text": "Hello!"}])
    result = await Agent(model=model).run("hi", sink=events)
    assert result.ok and result.text == "Hello!"
    assert [e.type for e in events.all] == ["text_delta", "final"]
    assert [m.role for m in result.history] == ["user", "assistant"]


async def test_iteration_cap_asks_for_a_summary_without_tools(events: Events) -> None:
    turns = [calls_turn(call("tick", f"c{i}")) for i in range(3)] + [{"text": "summary"}]
    model = ScriptedModel(turns)
    agent = Agent(model=model, tools=[tick], knobs=RuntimeKnobs(max_iterations=3))
    result = await agent.run("go", sink=events)
    assert (result.outcome.status, result.outcome.reason, result.text) == (
        "final",
        "iteration_cap",
        "summary",
    )
    assert model.requests[-1].tools == ()
    asked = model.messages_at(-1)[-1]
    assert isinstance(asked, UserMessage) and asked.source == "runtime"
    assert "maximum number of tool iterations" in asked.content


async def test_iteration_cap_can_be_an_error(events: Events) -> None:
    turns = [calls_turn(call("tick", f"c{i}")) for i in range(2)]
    agent = Agent(
        model=ScriptedModel(turns),
        tools=[tick],
        knobs=RuntimeKnobs(max_iterations=2, cap_behavior="error"),
    )
    result = await agent.run("go", sink=events)
    assert result.outcome.status == "error"
    assert events.of("error")[0].message == "exceeded the maximum of 2 tool iterations"


async def test_shared_budget_spans_parent_and_nested_runs() -> None:
    budget = IterationBudget(3)
    parent = Agent(model=ScriptedModel([calls_turn(call("tick")), {"text": "p"}]), tools=[tick])
    child = Agent(model=ScriptedModel([{"text": "c"}, {"text": "never"}]), tools=[tick])
    await parent.run("go", budget=budget)
    assert budget.remaining == 1
    await child.run("go", budget=budget)
    assert budget.remaining == 0
    capped = Agent(model=ScriptedModel([{"text": "summary"}]))
    result = await capped.run("go", budget=budget)
    assert result.outcome.reason == "iteration_cap"


async def test_exact_repeat_warns_then_blocks_what_the_model_sees_then_breaks(
    events: Events,
) -> None:
    turns = [calls_turn(call("ping", f"c{i}", host="a")) for i in range(5)] + [
        {"text": "I was looping; summary."}
    ]
    model = ScriptedModel(turns)
    result = await Agent(model=model, tools=[ping]).run("go", sink=events)
    contents = [m.content for m in result.history if isinstance(m, ToolResultMessage)]
    assert contents[0] == contents[1] == "pong from a"
    assert contents[2].startswith("pong from a\n\n[heron loop detector] ")
    assert "result withheld" in contents[3] and "pong from a" not in contents[3]
    assert "result withheld" in contents[4]
    assert [e.level for e in events.of("loop_detected")] == ["warn", "block", "break"]
    assert result.outcome.reason == "loop_break"
    asked = model.messages_at(-1)[-1]
    assert isinstance(asked, UserMessage) and "loop detector stopped the tool loop" in asked.content


async def test_loop_detection_can_be_switched_off_and_ignores_listed_tools() -> None:
    from heron import LoopDetectionKnobs

    turns = [calls_turn(call("ping", f"c{i}", host="a")) for i in range(6)] + [{"text": "ok"}]
    knobs = RuntimeKnobs(loop_detection=LoopDetectionKnobs(ignore_tools=frozenset({"ping"})))
    result = await Agent(model=ScriptedModel(turns), tools=[ping], knobs=knobs).run("go")
    assert result.outcome.reason == "answer"


async def test_steering_messages_are_appended_at_the_next_safe_point() -> None:
    state: TurnState

    @tool(read_only=True)
    def work() -> str:
        """Work."""
        state.steering.append("reply in Japanese")
        return "worked"

    model = ScriptedModel(
        [
            calls_turn(call("work")),
            {"text": "はい", "expect": {"last_role": "user", "last_message_contains": "Japanese"}},
        ]
    )
    agent = Agent(model=model, tools=[work])
    state = TurnState(history=[UserMessage(content="do work")])
    outcome = await agent.run_turn(state)
    assert outcome.text == "はい"
    assert [m.role for m in state.history] == ["user", "assistant", "tool", "user", "assistant"]


async def test_safe_points_are_reported_after_tools_and_after_the_final_answer() -> None:
    points: list[str] = []

    async def on_safe_point(point: str) -> None:
        points.append(point)

    agent = Agent(model=ScriptedModel([calls_turn(call("tick")), {"text": "ok"}]), tools=[tick])
    state = TurnState(history=[UserMessage(content="go")])
    state.on_safe_point = on_safe_point  # type: ignore[assignment]
    await agent.run_turn(state)
    assert points == ["after_tools", "after_model"]


# -- text protocol -----------------------------------------------------------------------------


PING_B = '<tool_call>{"name": "ping", "arguments": {"host": "b"}}</tool_call>'


async def test_text_protocol_model_gets_instructions_and_its_calls_run(events: Events) -> None:
    model = ScriptedModel(
        [
            {"text": "Checking.\n" + PING_B},
            {"text": "b answered"},
        ],
        protocol="text",
    )
    result = await Agent(model=model, tools=[ping]).run("go", sink=events)
    assert result.text == "b answered"
    first = model.requests[0]
    assert first.tools == () and "ping" in first.system and "<tool_call>" in first.system
    assistant = result.history[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.text == "Checking."
    assert [c.name for c in assistant.tool_calls] == ["ping"]
    tool_result = result.history[2]
    assert isinstance(tool_result, ToolResultMessage) and tool_result.content == "pong from b"
    assert [e.text for e in events.of("text_delta")] == ["Checking.", "b answered"]


async def test_malformed_text_protocol_gets_corrective_retries_then_recovers(
    events: Events,
) -> None:
    bad = {"text": "<tool_call>{not json</tool_call>"}
    model = ScriptedModel([bad, {"text": "plain answer"}], protocol="text")
    result = await Agent(model=model, tools=[ping]).run("go", sink=events)
    assert result.text == "plain answer"
    feedback = [m for m in result.history if isinstance(m, UserMessage) and m.source == "runtime"]
    (only,) = feedback
    assert only.content.startswith(text_protocol.PARSE_ERROR_FEEDBACK)
    assert "What was wrong:" in only.content and "JSON" in only.content


async def test_repeated_malformed_text_protocol_falls_back_safely(events: Events) -> None:
    bad = {"text": "<tool_call>{not json</tool_call>"}
    model = ScriptedModel([bad, bad, bad], protocol="text")
    result = await Agent(model=model, tools=[ping]).run("go", sink=events)
    assert result.outcome.reason == "malformed_protocol"
    assert result.text == text_protocol.MALFORMED_FALLBACK_ANSWER
    feedback = [m for m in result.history if isinstance(m, UserMessage) and m.source == "runtime"]
    assert len(feedback) == text_protocol.MAX_MALFORMED_RETRIES == 2


async def test_strict_parsing_hides_the_text_protocol_and_executes_nothing(
    events: Events,
) -> None:
    text = '<tool_call>{"name": "ping", "arguments": {"host": "b"}}</tool_call>'
    model = ScriptedModel([{"text": text}], protocol="text")
    agent = Agent(model=model, tools=[ping], knobs=RuntimeKnobs(strict_tool_parsing=True))
    result = await agent.run("go", sink=events)
    assert "<tool_call>" not in model.requests[0].system
    assert events.of("tool_call") == []
    assert result.text == text


async def test_json_in_prose_from_a_native_model_is_never_executed(events: Events) -> None:
    prose = 'You could call {"name": "ping", "arguments": {"host": "evil"}} yourself.'
    result = await Agent(model=ScriptedModel([{"text": prose}]), tools=[ping]).run(
        "go", sink=events
    )
    assert result.text == prose
    assert events.of("tool_call") == []


# -- models and history rules ------------------------------------------------------------------


async def test_exhausted_script_fails_the_run_loudly(events: Events) -> None:
    result = await Agent(model=ScriptedModel([calls_turn(call("tick"))]), tools=[tick]).run(
        "go", sink=events
    )
    assert result.outcome.status == "error"
    assert "script is exhausted" in (result.outcome.error or "")
    # The tool round is complete in history even though the model then failed.
    assert [m.role for m in result.history] == ["user", "assistant", "tool"]


async def test_scripted_expectation_mismatch_fails_the_run(events: Events) -> None:
    model = ScriptedModel([{"text": "x", "expect": {"tools_include": ["ping"]}}])
    result = await Agent(model=model).run("go", sink=events)
    assert result.outcome.status == "error"
    assert "tool 'ping' is not offered" in (result.outcome.error or "")


async def test_empty_model_response_is_an_error_not_an_empty_answer(events: Events) -> None:
    result = await Agent(model=ScriptedModel([{"text": ""}])).run("go", sink=events)
    assert result.outcome.status == "error"
    assert [m.role for m in result.history] == ["user"]


async def test_function_model_decides_each_turn_from_the_request(events: Events) -> None:
    def decide(request: ModelRequest) -> ModelTurn | str:
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):
            return f"the host said: {last.content}"
        return ModelTurn.model_validate(calls_turn(call("ping", host="c")))

    result = await Agent(model=FunctionModel(decide), tools=[ping]).run("go", sink=events)
    assert result.text == "the host said: pong from c"


def _assistant(*ids: str) -> AssistantMessage:
    return AssistantMessage(
        tool_calls=tuple(ToolCallPart(id=i, name="t", arguments={}) for i in ids)
    )


def _result(call_id: str) -> ToolResultMessage:
    return ToolResultMessage(call_id=call_id, name="t", content="r")


@pytest.mark.parametrize(
    ("history", "problem"),
    [
        ([UserMessage(content="u"), _assistant("a")], "unanswered"),
        ([UserMessage(content="u"), _result("x")], "never made"),
        ([UserMessage(content="u"), _assistant("a"), _result("a"), _result("a")], "answered twice"),
        (
            [
                UserMessage(content="u"),
                _assistant("a", "b"),
                _result("a"),
                UserMessage(content="x"),
            ],
            "comes before the results",
        ),
        (
            [UserMessage(content="u"), _assistant("a"), _result("a"), _assistant("a")],
            "duplicate tool call id",
        ),
        ([UserMessage(content="u"), AssistantMessage(text="")], "empty assistant message"),
    ],
)
def test_history_checker_rejects_what_real_providers_reject(
    history: list[Any], problem: str
) -> None:
    with pytest.raises(InvalidHistoryError, match=problem):
        HistoryChecker().check(history)


def test_history_checker_is_incremental_and_accepts_valid_growth() -> None:
    checker = HistoryChecker()
    history: list[Any] = [UserMessage(content="u"), _assistant("a", "b")]
    history += [_result("b"), _result("a")]
    checker.check(history)
    history += [AssistantMessage(text="done"), UserMessage(content="again")]
    checker.check(history)
    history.append(_result("zzz"))
    with pytest.raises(InvalidHistoryError):
        checker.check(history)


def test_script_files_load_from_json_and_yaml(tmp_path: Any) -> None:
    (tmp_path / "s.json").write_text('{"turns": [{"text": "hi"}]}')
    (tmp_path / "s.yaml").write_text("protocol: text\nturns:\n  - text: hi\n")
    assert ScriptedModel.from_file(tmp_path / "s.json").native_tools
    assert not ScriptedModel.from_file(tmp_path / "s.yaml").native_tools
    (tmp_path / "bad.yaml").write_text("turns:\n  - txt: hi\n")
    with pytest.raises(Exception, match="cannot load model script"):
        ScriptedModel.from_file(tmp_path / "bad.yaml")
    assert issubclass(ScriptMismatchError, Exception)


async def test_reused_or_missing_call_ids_are_replaced_by_unique_ones(events: Events) -> None:
    turns = [
        {
            "tool_calls": [
                {"id": "dup", "name": "tick"},
                {"id": "dup", "name": "ping", "arguments": {"host": "x"}},
            ]
        },
        {"tool_calls": [{"id": "dup", "name": "tick"}, {"name": "tick"}]},
        {"text": "ok"},
    ]
    result = await Agent(model=ScriptedModel(turns), tools=[tick, ping]).run("go", sink=events)
    assert result.ok
    ids = [c.id for m in result.history if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert len(ids) == len(set(ids)) == 4 and ids[0] == "dup"
    events.assert_one_pair_per_call()


async def test_assistant_turn_is_recorded_before_its_tools_run_and_every_append_is_reported() -> (
    None
):
    seen_by_tool: list[str] = []
    appended: list[str] = []
    state: TurnState

    @tool(read_only=True)
    def look() -> str:
        """Looks at the history."""
        last = state.history[-1]
        assert isinstance(last, AssistantMessage)
        seen_by_tool.append(last.tool_calls[0].id)
        return "seen"

    agent = Agent(model=ScriptedModel([calls_turn(call("look")), {"text": "ok"}]), tools=[look])
    state = TurnState(history=[UserMessage(content="go")])
    state.on_append = lambda messages: appended.extend(m.role for m in messages)
    await agent.run_turn(state)
    assert seen_by_tool == ["c_look"]
    assert appended == ["assistant", "tool", "assistant"]


async def test_native_calls_are_answered_even_when_no_tools_are_offered(events: Events) -> None:
    result = await Agent(model=ScriptedModel([calls_turn(call("ghost")), {"text": "ok"}])).run(
        "go", sink=events
    )
    assert events.results()["c_ghost"].status == "unknown"
    assert result.ok
    events.assert_one_pair_per_call()


async def test_text_and_final_events_are_scrubbed_while_history_keeps_the_words(
    events: Events,
) -> None:
    secret = "token=abcdefgh12345678"
    result = await Agent(model=ScriptedModel([{"text": f"your {secret}"}])).run("go", sink=events)
    assert secret in result.text
    rendered = [e.text for e in events.of("text_delta")] + [e.text for e in events.of("final")]
    assert all("abcdefgh12345678" not in text for text in rendered)


async def test_a_stream_that_dies_after_visible_text_is_recorded_as_interrupted(
    events: Events,
) -> None:
    from collections.abc import AsyncIterator

    from heron.models.base import ModelPart, StreamInterrupted, TextDelta

    class Dying:
        name = "dying"
        native_tools = True

        async def stream(self, request: ModelRequest) -> AsyncIterator[ModelPart]:
            yield TextDelta(text="The answer is")
            raise StreamInterrupted("connection reset", partial_text="The answer is")

    result = await Agent(model=Dying()).run("go", sink=events)
    assert result.outcome.status == "error"
    last = result.history[-1]
    assert isinstance(last, AssistantMessage)
    assert last.text == "The answer is\n\n[stream interrupted]"
    assert "connection reset" in events.of("error")[0].message


# -- fenced text-protocol calls and renamed call ids -------------------------------------------


def _fenced(label: str, *blocks: str) -> str:
    return f"```{label}\n" + "\n".join(blocks) + "\n```"


@pytest.mark.parametrize("label", ["xml", "json", ""])
async def test_prose_then_a_fenced_tool_call_runs_and_never_becomes_the_answer(
    label: str, events: Events
) -> None:
    reply = "Let me ping b first.\n\n" + _fenced(label, PING_B)
    model = ScriptedModel([{"text": reply}, {"text": "b answered"}], protocol="text")
    result = await Agent(model=model, tools=[ping]).run("go", sink=events)
    assert result.text == "b answered"
    assert [e.output for e in events.of("tool_result")] == ["pong from b"]
    assistant = result.history[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.text == "Let me ping b first."
    assert [c.arguments for c in assistant.tool_calls] == [{"host": "b"}]
    shown = "".join(e.text for e in events.of("text_delta"))
    assert "```" not in shown and "<tool_call>" not in shown
    events.assert_one_pair_per_call()


async def test_several_fenced_calls_with_prose_around_them_all_run_in_order(
    events: Events,
) -> None:
    ping_c = PING_B.replace('"b"', '"c"')
    reply = (
        "Two hosts.\n"
        + _fenced("xml", PING_B, ping_c)
        + "\nAnd one more:\n"
        + _fenced("", PING_B.replace('"b"', '"d"'))
        + "\nResults soon."
    )
    model = ScriptedModel([{"text": reply}, {"text": "all answered"}], protocol="text")
    result = await Agent(model=model, tools=[ping]).run("go", sink=events)
    assert result.text == "all answered"
    assert [e.output for e in events.of("tool_result")] == [
        "pong from b",
        "pong from c",
        "pong from d",
    ]
    assistant = result.history[1]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.text == "Two hosts.\n\nAnd one more:\n\nResults soon."


async def test_a_fenced_call_that_cannot_be_read_gets_a_corrective_message_not_an_answer(
    events: Events,
) -> None:
    broken = "Checking.\n" + _fenced("xml", '<tool_call>{"name": "ping", "arguments": {host}}')
    model = ScriptedModel([{"text": broken}, {"text": "plain answer"}], protocol="text")
    result = await Agent(model=model, tools=[ping]).run("go", sink=events)
    assert result.text == "plain answer"
    feedback = [m for m in result.history if isinstance(m, UserMessage) and m.source == "runtime"]
    assert len(feedback) == 1 and feedback[0].content.startswith(text_protocol.PARSE_ERROR_FEEDBACK)
    assert events.of("tool_call") == []


async def test_fenced_protocol_presented_as_an_example_is_answered_as_it_is(
    events: Events,
) -> None:
    reply = "For example, a call looks like this:\n" + _fenced("xml", PING_B)
    model = ScriptedModel([{"text": reply}], protocol="text")
    result = await Agent(model=model, tools=[ping]).run("how do I call ping?", sink=events)
    assert result.text == reply
    assert events.of("tool_call") == []


async def test_a_reused_call_id_is_renamed_and_the_rename_is_reported(events: Events) -> None:
    earlier: list[Any] = [
        UserMessage(content="before"),
        AssistantMessage(tool_calls=(ToolCallPart(id="old", name="tick", arguments={}),)),
        ToolResultMessage(call_id="old", name="tick", content="1"),
        AssistantMessage(text="done"),
    ]
    turns = [
        {
            "tool_calls": [
                {"id": "old", "name": "tick"},
                {"id": "fresh", "name": "ping", "arguments": {"host": "x"}},
                {"id": "fresh", "name": "ping", "arguments": {"host": "y"}},
            ]
        },
        {"text": "ok"},
    ]
    result = await Agent(model=ScriptedModel(turns), tools=[tick, ping]).run(
        "again", history=earlier, sink=events
    )
    assert result.ok
    renamed = events.of("call_id_renamed")
    assert [(e.old_id, e.name, e.reason) for e in renamed] == [
        ("old", "tick", "in_history"),
        ("fresh", "ping", "in_turn"),
    ]
    called = [e.id for e in events.of("tool_call")]
    assert called == [renamed[0].new_id, "fresh", renamed[1].new_id]
    ids = [
        c.id for m in result.history[4:] if isinstance(m, AssistantMessage) for c in m.tool_calls
    ]
    assert ids == called and len(set(ids)) == 3
    first_rename = events.all.index(renamed[0])
    assert first_rename < events.all.index(events.of("tool_call")[0])
    events.assert_one_pair_per_call()


async def test_a_text_protocol_call_copying_a_history_id_is_renamed_and_reported(
    events: Events,
) -> None:
    copied = '<tool_call>{"id": "c1", "name": "ping", "arguments": {"host": "b"}}</tool_call>'
    model = ScriptedModel(
        [{"text": PING_B.replace("{", '{"id": "c1", ', 1)}, {"text": copied}, {"text": "ok"}],
        protocol="text",
    )
    result = await Agent(model=model, tools=[ping]).run("go", sink=events)
    assert result.ok
    (renamed,) = events.of("call_id_renamed")
    assert (renamed.old_id, renamed.reason) == ("c1", "in_turn")
    assert [e.id for e in events.of("tool_call")] == ["c1", renamed.new_id]


async def test_missing_call_ids_are_filled_in_without_a_rename_event(events: Events) -> None:
    turns = [{"tool_calls": [{"name": "tick"}]}, {"text": "ok"}]
    await Agent(model=ScriptedModel(turns), tools=[tick]).run("go", sink=events)
    assert events.of("call_id_renamed") == []
    assert len(events.of("tool_call")) == 1


def test_an_ending_is_seen_inside_its_block_only_and_none_hides_an_outer_one() -> None:
    outer, inner = ErrorEvent(message="outer"), ErrorEvent(message="inner")
    assert ending_now() is None
    with ending(outer):
        assert ending_now() is outer
        with ending(None):
            assert ending_now() is None
        with ending(inner):
            assert ending_now() is inner
        assert ending_now() is outer
    with ending(None):
        assert ending_now() is None
    assert ending_now() is None
