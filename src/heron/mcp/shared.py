"""The MCP tools of one process, shared by its sessions, and the servers that arrive later.

`heron serve` connects the configured servers once (`assemble_mcp`) and gives every session
its own view of them (`SharedMcp.session`): the same clients and pins, an activated set of its
own. A server that could not be listed when serve started — an OAuth server with no tokens yet
— has no tools in those views. When its login completes (the consent answered on the desk, a
pasted address, a mail reply), the manager says the server's tools may have changed
(`McpClientManager.on_tools_changed`); `refresh` lists that server again and activates its new
tools in every live session's set, so the model sees them from its next request on, as it sees
the tools `tool_search` loads (the system prompt does not move), and sessions woken later get
them in their view.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Collection

from heron.mcp.assembly import McpAssembly, assemble_tools
from heron.mcp.catalogue import McpAccessPolicy
from heron.mcp.config import McpConfig
from heron.tools.definition import Tool
from heron.tools.registry import ActivatedToolSet, Autonomy

__all__ = ["SharedMcp"]


class SharedMcp:
    """The process's assembly (`shared`, which owns the manager) and its sessions' views.

    `autonomy`, `allowed_tools` and `excluded_tools` are the agent's policy, applied to every
    view and to tools that arrive later; `announce` hears one line per refresh (serve's
    stderr).
    """

    def __init__(
        self,
        shared: McpAssembly,
        cfg: McpConfig,
        *,
        autonomy: Autonomy,
        allowed_tools: Collection[str] | None,
        excluded_tools: Collection[str],
        announce: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.shared = shared
        self._cfg = cfg
        self._autonomy: Autonomy = autonomy
        self._allowed = allowed_tools
        self._excluded = excluded_tools
        self._policy = McpAccessPolicy(
            allowed_tools=allowed_tools,
            excluded_tools=excluded_tools,
            read_only=autonomy == "read-only",
        )
        self._announce = announce
        self._listed: list[Tool] = list(shared.tool_catalogue.tools())
        self._assembly: McpAssembly | None = None
        # Parked sessions drop their agent, and with it their set: no registration to undo.
        self._views: weakref.WeakSet[ActivatedToolSet] = weakref.WeakSet()
        if shared.manager is not None:
            shared.manager.on_tools_changed(self.refresh)

    def session(self) -> McpAssembly:
        """One session's view: every tool listed so far, an activated set of its own."""
        view = self._assembled().over(ActivatedToolSet())
        self._views.add(view.activated)
        return view

    def _assembled(self) -> McpAssembly:
        """The assembly of every tool listed so far, made once per listing (a wake of a
        session only binds it to the session's activated set): its catalogue, ranking engine
        and prompt section are the same for every session."""
        if self._assembly is None:
            from heron.mcp.client import resource_tools

            manager = self.shared.manager
            self._assembly = assemble_tools(
                self._cfg,
                self._listed,
                autonomy=self._autonomy,
                allowed_tools=self._allowed,
                excluded_tools=self._excluded,
                activated=ActivatedToolSet(),  # no session's: each view gets its own
                capability_tools=resource_tools(manager) if manager is not None else (),
            )
        return self._assembly

    async def refresh(self, server: str) -> None:
        """List `server` again; its tools no session has yet join every live session."""
        manager = self.shared.manager
        assert manager is not None  # only a manager calls this
        try:
            tools, problems = await manager.tools([server])
        except Exception as exc:  # a refresh never breaks the login that triggered it
            problems = {server: f"{type(exc).__name__}: {exc}"}
        if problems:
            self._announce(f"MCP server {server!r} still cannot be listed: {problems[server]}")
            return
        known = {t.spec.name for t in self._listed}
        added = [t for t in tools if t.spec.name not in known and self._policy.allows(t.spec)]
        self._listed.extend(added)
        if added:
            self._assembly = None  # sessions woken from now on have them listed
        for view in list(self._views):
            for tool in added:
                view.activate(tool)
        if added:
            self._announce(f"MCP server {server!r}: {len(added)} tool(s) now in the sessions")
