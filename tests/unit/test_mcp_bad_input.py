"""Hostile input across MCP, through the real engine and real MCP servers: non-finite numbers
never reach a server, payloads over the input limits are kept out of the turn, and a message
the SDK cannot parse fails its call at once instead of hanging it until the timeout."""

from __future__ import annotations

import json
import time
from typing import Any

from heron import Agent, FunctionModel, ModelTurn
from heron.mcp.client import McpClientManager
from heron.mcp.config import McpServerConfig
from heron.models.base import ModelRequest
from heron.models.scripted import ScriptedCall
from support.engine import Events
from support.mcp_servers import probe_server


def server(scenario: str) -> McpServerConfig:
    return McpServerConfig.model_validate(probe_server(scenario, timeout_s=60))


def calling(*calls: tuple[str, str]) -> FunctionModel:
    """One round of calls (name, raw argument JSON), then a final answer; calls run one after
    the other (MCP tools of untrusted servers are never parallel)."""

    def turn(request: ModelRequest) -> ModelTurn | str:
        if len(request.messages) > 1:
            return "done"
        return ModelTurn(
            tool_calls=[
                ScriptedCall(id=f"c{i}", name=name, arguments=raw)
                for i, (name, raw) in enumerate(calls)
            ]
        )

    return FunctionModel(turn)


async def run(manager: McpClientManager, *calls: tuple[str, str]) -> dict[str, Any]:
    tools, problems = await manager.tools()
    assert problems == {}
    events = Events()
    result = await Agent(model=calling(*calls), tools=tools, autonomy="full").run("go", sink=events)
    assert result.ok
    events.assert_one_pair_per_call()
    return {e.id: e for e in events.of("tool_result")}


async def test_non_finite_numbers_are_refused_before_an_mcp_server_sees_them() -> None:
    async with McpClientManager({"h": server("hostile")}) as manager:
        results = await run(
            manager,
            ("h__record", '{"value": NaN}'),
            ("h__record", '{"value": Infinity}'),
            ("h__record", '{"value": 1' + "0" * 400 + "}"),
            ("h__record", '{"value": 2.5}'),
        )
    invalid = "Error: invalid arguments for 'h__record': value: expected a finite number, got "
    assert [results[f"c{i}"].output.split(". Nothing")[0] for i in range(3)] == [
        invalid + "NaN",
        invalid + "Infinity",
        invalid + "integer of 401 digits",
    ]
    assert results["c3"].output == "float 2.5"  # the one valid call reached the server


async def test_structured_content_over_the_depth_limit_is_kept_out_of_the_turn() -> None:
    async with McpClientManager({"r": server("raw-hostile")}) as manager:
        results = await run(manager, ("r__deep", '{"levels": 150}'), ("r__deep", '{"levels": 3}'))
    deep, shallow = results["c0"], results["c1"]
    assert deep.success and deep.data is None
    assert "[structured data not kept: x" in deep.output
    assert "nested more than 64 levels deep" in deep.output
    assert shallow.data == {"x": {"a": {"a": {"a": 1}}}}


async def test_a_message_the_sdk_cannot_parse_fails_its_call_at_once() -> None:
    async with McpClientManager({"r": server("raw-hostile")}) as manager:
        started = time.monotonic()
        results = await run(manager, ("r__deep", '{"levels": 5000}'), ("r__odd_text", "{}"))
        assert time.monotonic() - started < 30  # never the 60 s call timeout
    for result in results.values():
        assert not result.success
        assert "sent a message heron cannot read" in result.output
        assert "heron closed the connection" in result.output
    assert "recursion limit exceeded" in results["c0"].output


async def test_a_servers_backtracking_schema_patterns_are_checked_in_linear_time() -> None:
    # Under jsonschema's own re.search each refused call below takes days.
    trap = "a" * 40 + "!"
    key = "x" * 40 + "!"
    async with McpClientManager({"r": server("raw-hostile")}) as manager:
        results = await run(
            manager,
            ("r__trap", json.dumps({"code": trap})),
            ("r__trap", json.dumps({"code": "aaa", key: 1})),
            ("r__trap", json.dumps({"code": "aaa", "xxy": 1})),
        )
    refused, extra, accepted = results["c0"], results["c1"], results["c2"]
    assert not refused.success
    assert f"code: '{trap}' does not match '^(a+)+$'" in refused.output
    assert not extra.success and f"unexpected argument '{key}'" in extra.output
    assert accepted.success and accepted.output == "accepted"
