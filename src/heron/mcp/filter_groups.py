"""`tool_filter_groups`: which MCP tools a turn may see, decided from the user's message.

Groups apply to MCP tools only — built-ins and skill tools always pass — and they never grant
anything: a tool that policy denies stays denied whatever group matches it.

- **direct exposure**: once any group is configured, an MCP tool is visible in a turn only if a
  group matches its name and that group is `always`, or is `dynamic` and one of its keywords
  occurs in the current user message (case-insensitive substring). Every other MCP tool is
  excluded for the turn — from the specs sent to the model *and* from execution.
- **deferred exposure**: `always` groups pre-activate their tools (idempotent: activation is
  append-only). `dynamic` groups have no effect, on purpose: hiding a loaded schema for one
  turn would move it in the prompt and break prompt caching, and the model already chooses
  what to load through `tool_search`.

`compute_turn_filter` is pure; the engine calls it once per turn with the effective user
message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from heron.mcp.config import ToolFilterGroup, name_matches

__all__ = ["TurnToolFilter", "compute_turn_filter", "group_matches"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnToolFilter:
    """The MCP part of one turn's tool availability."""

    visible: tuple[str, ...]
    """MCP tool names the model may see and call this turn (input order kept)."""
    excluded: tuple[str, ...]
    """MCP tool names to add to this turn's `excluded_tools` (specs and execution)."""
    preactivate: tuple[str, ...]
    """Deferred exposure: names to activate before the turn (`always` groups)."""


def group_matches(group: ToolFilterGroup, name: str) -> bool:
    """Whether one of the group's globs matches the namespaced tool name."""
    return any(name_matches(pattern, name) for pattern in group.tools)


def _keyword_hit(group: ToolFilterGroup, message: str) -> bool:
    lowered = message.casefold()
    return any(k.strip() and k.strip().casefold() in lowered for k in group.keywords)


def compute_turn_filter(
    groups: Sequence[ToolFilterGroup],
    mcp_names: Sequence[str],
    user_message: str,
    *,
    allowed: Callable[[str], bool] | None = None,
    exposure: Literal["direct", "deferred"] = "direct",
) -> TurnToolFilter:
    """Visible, excluded and pre-activated MCP names for one turn.

    `mcp_names` are the MCP-origin tool names of the session (namespaced); `allowed` is the
    policy's name check (`McpAccessPolicy.allows_name`) — denied names are always excluded and
    never pre-activated.
    """
    permitted = [n for n in mcp_names if allowed is None or allowed(n)]
    denied = tuple(n for n in mcp_names if allowed is not None and not allowed(n))
    always = [g for g in groups if g.mode == "always"]
    preactivate = tuple(n for n in permitted if any(group_matches(g, n) for g in always))
    if exposure == "deferred" or not groups:
        return TurnToolFilter(visible=tuple(permitted), excluded=denied, preactivate=preactivate)
    live = always + [g for g in groups if g.mode == "dynamic" and _keyword_hit(g, user_message)]
    visible = tuple(n for n in permitted if any(group_matches(g, n) for g in live))
    shown = set(visible)
    excluded = tuple(n for n in mcp_names if n not in shown)
    return TurnToolFilter(visible=visible, excluded=excluded, preactivate=())
