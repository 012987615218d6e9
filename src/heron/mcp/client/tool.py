"""One MCP tool as a heron `Tool`, and how an MCP call result becomes a `ToolResult`.

`McpTool` is namespaced `<server>__<tool>`, owned by `mcp:<server>`, validates its arguments
strictly against the server's schema, forwards progress notifications to `ctx.progress` and
carries structured content in `ToolResult.data`. The server's annotations are hints: unless
the server is `trusted`, heron assumes the tool may write, destroy and reach the outside world.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
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

__all__ = ["STRUCTURED_LABEL", "McpTool", "ToolCaller", "render_call_result", "render_content"]


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


STRUCTURED_LABEL = "Structured content (JSON):"
"""Heads the compact JSON of `structuredContent` appended to a result's text."""


def render_call_result(result: mcp_types.CallToolResult) -> ToolResult:
    """Turn an MCP `CallToolResult` into a heron `ToolResult`.

    Text blocks become the output; other blocks are summarised in place. Structured content
    goes to `data`, and the model must see it too: its JSON is the output when there is no
    text, and is appended to the text (compact, after `STRUCTURED_LABEL`) unless a text block
    already carries it, as the MCP spec asks servers to do. Without structured content, non-text
    blocks are kept in `data["content"]`. `isError` makes a failed result.
    """
    text = "\n".join(render_content(b) for b in result.content)
    structured = result.structured_content
    data: Any = structured
    if data is None and any(not isinstance(b, mcp_types.TextContent) for b in result.content):
        data = {"content": [b.model_dump(by_alias=True, exclude_none=True) for b in result.content]}
    if structured is not None:
        if not text:
            text = json.dumps(structured, ensure_ascii=False)
        elif not _carries(result.content, text, structured):
            compact = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
            text = f"{text}\n\n{STRUCTURED_LABEL}\n{compact}"
    if result.is_error:
        return ToolResult.fail(text or "the tool reported an error without details", data=data)
    return ToolResult.ok(text, data=data)


def _carries(blocks: Sequence[Any], text: str, value: Any) -> bool:
    """Whether the text already holds `value`: one text block that parses to it as JSON, its
    JSON (compact, spaced or indented) somewhere in the text, or every value in it written out
    (`{"result": "42"}` beside the text `42`, the way SDKs wrap a plain return value)."""
    for block in blocks:
        if isinstance(block, mcp_types.TextContent) and block.text.lstrip()[:1] in ("{", "["):
            try:
                if json.loads(block.text) == value:
                    return True
            except (ValueError, RecursionError):
                pass
    if any(
        json.dumps(value, ensure_ascii=escaped, **layout) in text
        for escaped in (False, True)
        for layout in _JSON_LAYOUTS
    ):
        return True
    return _values_in(text, value)


def _values_in(text: str, value: Any, limit: int = 1000) -> bool:
    """Whether every string, number and boolean in `value` appears in `text` (at most `limit`
    of them are checked; more means no)."""
    stack = [value]
    checked = 0
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif item is not None and item != "":
            checked += 1
            written = item if isinstance(item, str) else json.dumps(item)
            if checked > limit or written not in text:
                return False
    return True


_JSON_LAYOUTS: tuple[dict[str, Any], ...] = ({"separators": (",", ":")}, {}, {"indent": 2})


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
