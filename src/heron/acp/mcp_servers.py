"""The editor's MCP servers (`mcpServers` of `session/new` and `session/load`) as heron's own
`[mcp.servers.NAME]` entries for that session's agent.

A stdio server runs in the session's workspace with the environment the editor gives it (on
top of heron's safe base environment); a Streamable HTTP server is reached with the editor's
headers. Both then go through everything a server of `heron.toml` goes through: trust pins
(`[mcp] approval`: pinned on first use, or refused until `heron mcp approve NAME`), the scan
of its descriptions, its tools' approvals. A server heron cannot take is left out with a line
on standard error, never an error for the session: an SSE or ACP-transport server, a name
heron cannot use, or one `heron.toml` already names (the configured one is kept).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from acp.schema import AcpMcpServer, HttpMcpServer, McpServerStdio, SseMcpServer
from pydantic import ValidationError

from heron.mcp.config import McpConfig, McpServerConfig

__all__ = ["EditorServer", "editor_servers"]

EditorServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio


def editor_servers(
    servers: Sequence[EditorServer] | None,
    *,
    workspace: Path,
    configured: Collection[str],
    log: Callable[[str], None],
) -> dict[str, McpServerConfig]:
    """The servers heron can connect for this session, by name (see the module docstring)."""
    found: dict[str, McpServerConfig] = {}
    for server in servers or ():
        name = server.name
        if name in configured:
            log(f"mcp server {name!r} of the editor: heron.toml has one of that name; using it")
            continue
        if name in found:
            log(f"mcp server {name!r} of the editor is named twice; using the first")
            continue
        try:
            if isinstance(server, McpServerStdio):
                entry = McpServerConfig(
                    command=server.command,
                    args=list(server.args),
                    env={v.name: v.value for v in server.env},
                    cwd=str(workspace),
                )
            elif isinstance(server, HttpMcpServer):
                entry = McpServerConfig(
                    url=server.url, headers={h.name: h.value for h in server.headers}
                )
            else:
                log(f"mcp server {name!r} of the editor: heron connects stdio and HTTP servers")
                continue
            McpConfig(servers={name: entry})  # the name rules of [mcp.servers]
        except ValidationError as exc:
            problems = "; ".join(str(e["msg"]) for e in exc.errors())
            log(f"mcp server {name!r} of the editor is left out: {problems}")
            continue
        found[name] = entry
    return found
