"""Resources and prompts of MCP servers: what they are, how they are read, and the two optional
tools (`mcp_resources`, `mcp_prompts`) for servers configured with `resources_as_tools`.

The manager reads them for its callers (`McpClientManager.list_resources` and the others) with
the functions here; `resource_tools` reaches them through any `ResourceSource`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import mcp_types

from heron.mcp.client.connection import Connection
from heron.mcp.client.tool import render_content
from heron.mcp.config import McpServerConfig
from heron.tools.definition import Tool, ToolResult
from heron.tools.function_tool import tool as function_tool

__all__ = [
    "McpPrompt",
    "McpPromptArgument",
    "McpPromptResult",
    "McpResource",
    "McpResourceContent",
    "ResourceSource",
    "get_prompt",
    "list_prompts",
    "list_resources",
    "read_resource",
    "resource_tools",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class McpResource:
    """A resource (document, data) a server offers."""

    server: str
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class McpResourceContent:
    """One part of a resource read: text, or decoded binary content."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: bytes | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class McpPromptArgument:
    """One argument of a prompt template."""

    name: str
    description: str | None = None
    required: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class McpPrompt:
    """A prompt template a server offers."""

    server: str
    name: str
    title: str | None = None
    description: str | None = None
    arguments: tuple[McpPromptArgument, ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class McpPromptResult:
    """A prompt template rendered with its arguments."""

    description: str | None
    messages: tuple[tuple[str, str], ...]
    """(role, rendered text) per message."""


async def list_resources(conn: Connection) -> list[McpResource]:
    """Resources the server offers."""
    pages = await conn.pages(lambda client, cursor: client.list_resources(cursor=cursor))
    return [
        McpResource(
            server=conn.name,
            uri=r.uri,
            name=r.name,
            title=r.title,
            description=r.description,
            mime_type=r.mime_type,
        )
        for page in pages
        for r in page.resources
    ]


async def read_resource(conn: Connection, uri: str) -> list[McpResourceContent]:
    """Read one resource without any tool call."""
    with conn.busy() as client:
        result = await client.read_resource(uri)
    out = []
    for item in result.contents:
        if isinstance(item, mcp_types.TextResourceContents):
            out.append(McpResourceContent(uri=item.uri, mime_type=item.mime_type, text=item.text))
        else:
            out.append(
                McpResourceContent(
                    uri=item.uri, mime_type=item.mime_type, blob=base64.b64decode(item.blob)
                )
            )
    return out


async def list_prompts(conn: Connection) -> list[McpPrompt]:
    """Prompt templates the server offers."""
    pages = await conn.pages(lambda client, cursor: client.list_prompts(cursor=cursor))
    return [
        McpPrompt(
            server=conn.name,
            name=p.name,
            title=p.title,
            description=p.description,
            arguments=tuple(
                McpPromptArgument(name=a.name, description=a.description, required=bool(a.required))
                for a in p.arguments or ()
            ),
        )
        for page in pages
        for p in page.prompts
    ]


async def get_prompt(
    conn: Connection, name: str, arguments: Mapping[str, str] | None = None
) -> McpPromptResult:
    """Render one prompt template with its arguments."""
    with conn.busy() as client:
        result = await client.get_prompt(name, dict(arguments or {}))
    return McpPromptResult(
        description=result.description,
        messages=tuple((m.role, render_content(m.content)) for m in result.messages),
    )


class ResourceSource(Protocol):
    """What `resource_tools` reads through (`McpClientManager` is one)."""

    @property
    def servers(self) -> list[str]: ...

    def config(self, server: str) -> McpServerConfig: ...

    async def list_resources(self, server: str) -> list[McpResource]: ...

    async def read_resource(self, server: str, uri: str) -> list[McpResourceContent]: ...

    async def list_prompts(self, server: str) -> list[McpPrompt]: ...

    async def get_prompt(
        self, server: str, name: str, arguments: Mapping[str, str] | None = None
    ) -> McpPromptResult: ...


def resource_tools(manager: ResourceSource) -> list[Tool]:
    """`mcp_resources` and `mcp_prompts`: resources and prompts of the servers configured with
    `resources_as_tools`, for models that should reach them through tool calls. Empty when no
    server opts in. (Resources and prompts are always reachable through the manager.)"""
    servers = [n for n in manager.servers if manager.config(n).resources_as_tools]
    if not servers:
        return []
    names = ", ".join(servers)

    async def mcp_resources(server: str, uri: str = "") -> ToolResult:
        if server not in servers:
            return ToolResult.fail(
                f"server {server!r} does not share resources; use one of {names}"
            )
        if not uri:
            listed = await manager.list_resources(server)
            lines = [
                f"{r.uri} - {r.title or r.name}" + (f": {r.description}" if r.description else "")
                for r in listed
            ]
            return ToolResult.ok("\n".join(lines) or "(no resources)")
        contents = await manager.read_resource(server, uri)
        parts = [
            c.text
            if c.text is not None
            else f"[{c.uri}: {c.mime_type or 'binary'}, {len(c.blob or b'')} bytes]"
            for c in contents
        ]
        return ToolResult.ok("\n".join(parts))

    async def mcp_prompts(
        server: str, name: str = "", arguments: dict[str, str] | None = None
    ) -> ToolResult:
        if server not in servers:
            return ToolResult.fail(f"server {server!r} does not share prompts; use one of {names}")
        if not name:
            listed = await manager.list_prompts(server)
            lines = [
                f"{p.name}({', '.join(a.name + ('' if a.required else '?') for a in p.arguments)})"
                + (f" - {p.description}" if p.description else "")
                for p in listed
            ]
            return ToolResult.ok("\n".join(lines) or "(no prompts)")
        result = await manager.get_prompt(server, name, arguments)
        return ToolResult.ok("\n\n".join(f"[{role}]\n{text}" for role, text in result.messages))

    mcp_resources.__doc__ = f"""List or read resources (documents, data) that MCP servers share.

    Without `uri` it lists the server's resources; with `uri` it returns that resource's text.
    Servers: {names}.

    Args:
        server: Name of the MCP server.
        uri: A resource URI from the listing; empty to list.
    """
    mcp_prompts.__doc__ = f"""List or render prompt templates that MCP servers share.

    Without `name` it lists the server's prompts and their arguments (`?` marks optional ones);
    with `name` it renders that prompt with `arguments`. Servers: {names}.

    Args:
        server: Name of the MCP server.
        name: Prompt name from the listing; empty to list.
        arguments: Values for the prompt's arguments.
    """
    return [
        function_tool(read_only=True, open_world=True, owner="mcp")(mcp_resources),
        function_tool(read_only=True, open_world=True, owner="mcp")(mcp_prompts),
    ]
