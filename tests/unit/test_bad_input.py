"""Bad input through the public Python API (`heron.Agent` with `FunctionModel`): arguments
nested far too deep, lone surrogates, non-finite numbers; tool results, progress lines, model
text and prompts that are not Unicode or too deep. Nothing escapes `Agent.run`, every call is
answered once, and the history, the events and the session store can hold what came back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import heron.safety.secrets as secrets_module
from heron import Agent, FunctionModel, ModelTurn, tool
from heron.always_on.bus.model import BusEvent, EventContent
from heron.messages import AssistantMessage, ToolResultMessage, UserMessage
from heron.models.base import ModelRequest
from heron.models.scripted import ScriptedCall
from heron.safety.secrets import KnownSecrets
from heron.sessions.sqlite_store import SqliteSessionStore
from heron.tools.definition import ToolAnnotations, ToolContext, ToolResult, ToolSpec
from heron.tools.validation import SchemaValidator
from support.engine import Events

INVALID = "Error: invalid arguments for '{}': "
DEEP_TEXT = '{"items": ' + "[" * 100_000 + "]" * 100_000 + "}"

received: list[tuple[str, dict[str, Any]]] = []


@tool
def tally(items: list[int], scale: float = 1.0) -> str:
    """Add the items up.

    Args:
        items: numbers to add.
        scale: a factor.
    """
    received.append(("tally", {"items": items, "scale": scale}))
    return str(sum(items) * scale)


class Store:
    """A class tool with a hand-written schema that allows anything under `value`."""

    spec = ToolSpec(
        name="store",
        description="Store a value.",
        parameters={"type": "object", "properties": {"value": {}}, "required": ["value"]},
        annotations=ToolAnnotations(read_only=True),
    )

    def __init__(self) -> None:
        self._validator = SchemaValidator("store", self.spec.parameters)

    def validate(self, arguments: Any) -> dict[str, Any]:
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        received.append(("store", arguments))
        return ToolResult.ok("stored")


def model(*calls: tuple[str, Any], text: str = "done") -> FunctionModel:
    """One round of calls (name, raw JSON text or a dict), then `text`."""

    def turn(request: ModelRequest) -> ModelTurn | str:
        if isinstance(request.messages[-1], UserMessage):
            return ModelTurn(
                tool_calls=[
                    ScriptedCall(id=f"c{i}", name=name, arguments=arguments)
                    for i, (name, arguments) in enumerate(calls)
                ]
            )
        return text

    return FunctionModel(turn)


async def run(*calls: tuple[str, Any], tools: list[Any] | None = None) -> tuple[Any, Events]:
    events = Events()
    agent = Agent(model=model(*calls), tools=tools or [tally, Store()], autonomy="full")
    result = await agent.run("go", sink=events)
    assert result.ok
    events.assert_one_pair_per_call()
    for event in events.all:  # every event renders as JSON
        json.loads(event.model_dump_json())
    json.dumps([m.model_dump(mode="json") for m in result.history])
    return result, events


def assert_storable(state_dir: Path, history: list[Any]) -> None:
    """The history goes into a real session store and comes back the same."""
    store = SqliteSessionStore.open(state_dir)
    try:
        store.append("s", history)
        assert store.load("s") == history
    finally:
        store.close()


def outputs(events: Events) -> list[str]:
    return [e.output.split(". Nothing was run")[0] for e in events.of("tool_result")]


@pytest.fixture(autouse=True)
def _clear() -> None:
    received.clear()


async def test_arguments_nested_far_too_deep_are_refused_at_parse_time() -> None:
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    _, events = await run(("tally", DEEP_TEXT), ("store", {"value": deep}))
    limit = "nested more than 64 levels deep (the limit of heron's input checks)"
    assert outputs(events) == [
        INVALID.format("tally") + "arguments: " + limit,
        INVALID.format("store") + "value" + "[0]" * 63 + ": " + limit,
    ]
    assert received == []
    # The refused call's arguments are not kept: the history holds `{}`.
    assert [c.arguments for c in events.of("tool_call")] == [{}, {}]


async def test_non_finite_and_huge_numbers_are_refused_for_function_and_class_tools() -> None:
    _, events = await run(
        ("tally", '{"items": [1, NaN]}'),
        ("tally", '{"items": [1], "scale": Infinity}'),
        ("tally", '{"items": [1], "scale": 1e400}'),
        ("store", '{"value": {"n": -Infinity}}'),
        ("store", '{"value": 1' + "0" * 400 + "}"),
        ("store", {"value": float("nan")}),
        ("tally", '{"items": [1, 2], "scale": 0.5}'),
    )
    finite = "expected a finite number, got "
    assert outputs(events) == [
        INVALID.format("tally") + "items[1]: " + finite + "NaN",
        INVALID.format("tally") + "scale: " + finite + "Infinity",
        INVALID.format("tally") + "scale: " + finite + "1e400",
        INVALID.format("store") + "value.n: " + finite + "-Infinity",
        INVALID.format("store") + "value: " + finite + "integer of 401 digits",
        INVALID.format("store") + "value: " + finite + "NaN",
        "1.5",
    ]
    assert received == [("tally", {"items": [1, 2], "scale": 0.5})]


async def test_a_lone_surrogate_in_arguments_is_refused_and_the_history_stays_storable(
    tmp_path: Path,
) -> None:
    result, events = await run(
        ("store", '{"value": "half a character: \\ud800"}'),
        ("store", {"value": {"k\udcff": 1}}),
    )
    problem = "text holds a lone surrogate ({}), which is not Unicode; send the character itself"
    assert outputs(events) == [
        INVALID.format("store") + "value: " + problem.format("\\ud800") + " or a valid "
        "surrogate pair",
        INVALID.format("store") + "value.k\\xff: " + problem.format("\\udcff") + " or a valid "
        "surrogate pair",
    ]
    assert_storable(tmp_path, result.history)


async def test_tool_output_progress_and_model_text_that_are_not_unicode_get_the_replacement(
    tmp_path: Path,
) -> None:
    @tool
    def listing(ctx: ToolContext) -> ToolResult:
        """List odd names."""
        ctx.progress("looking at caf\udce9")
        return ToolResult.ok("caf\udce9.txt\nhalf \ud800", data={"names": ["caf\udce9.txt"]})

    def turn(request: ModelRequest) -> ModelTurn | str:
        if isinstance(request.messages[-1], UserMessage):
            return ModelTurn(tool_calls=[ScriptedCall(id="c1", name="listing")])
        return "seen caf\udce9"

    events = Events()
    agent = Agent(model=FunctionModel(turn), tools=[listing], autonomy="full")
    result = await agent.run("list caf\udce9", sink=events)
    [progress] = events.of("progress")
    assert progress.message == "looking at caf\\xe9"
    [done] = events.of("tool_result")
    assert done.output == "caf\\xe9.txt\nhalf \\ud800"
    assert done.data == {"names": ["caf\\xe9.txt"]}
    assert result.text == "seen caf\\xe9"
    assert isinstance(result.history[0], UserMessage)
    assert result.history[0].content == "list caf\\xe9"
    assert isinstance(result.history[2], ToolResultMessage)
    assert result.history[2].content == "caf\\xe9.txt\nhalf \\ud800"
    assert isinstance(result.history[-1], AssistantMessage)
    for event in events.all:
        json.loads(event.model_dump_json())
    assert_storable(tmp_path, result.history)


async def test_structured_data_over_the_limits_is_dropped_and_the_text_result_kept() -> None:
    deep: Any = "leaf"
    for _ in range(10_000):
        deep = {"a": deep}

    @tool
    def report() -> ToolResult:
        """A report with deep data."""
        return ToolResult.ok("the report", data=deep)

    @tool
    def raw() -> dict[str, Any]:
        """Returns a deep value, which the tool turns into JSON itself."""
        return {"v": deep}

    _, events = await run(("report", "{}"), ("raw", "{}"), tools=[report, raw])
    first, second = events.of("tool_result")
    assert first.success and first.data is None
    assert first.output.startswith("the report\n[structured data not kept: a.a.a")
    assert first.output.endswith(
        "nested more than 64 levels deep (the limit of heron's input checks)]"
    )
    assert not second.success
    assert "Maximum serialization depth exceeded" in second.output


# -- the replacement and known secrets ------------------------------------------------------

# A secret whose value holds an undecodable byte, as `os.environ` gives it (`surrogateescape`).
ODD_SECRET = "token-caf\udce9-0123456789"
MARK = "«secret:SHOP_TOKEN»"


@pytest.fixture
def odd_secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(secrets_module, "_registry", KnownSecrets({"SHOP_TOKEN": ODD_SECRET}))
    return ODD_SECRET


async def test_a_known_secret_is_masked_before_the_text_replacement(
    odd_secret: str, tmp_path: Path
) -> None:
    @tool
    def leak() -> ToolResult:
        """Print the token."""
        return ToolResult.ok(f"token: {odd_secret}, file caf\udce9", data={"t": odd_secret})

    def turn(request: ModelRequest) -> ModelTurn | str:
        if isinstance(request.messages[-1], UserMessage):
            return ModelTurn(tool_calls=[ScriptedCall(id="c1", name="leak")])
        return "done"

    events = Events()
    agent = Agent(model=FunctionModel(turn), tools=[leak], autonomy="full")
    result = await agent.run(f"use {odd_secret}", sink=events)
    # Masked first: the placeholder, never the secret in its replaced form (`token-caf\xe9-…`).
    [done] = events.of("tool_result")
    assert done.output == f"token: {MARK}, file caf\\xe9"
    assert done.data == {"t": MARK}
    assert isinstance(result.history[0], UserMessage)
    assert result.history[0].content == f"use {MARK}"
    assert isinstance(result.history[2], ToolResultMessage)
    assert result.history[2].content == f"token: {MARK}, file caf\\xe9"
    stored = json.dumps([m.model_dump(mode="json") for m in result.history])
    assert "token-caf" not in stored
    assert_storable(tmp_path, result.history)


def test_bus_event_content_is_checked_then_masked_then_cleaned(odd_secret: str) -> None:
    content = EventContent(text=f"{odd_secret} caf\udce9", data={"k": [odd_secret, "\ud800"]})
    assert content.text == f"{MARK} caf\\xe9"
    assert content.data == {"k": [MARK, "\\ud800"]}
    # The limits come before the masking, which walks the data: a refusal, not RecursionError.
    deep: Any = odd_secret
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValidationError, match="nested more than 64 levels deep"):
        BusEvent(
            kind="webhook.received",
            source="stranger",
            channel="webhook",
            content=EventContent(data={"deep": deep}),
        )
