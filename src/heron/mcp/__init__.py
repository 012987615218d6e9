"""heron as an MCP client: configuration, server connections, OAuth (`auth`), the tool
catalogue with deferred loading through `tool_search`, per-turn filter groups, and trust (pins,
scans, capabilities) — and heron's tools served to other MCP clients (`server`).

`assemble_mcp` (in `heron.mcp.assembly`) puts these together for one agent — servers, policy,
exposure, catalogue section, activated set, never-unreachable resolver, per-turn filter groups —
and is what `heron run` uses; docs/mcp.md describes the whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from heron._support.lazy import lazy_getattr

if TYPE_CHECKING:
    # `X as X` re-exports each name for type checkers, which cannot read a computed `__all__`;
    # tests/unit/test_public_api_mcp.py checks that this block and `_EXPORTS` agree.
    from heron.mcp.assembly import McpAssembly as McpAssembly
    from heron.mcp.assembly import McpGrant as McpGrant
    from heron.mcp.assembly import McpToolCatalogue as McpToolCatalogue
    from heron.mcp.assembly import assemble_mcp as assemble_mcp
    from heron.mcp.assembly import assemble_tools as assemble_tools
    from heron.mcp.auth import LoginState as LoginState
    from heron.mcp.auth import McpAuth as McpAuth
    from heron.mcp.catalogue import CatalogueEntry as CatalogueEntry
    from heron.mcp.catalogue import McpAccessPolicy as McpAccessPolicy
    from heron.mcp.catalogue import McpCatalogue as McpCatalogue
    from heron.mcp.catalogue import choose_exposure as choose_exposure
    from heron.mcp.catalogue import loaded_status_line as loaded_status_line
    from heron.mcp.client import McpClientManager as McpClientManager
    from heron.mcp.client import McpTool as McpTool
    from heron.mcp.client import ServerAuthRequired as ServerAuthRequired
    from heron.mcp.client import ServerRefused as ServerRefused
    from heron.mcp.client import ServerStatus as ServerStatus
    from heron.mcp.client import ServerUnavailable as ServerUnavailable
    from heron.mcp.config import McpConfig as McpConfig
    from heron.mcp.config import McpServerConfig as McpServerConfig
    from heron.mcp.config import ToolFilterGroup as ToolFilterGroup
    from heron.mcp.config import import_mcp_json as import_mcp_json
    from heron.mcp.filter_groups import TurnToolFilter as TurnToolFilter
    from heron.mcp.filter_groups import compute_turn_filter as compute_turn_filter
    from heron.mcp.tool_search import TOOL_SEARCH as TOOL_SEARCH
    from heron.mcp.tool_search import ToolSearchTool as ToolSearchTool
    from heron.mcp.tool_search import resolve_unactivated as resolve_unactivated
    from heron.mcp.trust import SqliteTrustStore as SqliteTrustStore
    from heron.mcp.trust import TrustStore as TrustStore
    from heron.mcp.trust import lethal_trifecta as lethal_trifecta
    from heron.mcp.trust import scan_definitions as scan_definitions

# The MCP SDK takes most of a second to import: load each module on first use.
_EXPORTS: dict[str, str] = {
    "McpAssembly": "heron.mcp.assembly",
    "McpGrant": "heron.mcp.assembly",
    "McpToolCatalogue": "heron.mcp.assembly",
    "assemble_mcp": "heron.mcp.assembly",
    "assemble_tools": "heron.mcp.assembly",
    "LoginState": "heron.mcp.auth",
    "McpAuth": "heron.mcp.auth",
    "CatalogueEntry": "heron.mcp.catalogue",
    "McpAccessPolicy": "heron.mcp.catalogue",
    "McpCatalogue": "heron.mcp.catalogue",
    "choose_exposure": "heron.mcp.catalogue",
    "loaded_status_line": "heron.mcp.catalogue",
    "McpClientManager": "heron.mcp.client",
    "McpTool": "heron.mcp.client",
    "ServerAuthRequired": "heron.mcp.client",
    "ServerRefused": "heron.mcp.client",
    "ServerStatus": "heron.mcp.client",
    "ServerUnavailable": "heron.mcp.client",
    "McpConfig": "heron.mcp.config",
    "McpServerConfig": "heron.mcp.config",
    "ToolFilterGroup": "heron.mcp.config",
    "import_mcp_json": "heron.mcp.config",
    "TurnToolFilter": "heron.mcp.filter_groups",
    "compute_turn_filter": "heron.mcp.filter_groups",
    "TOOL_SEARCH": "heron.mcp.tool_search",
    "ToolSearchTool": "heron.mcp.tool_search",
    "resolve_unactivated": "heron.mcp.tool_search",
    "SqliteTrustStore": "heron.mcp.trust",
    "TrustStore": "heron.mcp.trust",
    "lethal_trifecta": "heron.mcp.trust",
    "scan_definitions": "heron.mcp.trust",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())

__all__ = sorted(_EXPORTS)
