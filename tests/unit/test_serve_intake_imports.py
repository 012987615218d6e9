"""`heron serve` listens before it imports its agent side: opening the intake (config, bus,
webhook and SMTP listeners) in a fresh interpreter leaves the engine, the server and MCP
unimported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

AGENT_SIDE = (
    "heron.agent",
    "heron.always_on.server",
    "heron.always_on.sessions",
    "heron.always_on.bus.loop",
    "heron.always_on.triggers.runtime",
    "heron.config.build",
    "heron.turn.context",
    "heron.sandbox.bwrap",
    "heron.mcp.assembly",
    "heron.gateway.app",
    "numpy",
)

OPEN_INTAKE = """
import asyncio, json, sys
from pathlib import Path

from heron._support.clock import RealClock
from heron.always_on.intake import check_serve, open_intake
from heron.always_on.serve_config import ServeConfig
from heron.config import load_config
import heron.cli.main, heron.cli.serve

load_config()
state = Path(sys.argv[1])
config = ServeConfig(
    state_dir=state, webhook_port=0, subscribe=("webhook",), maildir=state / "Maildir", smtp_port=0
)
records = []


async def main():
    intake = await open_intake(
        config, secret=check_serve(config), clock=RealClock(), announce=records.append
    )
    await intake.aclose()


asyncio.run(main())
print(json.dumps({"records": records, "modules": sorted(sys.modules)}))
"""


def test_opening_the_intake_imports_nothing_of_the_agent_side(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HERON_WEBHOOK_SECRET": "intake-imports-secret",
        "HERON_STATE_DIR": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }
    done = subprocess.run(
        [sys.executable, "-c", OPEN_INTAKE, str(tmp_path / "state")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout)
    [accepting] = found["records"]
    assert accepting["type"] == "serve_accepting" and accepting["webhook"].startswith("http://")
    assert accepting["smtp"] > 0  # the mail listener is part of the intake too
    assert [m for m in AGENT_SIDE if m in found["modules"]] == []
