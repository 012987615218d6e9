"""heron as an MCP client: a manager of server connections and the `Tool` wrapping MCP tools.

- `connection`: one live server connection (the official SDK's `mcp.Client` over stdio or
  Streamable HTTP, in a task of its own);
- `admission`: the pure decision to use, pin or refuse a started server, from its pin,
  identity, definitions and scan findings;
- `manager`: `McpClientManager` — lazy start, back-off, idle stop, health checks, status,
  approval, calls, resources and prompts;
- `calls`: one tool call on a connection and what each way it can fail means;
- `slots`: the manager's record of each server and the `ServerStatus` made from it;
- `login_gate`: the OAuth side of the manager (the auth hook, waiting for consent);
- `tool`: `McpTool`, one MCP tool as a heron `Tool`, and the rendering of call results;
- `resources`: resources and prompts (records, reading, and `resource_tools`, the two
  optional tools over them).
"""

from __future__ import annotations

from heron.mcp.client.errors import ServerAuthRequired, ServerRefused, ServerUnavailable
from heron.mcp.client.manager import McpClientManager, ServerStatus
from heron.mcp.client.resources import (
    McpPrompt,
    McpPromptArgument,
    McpPromptResult,
    McpResource,
    McpResourceContent,
    resource_tools,
)
from heron.mcp.client.tool import McpTool, render_call_result

__all__ = [
    "McpClientManager",
    "McpPrompt",
    "McpPromptArgument",
    "McpPromptResult",
    "McpResource",
    "McpResourceContent",
    "McpTool",
    "ServerAuthRequired",
    "ServerRefused",
    "ServerStatus",
    "ServerUnavailable",
    "render_call_result",
    "resource_tools",
]
