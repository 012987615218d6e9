"""`heron mcp serve events`: the event-trigger tools, seen through the official SDK's client."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client

from support.cli import HERON, TIMEOUT_S

TRIGGER_TOOLS = {
    "start_job",
    "job_status",
    "set_timer",
    "cancel_timer",
    "list_timers",
    "monitor_shell",
    "subscribe",
    "unsubscribe",
    "list_subscriptions",
}


def _env(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HERON_STATE_DIR": str(root / "state"),
        "XDG_CONFIG_HOME": str(root / "xdg-config"),
    }


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_events_server_lists_trigger_tools_and_a_timer_it_sets_persists(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "heron.cli.main", "mcp", "serve", "events"),
            *("--workspace", str(ws), "--autonomy", "full"),
        ],
        env=_env(tmp_path),
        cwd=tmp_path,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = {t.name for t in (await session.list_tools()).tools}
        timer = await session.call_tool(
            "set_timer", {"message": "check the deploy", "after_s": 3600}
        )
        timers = await session.call_tool("list_timers", {})

    assert listed >= TRIGGER_TOOLS, listed
    assert not timer.is_error, _text(timer)
    assert isinstance(timer.structured_content, dict)
    timer_id = timer.structured_content["timer_id"]
    assert not timers.is_error and timer_id in _text(timers) and "check the deploy" in _text(timers)
    # Stored in the state directory's database, for `heron serve` to fire into its session.
    stored = await asyncio.to_thread(
        subprocess.run,
        [*HERON, "timers", "list", "--json"],
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    records = [json.loads(line) for line in stored.stdout.splitlines() if line.strip()]
    assert [r["timer_id"] for r in records] == [timer_id], stored.stdout
