"""`heron run` with sub-agents and `heron agents`, through the command line: a run that ends
with children still working waits for them up to its deadline, then cancels and reports each;
project agent files take effect only once approved, and changes are shown."""

from __future__ import annotations

import json
import os
from typing import Any

from support.cli import Heron

SLOW = """
[subagents]
run_deadline_s = 1.0
[agents.quick]
description = "Answers at once."
model = "scripted:quick.yaml"
[agents.slow]
description = "Takes ten minutes."
model = "scripted:slow.yaml"
"""
RESEARCHER = """---
name: researcher
description: Finds sources.
model: scripted:researcher.yaml
---
You research one question.
"""


def _spawn(cid: str, agent: str, mode: str = "async") -> dict[str, Any]:
    arguments = {"task": f"the {agent} part", "agent": agent, "mode": mode}
    return {"tool_calls": [{"id": cid, "name": "spawn_subagent", "arguments": arguments}]}


def _tree(heron: Heron) -> dict[str, dict[str, Any]]:
    listed = heron.run("agents", "tree", "--json")
    assert listed.code == 0, listed.stderr
    return {node["agent"]: node for node in json.loads(listed.stdout)}


def _results(stdout: str) -> list[dict[str, Any]]:
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return [e for e in events if e.get("type") == "tool_result"]


def test_a_run_waits_for_its_children_then_cancels_and_reports_each(heron: Heron) -> None:
    heron.write("heron.toml", SLOW)
    heron.script("quick.yaml", [{"text": "quick answer", "delay_ms": 50}])
    heron.script("slow.yaml", [{"text": "never", "delay_ms": 600_000}])
    parent = heron.script(
        "parent.yaml", [_spawn("c1", "quick"), _spawn("c2", "slow"), {"text": "both started"}]
    )
    done = heron.run_turn(parent, "--autonomy", "full")
    assert done.code == 0, done.stderr
    nodes = _tree(heron)
    quick, slow = nodes["quick"], nodes["slow"]
    assert "waiting up to 1 s for" in done.stderr
    assert f"sub-agent {slow['id']} (slow): cancelled" in done.stderr
    assert slow["status"] == "cancelled" and "the run ended" in slow["error"]
    assert quick["status"] == "completed" and quick["result"] == "quick answer"
    started = [r for r in _results(done.stdout) if r["name"] == "spawn_subagent"]
    assert [r["status"] for r in started] == ["ok", "ok"]


def test_a_project_agent_file_runs_only_after_approval_and_changes_are_shown(
    heron: Heron,
) -> None:
    heron.write("agents/researcher.md", RESEARCHER)
    heron.script("researcher.yaml", [{"text": "three sources"}])
    parent = heron.script(
        "parent.yaml", [_spawn("c1", "researcher", mode="sync"), {"text": "done"}]
    )
    listed = heron.run("agents", "list", "--json")
    assert listed.code == 0, listed.stderr
    trust = {a["name"]: a["trust"] for a in json.loads(listed.stdout)}
    assert trust == {"general": "config", "researcher": "unapproved"}

    refused = heron.run_turn(parent, "--autonomy", "full")
    assert refused.code == 0, refused.stderr
    (result,) = [r for r in _results(refused.stdout) if r["name"] == "spawn_subagent"]
    assert result["status"] == "error"
    assert "heron agents approve researcher" in json.dumps(result)
    assert _tree(heron) == {}

    approved = heron.run("agents", "approve", "researcher")
    assert approved.code == 0, approved.stderr
    ran = heron.run_turn(parent, "--autonomy", "full")
    assert ran.code == 0, ran.stderr
    assert _tree(heron)["researcher"]["result"] == "three sources"

    heron.write("agents/researcher.md", RESEARCHER.replace("one question", "every question"))
    shown = heron.run("agents", "show", "researcher")
    assert shown.code == 0, shown.stderr
    assert "trust:       changed" in shown.stdout
    assert "-You research one question." in shown.stdout
    assert "+You research every question." in shown.stdout
    again = heron.run("agents", "approve", "researcher")
    assert again.code == 0 and "+You research every question." in again.stdout


def test_cancel_ends_the_tree_itself_when_the_process_that_ran_it_is_gone(
    heron: Heron,
) -> None:
    import subprocess

    from heron.always_on.subagents.sqlite_store import SqliteSubagentStore
    from heron.always_on.subagents.store import SubagentRecord

    gone = subprocess.Popen(["true"])
    gone.wait()
    store = SqliteSubagentStore.open_dir(heron.state_dir)
    try:
        for sid, parent in (("top", None), ("leaf", "top")):
            store.add(
                SubagentRecord(
                    id=sid,
                    agent="helper",
                    task="t",
                    mode="async",
                    parent=parent,
                    root_session="main",
                    parent_session="main",
                    call_id=f"c_{sid}",
                    depth=1 if parent is None else 2,
                    status="working",
                    owner=gone.pid,
                )
            )
    finally:
        store.close()
    cancelled = heron.run("agents", "cancel", "top")
    assert cancelled.code == 0, cancelled.stderr
    assert cancelled.stdout.strip() == "top helper: cancelled"
    nodes = {n["id"]: n for n in json.loads(heron.run("agents", "tree", "--json").stdout)}
    assert nodes["top"]["status"] == "cancelled"
    assert [c["status"] for c in nodes["top"]["children"]] == ["cancelled"]
    again = heron.run("agents", "cancel", "top")
    assert again.code == 3 and "had already ended: cancelled" in again.stderr


def test_hostile_agent_files_are_refused_promptly_and_nothing_outside_is_shown(
    heron: Heron,
) -> None:
    # A FIFO with no writer: the old read blocked `heron agents list` for ever.
    (heron.root / "agents").mkdir()
    os.mkfifo(heron.root / "agents" / "trap.md")
    listed = heron.run("agents", "list")
    assert listed.code == 2
    assert "trap.md" in listed.stderr and "not a regular file (a FIFO)" in listed.stderr

    (heron.root / "agents" / "trap.md").unlink()
    secret = heron.write("notes/secret.md", "---\nname: leak\n---\nPRIVATE-NOTES-7731")
    (heron.root / "agents" / "leak.md").symlink_to(secret)
    listed = heron.run("agents", "show", "leak")
    assert listed.code == 2
    assert "links out of the agents folder" in listed.stderr
    assert "PRIVATE-NOTES-7731" not in listed.stdout + listed.stderr

    (heron.root / "agents" / "leak.md").unlink()
    heron.write("agents/bomb.md", "---\nname: bomb\na: &x [1, 2]\nb: [*x, *x]\n---\nboom")
    refused = heron.run("agents", "approve", "bomb")
    assert refused.code == 2
    assert "line 3: an anchor (&x): YAML anchors and aliases are not read" in refused.stderr

    (heron.root / "agents" / "bomb.md").unlink()
    escapes = '"\\e]0;owned\\a \\u202e\\x9b"'  # YAML's own escapes: ESC, BEL, RLO, CSI
    heron.write("agents/odd.md", f"---\nname: odd\ndescription: {escapes}\n---\nx")
    listed = heron.run("agents", "list", "--json")
    assert listed.code == 0, listed.stderr
    assert not {"\x1b", "\x07", "\u202e", "\x9b"} & set(listed.stdout)
    (odd,) = [a for a in json.loads(listed.stdout) if a["name"] == "odd"]
    assert odd["description"] == "\x1b]0;owned\x07 \u202e\x9b"
