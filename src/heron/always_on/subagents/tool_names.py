"""The names of the sub-agent tools: apart from `heron.always_on.subagents.grant` (which
re-exports them), so building an agent that only needs the names (`heron.config.build`
`preapproved_tools`) does not import the grant's MCP and tool-search machinery."""

from __future__ import annotations

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
