"""`heron acp` as an editor meets it: start-up, a prompt turn with a tool call, and a permission
answered in the editor — each timed from the client side of the Agent Client Protocol SDK over
the pipes of a real `heron acp` process with a scripted model (so the figures are heron's and
the protocol's, not a provider's).

- start-up: process spawned → `initialize` answered (Python start, configuration, imports);
- session: `session/new` sent → answered (the stored session, its lock, the agent built);
- turn: `session/prompt` sent → answered, for a turn of one tool call and a short answer
  (five updates: the call's three steps and the text), and the first update's delay;
- permission: `session/request_permission` received → answered allow once → the call's
  `completed` update received (the decision recorded, signed and settled on the durable
  store, the tool run, the result streamed).

    python bench/acp_roundtrip.py [--turns 100] [--permissions 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import acp
import yaml
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallProgress,
    ToolCallUpdate,
)

TOOLS = '''
from heron import tool


@tool(read_only=True, idempotent=True)
def echo(text: str) -> str:
    """Return the text.

    Args:
        text: Any text.
    """
    return text


@tool(requires_approval=True)
def stamp(n: int) -> str:
    """Record a number.

    Args:
        n: The number.
    """
    return f"stamped {n}"
'''


class Editor:
    def __init__(self) -> None:
        self.first_update: float | None = None
        self.completed: dict[str, float] = {}
        self.asked_at: dict[str, float] = {}

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        if self.first_update is None:
            self.first_update = now
        if isinstance(update, ToolCallProgress) and update.status == "completed":
            self.completed[update.tool_call_id] = now

    async def request_permission(
        self,
        session_id: str,
        tool_call: ToolCallUpdate,
        options: list[PermissionOption],
        **kwargs: Any,
    ) -> RequestPermissionResponse:
        self.asked_at[tool_call.tool_call_id] = time.perf_counter()
        return RequestPermissionResponse(
            outcome=AllowedOutcome(option_id="allow_once", outcome="selected")
        )


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(ordered) * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms"


async def run(turns: int, permissions: int, root: Path) -> None:
    (root / "tools.py").write_text(TOOLS, encoding="utf-8")
    script: list[dict[str, Any]] = []
    for i in range(turns):
        script.append(
            {"tool_calls": [{"id": f"e{i}", "name": "echo", "arguments": {"text": "hi"}}]}
        )
        script.append({"text": "Echoed."})
    for i in range(permissions):
        script.append({"tool_calls": [{"id": f"s{i}", "name": "stamp", "arguments": {"n": i}}]})
        script.append({"text": "Stamped."})
    (root / "script.yaml").write_text(yaml.safe_dump({"turns": script}), encoding="utf-8")
    workspace = root / "project"
    workspace.mkdir()
    env = {**os.environ, "HERON_STATE_DIR": str(root / "state"), "XDG_CONFIG_HOME": str(root)}
    editor = Editor()
    args = ("acp", "--model", "scripted:script.yaml", "--tools", "tools.py", "--as", "bench")

    spawned = time.perf_counter()
    with (root / "acp.log").open("wb") as log:
        async with acp.spawn_agent_process(
            editor,
            sys.executable,
            "-m",
            "heron.cli.main",
            *args,
            env=env,
            cwd=root,
            transport_kwargs={"stderr": log},
        ) as (conn, _process):
            await conn.initialize(
                protocol_version=acp.PROTOCOL_VERSION, client_capabilities=ClientCapabilities()
            )
            started = time.perf_counter() - spawned
            before = time.perf_counter()
            session = (await conn.new_session(cwd=str(workspace), mcp_servers=[])).session_id
            opened = time.perf_counter() - before

            turn_times: list[float] = []
            first_updates: list[float] = []
            for _ in range(turns):
                editor.first_update = None
                sent = time.perf_counter()
                await conn.prompt(session_id=session, prompt=[acp.text_block("echo")])
                turn_times.append(time.perf_counter() - sent)
                assert editor.first_update is not None
                first_updates.append(editor.first_update - sent)

            answered: list[float] = []
            for i in range(permissions):
                await conn.prompt(session_id=session, prompt=[acp.text_block("stamp")])
                call = f"s{i}"
                answered.append(editor.completed[call] - editor.asked_at[call])

    print(f"heron acp, scripted model, {turns} turns, {permissions} permissions")
    print(f"start-up (spawn → initialize answered)   {started * 1000:7.1f} ms")
    print(f"session/new                              {opened * 1000:7.1f} ms")
    print(f"prompt turn (1 tool call, 5 updates)     {ms(turn_times)}")
    print(f"  first update after the prompt          {ms(first_updates)}")
    if answered:
        print(f"permission asked → call completed        {ms(answered)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--permissions", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="heron-acp-bench-") as tmp:
        asyncio.run(run(args.turns, args.permissions, Path(tmp)))


if __name__ == "__main__":
    main()
