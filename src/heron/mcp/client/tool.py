"""One MCP tool as a heron `Tool`, and how an MCP call result becomes a `ToolResult`.

`McpTool` is namespaced `<server>__<tool>`, owned by `mcp:<server>`, validates its arguments
strictly against the server's schema, forwards progress notifications to `ctx.progress` and
carries structured content in `ToolResult.data`. The server's annotations are hints: unless
the server is `trusted`, heron assumes the tool may write, destroy and reach the outside world.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import jsonschema
import mcp_types

from heron.mcp.trust import ToolDefinition
from heron.tools.definition import (
    ToolAnnotations,
    ToolArgumentsError,
    ToolContext,
    ToolResult,
    ToolSpec,
)
from heron.tools.validation import SchemaValidator

__all__ = ["McpTool", "ToolCaller", "render_call_result", "render_content"]


def render_content(block: Any) -> str:
    """One MCP content block as text: text as it is, anything else summarised in brackets."""
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        size = len(block.data) * 3 // 4
        return f"[{block.type}: {block.mime_type}, about {size} bytes]"
    if isinstance(block, mcp_types.ResourceLink):
        label = f" ({block.name})" if block.name and block.name != block.uri else ""
        return f"[resource link: {block.uri}{label}]"
    if isinstance(block, mcp_types.EmbeddedResource):
        res = block.resource
        if isinstance(res, mcp_types.TextResourceContents):
            return f"[resource {res.uri}]\n{res.text}"
        size = len(res.blob) * 3 // 4
        return f"[resource {res.uri}: {res.mime_type or 'binary'}, about {size} bytes]"
    return f"[{getattr(block, 'type', 'unknown')} content]"


def render_call_result(result: mcp_types.CallToolResult) -> ToolResult:
    """Turn an MCP `CallToolResult` into a heron `ToolResult`.

    Text blocks become the output; other blocks are summarised in place. Structured content
    goes to `data` (its JSON is the output when there is no text); without structured content,
    non-text blocks are kept in `data["content"]`. `isError` makes a failed result.
    """
    text = "\n".join(render_content(b) for b in result.content)
    data: Any = result.structured_content
    if data is None and any(not isinstance(b, mcp_types.TextContent) for b in result.content):
        data = {"content": [b.model_dump(by_alias=True, exclude_none=True) for b in result.content]}
    if result.is_error:
        return ToolResult.fail(text or "the tool reported an error without details", data=data)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    return ToolResult.ok(text, data=data)


def _annotations(hints: Mapping[str, Any], trusted: bool) -> ToolAnnotations:
    """heron's annotations of an MCP tool: the server's hints if it is trusted, else the worst."""
    if not trusted:
        # Untrusted hints decide nothing: assume the worst for approval and parallelism.
        return ToolAnnotations(read_only=False, destructive=True, idempotent=False, open_world=True)
    read_only = hints.get("readOnlyHint") is True
    return ToolAnnotations(
        read_only=read_only,
        destructive=not read_only and hints.get("destructiveHint", True) is not False,
        idempotent=read_only or hints.get("idempotentHint") is True,
        open_world=hints.get("openWorldHint", True) is not False,
    )


class ToolCaller(Protocol):
    """What an `McpTool` calls through (`McpClientManager` is one)."""

    async def call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        progress: Callable[[str], None] | None = None,
        timeout_s: float | None = None,
    ) -> ToolResult: ...


class McpTool:
    """One MCP tool as a heron `Tool`."""

    __slots__ = ("_manager", "_schema_problem", "_spec", "_validator", "definition", "trusted")

    def __init__(self, manager: ToolCaller, definition: ToolDefinition, *, trusted: bool) -> None:
        self._manager = manager
        self.definition = definition
        self.trusted = trusted
        schema = dict(definition.input_schema)
        self._schema_problem: str | None = None
        self._validator: SchemaValidator | None = None
        try:
            self._validator = SchemaValidator(definition.prefixed, schema)
        except jsonschema.SchemaError as exc:
            self._schema_problem = f"the server's input schema is invalid: {exc.message}"
        description = definition.description.strip() or (
            f"MCP tool {definition.name} of server {definition.server}"
        )
        self._spec = ToolSpec(
            name=definition.prefixed,
            description=description,
            parameters=schema,
            output_schema=definition.output_schema,
            annotations=_annotations(definition.annotations, trusted),
            owner=f"mcp:{definition.server}",
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    @property
    def server(self) -> str:
        return self.definition.server

    @property
    def hints(self) -> Mapping[str, Any]:
        """The server's own annotations (hints; trusted only for `trusted` servers)."""
        return self.definition.annotations

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if self._validator is None:
            raise ToolArgumentsError(self._spec.name, [self._schema_problem or "invalid schema"])
        return self._validator.validate(arguments)

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await self._manager.call(
            self.definition.server, self.definition.name, arguments, progress=ctx.progress
        )
