"""Class-based tools through the loop, and the terminal approval front end."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, ApprovalRequest, ScriptedModel, TerminalApprover, ToolContext, ToolResult
from heron.messages import ToolResultMessage
from heron.tools.definition import ToolAnnotations, ToolSpec
from heron.tools.validation import SchemaValidator
from support.engine import Events, call, calls_turn


class Thermostat:
    """A class-based tool: its own JSON Schema, validated strictly by `SchemaValidator`."""

    def __init__(self) -> None:
        self.spec = ToolSpec(
            name="set_temperature",
            description="Set the target temperature in whole degrees Celsius.",
            parameters={
                "type": "object",
                "properties": {"celsius": {"type": "integer", "minimum": 5, "maximum": 30}},
                "required": ["celsius"],
                "additionalProperties": False,
            },
            annotations=ToolAnnotations(idempotent=True),
            owner="plugin:home",
        )
        self._validator = SchemaValidator(self.spec.name, self.spec.parameters)
        self.target: int | None = None

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        self.target = arguments["celsius"]
        return ToolResult.ok(f"target set to {self.target} °C")


async def test_class_based_tool_runs_and_is_validated_strictly(events: Events) -> None:
    thermostat = Thermostat()
    turns = [
        calls_turn(call("set_temperature", "bad1", celsius=21.0)),
        calls_turn(call("set_temperature", "bad2", celsius=21, mode="eco")),
        calls_turn(call("set_temperature", "good", celsius=21)),
        {"text": "done"},
    ]
    agent = Agent(model=ScriptedModel(turns), tools=[thermostat], autonomy="full")
    result = await agent.run("warm it up", sink=events)
    got = {m.call_id: m.content for m in result.history if isinstance(m, ToolResultMessage)}
    assert "celsius: expected integer" in got["bad1"]
    assert "unexpected argument 'mode'" in got["bad2"]
    assert got["good"] == "target set to 21 °C"
    assert thermostat.target == 21
    assert events.of("tool_call")[-1].owner == "plugin:home"


def _request() -> ApprovalRequest:
    return ApprovalRequest(
        request_id="apr-1", call_id="c1", tool="shell", summary="command: ls", turn_id="t"
    )


async def test_terminal_approver_prompts_once_and_parses_the_answer() -> None:
    out = io.StringIO()
    paused: list[bool] = []
    approver = TerminalApprover(
        prompt_out=out, read_line=lambda: "a\n", before_prompt=lambda: paused.append(True)
    )
    answer = await approver.ask(_request())
    assert answer is not None
    assert (answer.decision, answer.decided_by) == ("always", "operator:cli")
    assert "heron wants to run shell" in out.getvalue() and "command: ls" in out.getvalue()
    assert paused == [True]


async def test_terminal_read_error_denies_without_falling_back() -> None:
    def broken() -> str:
        raise OSError("tty gone")

    approver = TerminalApprover(prompt_out=io.StringIO(), read_line=broken)
    answer = await approver.ask(_request())
    assert answer is not None and answer.decision == "no"


async def test_terminal_end_of_input_is_a_denial() -> None:
    approver = TerminalApprover(prompt_out=io.StringIO(), read_line=lambda: "")
    answer = await approver.ask(_request())
    assert answer is not None and answer.decision == "no"


async def test_cancelled_terminal_prompt_leaves_no_reader_to_swallow_the_next_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    read_end, write_end = os.pipe()
    fake_stdin = os.fdopen(read_end, "r")
    monkeypatch.setattr(sys, "stdin", fake_stdin)
    prompted = asyncio.Event()
    approver = TerminalApprover(
        prompt_out=io.StringIO(), before_prompt=prompted.set, tty_path=str(tmp_path / "no-tty")
    )
    first = asyncio.create_task(approver.ask(_request()))
    # `before_prompt` runs in the step that goes on to register the reader and then wait:
    # by the time this task wakes, the reader is in place.
    await asyncio.wait_for(prompted.wait(), 5)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    second = asyncio.create_task(approver.ask(_request()))
    os.write(write_end, b"yes\n")
    answer = await asyncio.wait_for(second, 5)
    assert answer is not None and answer.decision == "yes"
    os.close(write_end)
    monkeypatch.undo()
    fake_stdin.close()
