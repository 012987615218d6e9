"""Entry point that the official MCP conformance suite drives as the client under test.

The suite (`@modelcontextprotocol/conformance`, ``conformance client --command ...``) starts a
scenario server, runs ``python -m heron.mcp.conformance_client <server-url>`` with the scenario
name in ``MCP_CONFORMANCE_SCENARIO``, and then checks what the client did on the wire.

Everything goes through heron's own `McpClientManager` and `McpTool`, the code `heron run` uses,
with one Streamable HTTP server configured at heron's defaults and no trust store: connect
(discovery probe, then the initialize handshake), list the tools, then validate arguments
strictly and call every tool once, rendering each result as a heron `ToolResult`. No step
depends on the scenario, so a scenario exercises exactly what a user's configuration would.

heron has no OAuth and does not answer elicitation or sampling requests, so the scenarios
that need them fail by design (``scripts/run-mcp-conformance.sh`` lists each with its reason);
``MCP_CONFORMANCE_CONTEXT``, which carries OAuth client credentials, is therefore not read.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from heron.mcp.client import McpClientManager, McpTool
from heron.mcp.config import McpServerConfig
from heron.tools.definition import ToolContext

__all__ = ["SERVER_NAME", "TOOL_ARGUMENTS", "main", "run_scenario"]

SERVER_NAME = "conformance"
"""The name the scenario server gets in heron's configuration (its tools are `conformance__*`)."""

TOOL_ARGUMENTS: Mapping[str, Mapping[str, Any]] = {"add_numbers": {"a": 5, "b": 3}}
"""Arguments for the scenario servers' tools that take any; every other tool gets `{}`."""


def _log(line: str) -> None:
    # stdout and stderr are both captured into the suite's results; stderr keeps stdout clean.
    print(f"heron-conformance: {line}", file=sys.stderr, flush=True)


async def run_scenario(url: str, scenario: str = "") -> int:
    """Connect heron's MCP client to `url`, list the server's tools and call each one once.

    Returns the exit status: 0 when the server could be listed and every call succeeded,
    1 otherwise (the reason is logged on stderr). `scenario` is only logged.
    """
    label = scenario or "(no scenario)"
    async with McpClientManager({SERVER_NAME: McpServerConfig(url=url)}) as manager:
        tools, problems = await manager.tools()
        if problems:
            _log(f"{label}: cannot list tools: {problems[SERVER_NAME]}")
            return 1
        _log(f"{label}: connected; tools: {', '.join(t.definition.name for t in tools) or '-'}")
        called = [await _call_once(tool) for tool in tools]
        return 0 if all(called) else 1


async def _call_once(tool: McpTool) -> bool:
    name = tool.definition.name
    ctx = ToolContext(call_id=f"conformance-{name}", turn_id="conformance", progress=_log)
    arguments = tool.validate(TOOL_ARGUMENTS.get(name, {}))
    result = await tool.execute(arguments, ctx)
    outcome = "ok" if result.success else "failed"
    _log(f"{tool.spec.name} {outcome}: {result.output if result.success else result.error}")
    return result.success


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m heron.mcp.conformance_client <server-url>`` (the suite appends the URL)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        _log("usage: python -m heron.mcp.conformance_client <server-url>")
        return 2
    return asyncio.run(run_scenario(args[0], os.environ.get("MCP_CONFORMANCE_SCENARIO", "")))


if __name__ == "__main__":
    sys.exit(main())
