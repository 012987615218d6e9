"""What a child may use: a subset of what its parent was granted, never more.

The grant starts from the parent's turn as it runs (`TurnHandle`): the registry as narrowed
for that run, minus the turn's own exclusions (filter groups), plus the deferred MCP tools the
parent already activated — passed through the same narrowing, which is the step a child would
otherwise skip. The agent definition's `tools` and the spawn's `tools` can only narrow it
further; naming a tool outside the grant is an error, never a widening. Without `write`, only
read-only tools remain (the workspace is the parent's, read-only). The parent's search tool
(`tool_search` or `discover_tools`) is not passed on (it would activate into the parent's
set). Each granted tool is wrapped so that label tokens in its output are escaped
(`escape_labels`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from heron.always_on.subagents.prompts import escape_labels
from heron.always_on.subagents.store import SubagentError
from heron.tools.definition import Tool, ToolContext, ToolResult, ToolSpec
from heron.tools.registry import normalize_name
from heron.turn.context import TurnHandle

__all__ = ["PARENT_TOOLS", "SUBAGENT_TOOLS", "GrantError", "LabelledTool", "grant_tools"]

PARENT_TOOLS = frozenset(
    {
        "spawn_subagent",
        "send_message_to_subagent",
        "get_subagent_status",
        "cancel_subagent",
        "list_agents",
    }
)
"""The tools that start and steer children."""
SUBAGENT_TOOLS = PARENT_TOOLS | {"report_to_parent", "ask_parent"}
"""Every sub-agent tool: never inherited, each child gets its own, bound to itself."""


class GrantError(SubagentError):
    """A spawn asked for tools its parent does not have."""


@dataclass(frozen=True, slots=True)
class LabelledTool:
    """A granted tool whose output has its label tokens escaped before the child reads it."""

    inner: Tool

    @property
    def spec(self) -> ToolSpec:
        return self.inner.spec

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


def _parent_tools(handle: TurnHandle, own: Collection[str]) -> dict[str, Tool]:
    exec_, state = handle.execution, handle.state
    hidden = {normalize_name(n) for n in state.excluded}
    allowed = exec_.allowed
    tools: dict[str, Tool] = {}
    candidates = [exec_.registry.get(n) for n in exec_.registry.names()]
    if exec_.activated is not None:
        candidates += [exec_.activated.get(n) for n in exec_.activated.names()]
    for tool in candidates:
        if tool is None:
            continue
        name = tool.spec.name
        if name in own or normalize_name(name) in hidden or exec_.registry.is_excluded(name):
            continue
        if allowed is not None and name not in allowed:
            continue
        tools.setdefault(name, tool)
    return tools


def grant_tools(
    handle: TurnHandle,
    *,
    definition_tools: Collection[str] | None,
    requested: Collection[str] | None,
    write: bool,
) -> list[Tool]:
    """The tools a child gets (see the module docstring), without the sub-agent tools, which
    each child gets bound to itself instead of inheriting the parent's."""
    # The parent's `tool_search` would activate into the parent's own set: a child gets the
    # tools the parent already activated, and no discovery of its own.
    from heron.mcp.tool_search import SEARCH_TOOL_NAMES  # tool search loads numpy: at spawn

    own = SUBAGENT_TOOLS | set(SEARCH_TOOL_NAMES)  # `tool_search` or `discover_tools`
    tools = _parent_tools(handle, own)
    for label, names in (("the agent definition", definition_tools), ("the spawn", requested)):
        if names is None:
            continue
        missing = sorted(set(names) - set(tools) - set(own))
        if missing and label == "the spawn":
            raise GrantError(
                f"tools not granted to the parent cannot be given to a child: {', '.join(missing)}"
            )
        tools = {n: t for n, t in tools.items() if n in set(names)}
    if not write:
        tools = {n: t for n, t in tools.items() if t.spec.annotations.read_only}
    return [LabelledTool(t) for t in tools.values()]
