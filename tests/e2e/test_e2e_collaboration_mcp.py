"""`heron mcp serve collaboration` through the official SDK's client: the messaging tools and
the seed's names, delivered to a real HTTP receiver in the IM incoming-webhook shape, stored
for `heron messages`."""

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
from support.peers import http_receiver


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_the_collaboration_profile_serves_the_messaging_tools_and_the_seeds_names(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "HERON_STATE_DIR": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
    }
    with http_receiver() as chat:
        (tmp_path / "heron.toml").write_text(
            f"""
[identity]
name = "Heron"
address = "heron@example.com"
signature = "Heron — an AI agent"

[user]
name = "ana"
channels = ["im", "console"]
im = "{chat.url}"
""",
            encoding="utf-8",
        )
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "heron.cli.main", "mcp", "serve", "collaboration"],
            env=env,
            cwd=tmp_path,
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            listed = {t.name for t in (await session.list_tools()).tools}
            slack = await session.call_tool("send_slack_message", {"text": "Deploy finished."})
            asked = await session.call_tool(
                "request_human_input",
                {"question": "Which colour?", "timeout_s": 0.5, "default": "blue"},
            )
            card = await session.call_tool(
                "send_card",
                {
                    "card": {
                        "title": "Release 2.1?",
                        "summary": "All checks passed.",
                        "actions": [{"type": "button", "id": "ship", "label": "Ship it"}],
                    }
                },
            )
        requests = list(chat.requests)

    assert {
        "send_message",
        "send_card",
        "send_notification",
        "send_email_notification",
        "send_im_notification",
        "send_slack_message",
        "request_human_approval",
        "request_human_input",
    } <= listed
    # Experiment 4-4's human side: nobody answers in time, so the default is the answer.
    assert not asked.is_error and _text(asked) == 'No answer in time; the default applies: "blue"'
    assert not slack.is_error, _text(slack)
    assert not card.is_error, _text(card)
    first, second = (json.loads(body) for _, body in requests)
    assert first == {"text": "Deploy finished.\n— Heron — an AI agent"}
    assert second["text"].startswith("Release 2.1?\nAll checks passed.")
    assert second["blocks"][0] == {
        "type": "header",
        "text": {"type": "plain_text", "text": "Release 2.1?"},
    }
    listing = await asyncio.to_thread(
        subprocess.run,
        [*HERON, "messages", "list", "--json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=True,
    )
    stored = [json.loads(line) for line in listing.stdout.splitlines()]
    assert [(m["kind"], m["to"], m["delivered"]) for m in stored] == [
        ("notification", "ana", {"console": "ok", "im": "ok"}),
        ("card", "ana", {"console": "ok", "im": "ok"}),
    ]


async def test_the_collaboration_profile_drives_sub_agents_for_an_mcp_client(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "HERON_STATE_DIR": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
    }
    (tmp_path / "helper.json").write_text(
        json.dumps({"turns": [{"text": "status: done\nresult: 42\nopen: nothing"}]}),
        encoding="utf-8",
    )
    (tmp_path / "heron.toml").write_text(
        '[agents.helper]\ndescription = "Adds numbers."\nmodel = "scripted:helper.json"\n',
        encoding="utf-8",
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "heron.cli.main", "mcp", "serve", "collaboration"],
        env=env,
        cwd=tmp_path,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = {t.name for t in (await session.list_tools()).tools}
        agents = await session.call_tool("list_agents", {})
        spawned = await session.call_tool(
            "spawn_subagent", {"task": "add 40 and 2", "agent": "helper", "mode": "sync"}
        )
    assert {"spawn_subagent", "send_message_to_subagent", "get_subagent_status"} <= listed
    assert {"cancel_subagent", "list_agents"} <= listed
    assert "report_to_parent" not in listed  # the client is no child
    assert '"name": "helper"' in _text(agents)
    assert not spawned.is_error, _text(spawned)
    assert "status=completed]" in _text(spawned) and "result: 42" in _text(spawned)
