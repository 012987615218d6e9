"""heron's tools served to other MCP clients (`heron mcp serve`), through heron's lifecycle.

- `tool_server`: `ToolServer` — the MCP handlers (listing with MCP hints, `tools/call` and its
  `input_required` rounds, `logging/setLevel`, resources), sessions, stdio and Streamable HTTP;
- `lifecycle`: one served call through the engine's own preparation, approval, dispatch,
  recording and loop detection;
- `notifications`: the engine's events as progress and log notifications;
- `asking`: approval asks the connected client (`input_required` rounds with sealed,
  single-use request state on 2026-07-28; `elicitation/create` before it), else policy denies;
- `artifacts`: spilled large outputs as resources, read page by page with `resources/read`.
"""

from __future__ import annotations

from heron.mcp.server.lifecycle import CallRecord
from heron.mcp.server.tool_server import ToolServer, Transport, mcp_annotations

__all__ = ["CallRecord", "ToolServer", "Transport", "mcp_annotations"]
