"""One tool call on a server's connection, and what each way it can fail means.

Every failure becomes a failed `ToolResult` that says which kind it is: the server is
unavailable, a protocol error or a timeout (the server was asked to cancel), an invalid result,
a call refused for want of consent (a step-up: nothing ran), or a connection that ended under
the call (whether it took effect is unknown; the next call restarts the server). What the
manager keeps about the server — the back-off after a crash, the wait for consent — it records
through the two callbacks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError

from heron.mcp.auth import AuthorizationRequired
from heron.mcp.client.connection import Connection
from heron.mcp.client.errors import ServerAuthRequired, ServerUnavailable
from heron.mcp.client.login_gate import authorization_required
from heron.mcp.client.slots import Slot
from heron.mcp.client.tool import render_call_result
from heron.tools.definition import ToolResult

__all__ = ["NeedConsent", "NoteFailure", "call_tool"]

NeedConsent = Callable[[Slot, AuthorizationRequired], ServerAuthRequired]
"""Records that the server waits for consent and returns the refusal that says why."""
NoteFailure = Callable[[Slot, str], None]
"""Records a failure of the server (its back-off grows)."""


def _progress_line(progress: float, total: float | None, message: str | None) -> str:
    amount = f"{progress:g}/{total:g}" if total else f"{progress:g}"
    return f"{message} ({amount})" if message else f"progress {amount}"


async def call_tool(
    slot: Slot,
    conn: Connection,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    limit: float,
    progress: Callable[[str], None] | None,
    need_consent: NeedConsent,
    note_failure: NoteFailure,
) -> ToolResult:
    """Call `tool` over `conn` (at most `limit` seconds), forwarding progress lines."""
    server = slot.name
    sink = progress

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if sink is not None:
            sink(_progress_line(progress, total, message))

    try:
        with conn.busy() as client:
            result = await client.call_tool(
                tool,
                dict(arguments),
                read_timeout_seconds=limit,
                progress_callback=on_progress,
            )
    except ServerUnavailable as exc:
        return ToolResult.fail(str(exc))
    except MCPError as exc:
        if (required := authorization_required(exc, conn.http_auth)) is not None:
            return _step_up(slot, conn, tool, required, need_consent)
        if exc.code == mcp_types.CONNECTION_CLOSED:
            return _crashed(slot, conn, tool, need_consent, note_failure)
        if exc.code == mcp_types.REQUEST_TIMEOUT:
            return ToolResult.fail(
                f"MCP tool {server}__{tool} timed out after {limit:g}s; heron asked the "
                "server to cancel it (its effects, if any, are unknown)",
                data={"mcp_error": {"kind": "timeout", "code": exc.code}},
            )
        return ToolResult.fail(
            f"MCP protocol error from server {server!r} (code {exc.code}): {exc.message}",
            data={"mcp_error": {"kind": "protocol", "code": exc.code, "data": exc.data}},
        )
    except RuntimeError as exc:
        # The SDK checks structured content against the tool's output schema.
        return ToolResult.fail(
            f"MCP server {server!r} returned an invalid result for {tool!r}: {exc}",
            data={"mcp_error": {"kind": "invalid_result"}},
        )
    except Exception as exc:
        if (required := authorization_required(exc, conn.http_auth)) is not None:
            return _step_up(slot, conn, tool, required, need_consent)
        # Transport failures (broken pipe, HTTP connection lost) end the connection.
        return _crashed(slot, conn, tool, need_consent, note_failure)
    slot.failures = 0
    return render_call_result(result)


def _step_up(
    slot: Slot,
    conn: Connection,
    tool: str,
    required: AuthorizationRequired,
    need_consent: NeedConsent,
) -> ToolResult:
    """A call the server refused for want of consent (more scopes, or a token that can
    no longer be refreshed). The connection ended with it; nothing ran."""
    conn.broken = True
    refused = need_consent(slot, required)
    return ToolResult.fail(
        f"MCP tool {slot.name}__{tool} was not run: {refused.reason}",
        data={"mcp_error": {"kind": "auth_required", "scope": required.scope}},
    )


def _crashed(
    slot: Slot,
    conn: Connection,
    tool: str,
    need_consent: NeedConsent,
    note_failure: NoteFailure,
) -> ToolResult:
    if (required := authorization_required(None, conn.http_auth)) is not None:
        return _step_up(slot, conn, tool, required, need_consent)
    conn.broken = True
    slot.crashes += 1
    tail = conn.stderr_summary()
    if conn.unreadable is not None:  # closed by heron: what the server sent is unreadable
        note_failure(slot, conn.unreadable)
        return ToolResult.fail(
            f"MCP server {slot.name!r} sent a message heron cannot read during the call "
            f"to {tool!r}: {conn.unreadable}; heron closed the connection. Whether the call "
            "took effect is unknown. The next call restarts the server.",
            data={"mcp_error": {"kind": "unreadable"}},
        )
    note_failure(slot, "the connection closed during a call" + (f": {tail}" if tail else ""))
    return ToolResult.fail(
        f"MCP server {slot.name!r} stopped during the call to {tool!r}; whether the call "
        "took effect is unknown. The next call restarts the server."
        + (f" Server stderr: {tail}" if tail else ""),
        data={"mcp_error": {"kind": "connection_closed"}},
    )
