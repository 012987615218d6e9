"""What a child may use: a subset of what its parent was granted, never more.

The grant starts from the parent's turn as it runs (`TurnHandle`): the registry as narrowed
for that run, minus the turn's own exclusions (filter groups), the deferred tools the parent
already activated and the deferred catalogue it could still load — every one of them passed
through the same narrowing, which is the step a child would otherwise skip for activated
tools. The agent definition's `tools` and the spawn's `tools` can only narrow it further;
naming a tool outside the grant is an error, never a widening. Without `write`, the child's
workspace is read-only (`Agent(workspace_read_only=True)`): only the tools that read, and
those that change nothing outside the workspace and refuse to change it in such a run, remain
(`keeps_read_only`).

Activated tools go to a set of the child's own (`Grant.activated`), so what the child loads
never lands in the parent's set. When the parent has a search tool (`tool_search` or
`discover_tools`), the child gets one of its own under the same name, over the parent's
ranking index but searching only the granted catalogue: a tool outside the grant is never
found, never activated and never resolved by its exact name. Each granted tool is wrapped
so that label tokens in its output are escaped (`escape_labels`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from heron.always_on.subagents.names import PARENT_TOOLS, SUBAGENT_TOOLS
from heron.always_on.subagents.prompts import escape_labels
from heron.always_on.subagents.store import SubagentError
from heron.mcp.assembly import McpToolCatalogue, deferred_grant
from heron.mcp.catalogue import McpCatalogue
from heron.mcp.tool_search import SEARCH_TOOL_NAMES, ToolSearchTool
from heron.tools.definition import Tool, ToolContext, ToolResult, ToolSpec
from heron.tools.registry import ActivatedToolSet, normalize_name
from heron.turn.context import TurnHandle
from heron.turn.extensions import ToolCatalogue

__all__ = [
    "PARENT_TOOLS",
    "SUBAGENT_TOOLS",
    "Grant",
    "GrantError",
    "LabelledTool",
    "grant_tools",
    "keeps_read_only",
]

_OWN = SUBAGENT_TOOLS | set(SEARCH_TOOL_NAMES)
"""Tools a child never inherits: it gets its own, bound to itself or to its grant."""


class GrantError(SubagentError):
    """A spawn asked for tools its parent does not have."""


@dataclass(frozen=True, slots=True)
class LabelledTool:
    """A granted tool whose output has its label tokens escaped before the child reads it."""

    inner: Tool

    @property
    def spec(self) -> ToolSpec:
        return self.inner.spec

    @property
    def definition(self) -> Any:
        """The MCP definition of the tool it wraps, if any (the catalogue lists it by it)."""
        return getattr(self.inner, "definition", None)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self.inner.validate(arguments)

    def approval_for(self, arguments: Mapping[str, Any]) -> Any:
        judge = getattr(self.inner, "approval_for", None)
        return judge(arguments) if judge is not None else None

    async def execute(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        result = await self.inner.execute(arguments, ctx)
        output = escape_labels(result.output) if result.output else result.output
        error = escape_labels(result.error) if result.error else result.error
        if output == result.output and error == result.error:
            return result
        return ToolResult(success=result.success, output=output, error=error, data=result.data)


@dataclass(frozen=True, kw_only=True, slots=True)
class Grant:
    """What one child may use, decided at its spawn (without the sub-agent tools, which each
    child gets bound to itself)."""

    tools: list[Tool]
    """Its static tools: the parent's, narrowed, and its own search tool over the grant."""
    activated: ActivatedToolSet = field(default_factory=ActivatedToolSet)
    """Its own activated set, starting with the parent's activated tools the grant allows."""
    catalogue: ToolCatalogue | None = None
    """Exact-name resolution within the granted deferred catalogue (deferred exposure)."""
    prompt_section: str = ""
    """The granted catalogue for its system prompt (when it has a search tool)."""


def _labelled(tool: Tool) -> LabelledTool:
    return tool if isinstance(tool, LabelledTool) else LabelledTool(tool)


def keeps_read_only(spec: ToolSpec) -> bool:
    """Whether a child without write access keeps the tool: it only reads, or it changes
    nothing outside the workspace and refuses to change that in a read-only run
    (`workspace_only`: heron's file tools, its shell and interpreter without the host's
    network, whose commands see the workspace mounted read-only)."""
    return spec.annotations.read_only or spec.annotations.workspace_only


def _allowed(handle: TurnHandle) -> Callable[[str], bool]:
    """Whether the parent's turn may call `name` (its run's narrowing and exclusions)."""
    exec_, state = handle.execution, handle.state
    hidden = {normalize_name(n) for n in state.excluded}
    allowed = exec_.allowed

    def allows(name: str) -> bool:
        if normalize_name(name) in hidden or exec_.registry.is_excluded(name):
            return False
        return allowed is None or name in allowed

    return allows


def _parent_search(handle: TurnHandle, allows: Callable[[str], bool]) -> ToolSearchTool | None:
    for name in SEARCH_TOOL_NAMES:
        tool = handle.execution.registry.get(name)
        if isinstance(tool, ToolSearchTool) and allows(name):
            return tool
    return None


def grant_tools(
    handle: TurnHandle,
    *,
    definition_tools: Collection[str] | None,
    requested: Collection[str] | None,
    write: bool,
) -> Grant:
    """The child's grant (see the module docstring); `GrantError` when the spawn names a tool
    its parent was not granted."""
    exec_ = handle.execution
    allows = _allowed(handle)
    static = [t for n in exec_.registry.names() if (t := exec_.registry.get(n)) is not None]
    active = exec_.activated
    activated = [t for n in active.names() if (t := active.get(n)) is not None] if active else []
    parent_catalogue = exec_.catalogue if isinstance(exec_.catalogue, McpToolCatalogue) else None
    deferred = parent_catalogue.tools() if parent_catalogue is not None else []
    parent_has = {
        t.spec.name
        for t in [*static, *activated, *deferred]
        if t.spec.name not in _OWN and allows(t.spec.name)
    }
    if requested is not None:
        missing = sorted(set(requested) - parent_has - _OWN)
        if missing:
            raise GrantError(
                f"tools not granted to the parent cannot be given to a child: {', '.join(missing)}"
            )
    names = set(parent_has)
    for narrowing in (definition_tools, requested):
        if narrowing is not None:
            names &= set(narrowing)

    def keep(tool: Tool) -> bool:
        return tool.spec.name in names and (write or keeps_read_only(tool.spec))

    tools = {t.spec.name: _labelled(t) for t in static if keep(t)}
    own = ActivatedToolSet()
    for tool in activated:
        if keep(tool) and tool.spec.name not in tools:
            own.activate(_labelled(tool))
    if parent_catalogue is None:
        return Grant(tools=list(tools.values()), activated=own)
    catalogue = McpCatalogue(
        [_labelled(t) for t in deferred if keep(t)], groups=parent_catalogue.groups
    )
    mcp = deferred_grant(catalogue, own, search=_parent_search(handle, allows))
    return Grant(
        tools=[*tools.values(), *mcp.tools],
        activated=own,
        catalogue=mcp.catalogue,
        prompt_section=mcp.prompt_section,
    )
