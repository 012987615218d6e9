"""`SharedMcp`: the sessions' views of one process's MCP servers, and a server that arrives
after they were built, against the SDK-built probe server of `tests/support/mcp_servers.py`."""

from __future__ import annotations

from heron.mcp.assembly import assemble_tools
from heron.mcp.client import McpClientManager
from heron.mcp.config import McpConfig, McpServerConfig
from heron.mcp.shared import SharedMcp
from heron.tools.registry import ActivatedToolSet
from support.mcp_servers import probe_server


async def test_a_server_listed_later_joins_live_views_within_the_policy_once() -> None:
    cfg = McpConfig()
    said: list[str] = []
    async with McpClientManager({"srv": McpServerConfig(**probe_server())}) as manager:
        # As at a start where `srv` could not be listed: no tools in the shared assembly.
        shared = assemble_tools(
            cfg,
            [],
            autonomy="full",
            allowed_tools=None,
            excluded_tools=(),
            activated=ActivatedToolSet(),
            manager=manager,
        )
        views = SharedMcp(
            shared,
            cfg,
            autonomy="full",
            allowed_tools=None,
            excluded_tools=["srv__crash"],
            announce=said.append,
        )
        awake = views.session()
        assert awake.tools == () and len(awake.activated) == 0
        await views.refresh("srv")
        await views.refresh("srv")  # nothing new the second time
        woken = views.session()

    expected = ["srv__add", "srv__broken", "srv__pid", "srv__slow"]
    assert sorted(awake.activated.names()) == expected  # the live view sees them now
    assert sorted(t.spec.name for t in woken.tools) == expected  # a new view has them listed
    assert len(woken.activated) == 0
    assert said == ["MCP server 'srv': 4 tool(s) now in the sessions"]
