"""What `heron doctor` and `heron mcp trifecta` check about the MCP side of the configured
agent: which tools it may reach, with their capability labels, and the lethal trifecta."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from heron.config import HeronConfig
    from heron.mcp.config import CapabilityLabel
    from heron.tools.definition import Tool


async def agent_capabilities(
    config: HeronConfig, builtin: Sequence[Tool], state_dir: Path
) -> tuple[dict[str, frozenset[CapabilityLabel]], list[str]]:
    """Capability labels of every tool the configured agent may reach — its built-ins after
    scoping, and every policy-allowed MCP tool (deferred ones included: they are one
    `tool_search` away) — and the problems met while listing MCP servers."""
    from heron.mcp.assembly import assemble_mcp
    from heron.mcp.tool_search import TOOL_SEARCH
    from heron.mcp.trust import ToolDefinition, capability_labels, spec_capability_labels
    from heron.tools.registry import ActivatedToolSet, ToolRegistry

    a = config.agent
    scoped = ToolRegistry(builtin).scope(
        autonomy=a.autonomy, allowed_tools=a.allowed_tools, excluded_tools=a.excluded_tools
    )
    labels = {spec.name: spec_capability_labels(spec) for spec in scoped.specs()}
    if not config.mcp.enabled_servers():
        return labels, []
    assembly = await assemble_mcp(
        config.mcp,
        state_dir=state_dir,
        autonomy=a.autonomy,
        allowed_tools=a.allowed_tools,
        excluded_tools=a.excluded_tools,
        builtin_names=[t.spec.name for t in builtin],
        activated=ActivatedToolSet(),
    )
    try:
        for entry in assembly.tool_catalogue.entries:
            definition = getattr(entry.tool, "definition", None)
            if isinstance(definition, ToolDefinition):
                declared = config.mcp.servers[entry.server].capabilities
                labels[entry.name] = capability_labels(definition, declared=declared)
            else:
                labels[entry.name] = spec_capability_labels(entry.tool.spec)
        for tool in assembly.tools:
            name = tool.spec.name
            # tool_search only loads schemas; MCP tools were labelled above.
            if name != TOOL_SEARCH and name not in labels:
                labels[name] = spec_capability_labels(tool.spec)
    finally:
        await assembly.aclose()
    return labels, list(assembly.problems)


def doctor_checks(
    config: HeronConfig, state_dir: Path, tools: Sequence[Tool]
) -> list[tuple[bool, str, str]]:
    """`heron doctor` lines for MCP: the login of each OAuth server, servers that cannot be
    listed and the lethal trifecta of the configured agent with `tools`, as (ok, what,
    detail). Empty when no MCP server is configured."""
    from heron.mcp.auth import McpAuth
    from heron.mcp.trust import lethal_trifecta

    servers = config.mcp.enabled_servers()
    if not servers:
        return []
    auth = McpAuth(config.mcp, state_dir=state_dir, store_url=config.store.url)
    lines = []
    for name in auth.servers():
        if name in servers:
            login = auth.login_state(name)
            hint = f" (heron mcp login {name})" if login.needs_consent else ""
            lines.append((not login.needs_consent, f"mcp login {name}", login.detail + hint))
    labels, problems = asyncio.run(agent_capabilities(config, tools, state_dir))
    lines += [(False, "mcp", problem) for problem in problems]
    if not problems:
        lines.append((True, "mcp", f"{len(servers)} server(s) listed"))
    report = lethal_trifecta(labels)
    lines.append((not report.present, "lethal trifecta", report.describe()))
    return lines
