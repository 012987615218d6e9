"""heron's tools served to other MCP clients (`heron mcp serve`), through heron's lifecycle.

- `tool_server`: `ToolServer` — listing with MCP hints, every `tools/call` through the engine's
  own preparation, approval, dispatch, recording and loop detection, progress and log
  notifications, `logging/setLevel`, stdio and Streamable HTTP;
- `asking`: approval asks the connected client (`input_required` rounds with sealed,
  single-use request state on 2026-07-28; `elicitation/create` before it), else policy denies;
- `artifacts`: spilled large outputs as resources, read page by page with `resources/read`.
"""

from __future__ import annotations

from heron.mcp.server.tool_server import CallRecord, ToolServer, Transport, mcp_annotations

__all__ = ["CallRecord", "ToolServer", "Transport", "mcp_annotations"]
