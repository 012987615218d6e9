"""The names of the sub-agent tools, apart from the grant: whoever only needs the names (the
approval policy of every wake) does not import the grant's MCP and discovery machinery."""

from __future__ import annotations

__all__ = ["PARENT_TOOLS", "SUBAGENT_TOOLS"]

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
