"""`heron acp`: heron as an Agent Client Protocol agent, so that editors (Zed and others) drive
it over standard input and output ([docs/acp.md](../../../docs/acp.md)).

- `updates`: what the editor is shown — turn events and stored messages as ACP session
  updates (tool calls with their kind, locations and bounded output, text, plans);
- `prompt`: the editor's prompt blocks as the user's message, with its images and PDFs;
- `approver`: the engine's approvals through the durable request store of `heron.humans`,
  asked in the editor (`session/request_permission`) and answerable from any terminal
  (`heron approvals`) — the first answer wins;
- `mcp_servers`: the editor's MCP servers as `[mcp.servers]` entries of a session's agent;
- `stdio`: the editor's pipe — bounded JSON-RPC lines, errors for bad input, and file
  descriptors 0 and 1 kept for the protocol;
- `agent`: the ACP agent itself: sessions on heron's stored sessions, prompt turns and
  cancellation.

The Agent Client Protocol SDK (`agent-client-protocol`, the `heron[acp]` extra) is needed only
here.
"""
