"""A session turn whose process is killed (SIGKILL) mid tool call: what a crash leaves behind.

A cancelled task is no stand-in for a dead process any more: a cancelled turn closes its calls
and writes their interrupted results, as `CancelScope.cancel()` does. Repair and audit tests
that need the state a real crash leaves use `kill_mid_call`, which runs the turn in a child
Python process and kills it once the tool is running.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

_SCRIPT = '''
import asyncio, json, sys
from pathlib import Path

from heron import Agent, ScriptedModel, tool
from heron.sessions.session import CliSession
from heron.turn.cancel import CancelScope


@tool(read_only=True)
async def hang() -> str:
    """Wait until the process dies."""
    print("started", flush=True)
    await asyncio.Event().wait()
    return "unreachable"


async def main() -> None:
    state_dir, name, model_turn, autonomy = sys.argv[1:5]
    session = CliSession.open(Path(state_dir), name)
    agent = Agent(
        model=ScriptedModel([json.loads(model_turn)]), tools=[hang], autonomy=autonomy
    )
    session.attach(agent)
    await session.run_turn(agent, "wait", sink=lambda _: None, cancel=CancelScope(), channel="t")


asyncio.run(main())
'''

BOUND_S = 60.0


async def kill_mid_call(
    state_dir: Path, session: str, model_turn: dict[str, Any], *, autonomy: str = "full"
) -> None:
    """Run one turn of session `session` whose one round calls the `hang` tool, and SIGKILL the
    process while `hang` runs."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _SCRIPT,
        str(state_dir),
        session,
        json.dumps(model_turn),
        autonomy,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), BOUND_S)
        assert line == b"started\n", line
    finally:
        child.kill()
        await child.wait()
