"""heron as an MCP client: configuration, server connections, the tool catalogue with deferred
loading through `tool_search`, per-turn filter groups, and trust (pins, scans, capabilities).

`assemble_mcp` (in `heron.mcp.assembly`) puts these together for one agent — servers, policy,
exposure, catalogue section, activated set, never-unreachable resolver, per-turn filter groups —
and is what `heron run` uses; docs/mcp.md describes the whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from heron._support.lazy import lazy_getattr

if TYPE_CHECKING:
    from heron.mcp.assembly import (
        McpAssembly,
        McpGrant,
        McpToolCatalogue,
        assemble_mcp,
        assemble_tools,
    )
    from heron.mcp.catalogue import (
        CatalogueEntry,
        McpAccessPolicy,
        McpCatalogue,
        choose_exposure,
        loaded_status_line,
    )
    from heron.mcp.client import (
        McpClientManager,
        McpTool,
        ServerRefused,
        ServerStatus,
        ServerUnavailable,
    )
    from heron.mcp.config import McpConfig, McpServerConfig, ToolFilterGroup, import_mcp_json
    from heron.mcp.filter_groups import TurnToolFilter, compute_turn_filter
    from heron.mcp.tool_search import TOOL_SEARCH, ToolSearchTool, resolve_unactivated
    from heron.mcp.trust import TrustStore, lethal_trifecta, scan_definitions

# The MCP SDK takes most of a second to import: load each module on first use.
_EXPORTS: dict[str, str] = {
    "TOOL_SEARCH": "heron.mcp.tool_search",
    "CatalogueEntry": "heron.mcp.catalogue",
    "McpAccessPolicy": "heron.mcp.catalogue",
    "McpAssembly": "heron.mcp.assembly",
    "McpGrant": "heron.mcp.assembly",
    "McpToolCatalogue": "heron.mcp.assembly",
    "assemble_mcp": "heron.mcp.assembly",
    "assemble_tools": "heron.mcp.assembly",
    "McpCatalogue": "heron.mcp.catalogue",
    "McpClientManager": "heron.mcp.client",
    "McpConfig": "heron.mcp.config",
    "McpServerConfig": "heron.mcp.config",
    "McpTool": "heron.mcp.client",
    "ServerRefused": "heron.mcp.client",
    "ServerStatus": "heron.mcp.client",
    "ServerUnavailable": "heron.mcp.client",
    "ToolFilterGroup": "heron.mcp.config",
    "ToolSearchTool": "heron.mcp.tool_search",
    "TrustStore": "heron.mcp.trust",
    "TurnToolFilter": "heron.mcp.filter_groups",
    "choose_exposure": "heron.mcp.catalogue",
    "compute_turn_filter": "heron.mcp.filter_groups",
    "import_mcp_json": "heron.mcp.config",
    "lethal_trifecta": "heron.mcp.trust",
    "loaded_status_line": "heron.mcp.catalogue",
    "resolve_unactivated": "heron.mcp.tool_search",
    "scan_definitions": "heron.mcp.trust",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


__all__ = [
    "TOOL_SEARCH",
    "CatalogueEntry",
    "McpAccessPolicy",
    "McpAssembly",
    "McpCatalogue",
    "McpClientManager",
    "McpConfig",
    "McpGrant",
    "McpServerConfig",
    "McpTool",
    "McpToolCatalogue",
    "ServerRefused",
    "ServerStatus",
    "ServerUnavailable",
    "ToolFilterGroup",
    "ToolSearchTool",
    "TrustStore",
    "TurnToolFilter",
    "assemble_mcp",
    "assemble_tools",
    "choose_exposure",
    "compute_turn_filter",
    "import_mcp_json",
    "lethal_trifecta",
    "loaded_status_line",
    "resolve_unactivated",
    "scan_definitions",
]
