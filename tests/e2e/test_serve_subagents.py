"""Experiment 4-4's agent side on a real `heron serve`, then the same with a kill -9 mid-way.

Only the models are scripted (one script per agent, named in heron.toml); the server, the bus,
the stores and the `heron agents` commands are the real ones, in their own processes.

The parent spawns three async children with budgets — `overrun` exceeds its budget, `manager`
starts a grandchild that waits on a question and is cancelled from another terminal while the
grandchild works (both end), `formatter` answers schema-invalid output and then a valid one —
and a fourth, sync, `asker`, asks its parent a question and gets the answer. Every result
reaches the parent's history exactly once; `heron agents tree --json` shows the final statuses.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from test_serve_approvals import PAY_TOOL, requests

from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.sqlite_store import SqliteBusStore
from heron.messages import ToolResultMessage, UserMessage
from support.cli import TIMEOUT_S, Heron, Running

SESSION = "main"
SCHEMA = {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "integer"}}}
AGENTS = """
[agents.overrun]
description = "Works until its budget runs out."
model = "scripted:overrun.yaml"
[agents.manager]
description = "Delegates to a helper."
model = "scripted:manager.yaml"
[agents.helper]
description = "Needs a decision before it can go on."
model = "scripted:helper.yaml"
[agents.formatter]
description = "Answers in JSON."
model = "scripted:formatter.yaml"
[agents.asker]
description = "Asks before it acts."
model = "scripted:asker.yaml"
"""


def _call(cid: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": cid, "name": name, "arguments": arguments}


def _spawn(cid: str, agent: str, mode: str, **extra: Any) -> dict[str, Any]:
    return _call(cid, "spawn_subagent", task=f"the {agent} part", agent=agent, mode=mode, **extra)


def _setup(heron: Heron, *, slow_formatter: bool) -> str:
    heron.write("heron.toml", AGENTS)
    heron.script(
        "overrun.yaml",
        [
            {"tool_calls": [_call("o1", "report_to_parent", text="step one done")]},
            {"text": "partial: step one only", "expect": {"last_message_contains": "stopped"}},
        ],
    )
    heron.script(
        "manager.yaml",
        [
            {"tool_calls": [_spawn("m1", "helper", "multi-turn")]},
            {"text": "waiting for my helper"},
            *({"text": "still waiting"} for _ in range(3)),
        ],
    )
    heron.script("helper.yaml", [{"tool_calls": [_call("h1", "ask_parent", question="which?")]}])
    heron.script(
        "formatter.yaml",
        [
            {"text": "forty-two", "delay_ms": 600_000 if slow_formatter else 0},
            {"text": '{"answer": 42}', "expect": {"last_message_contains": "output schema"}},
        ],
    )
    heron.script(
        "asker.yaml",
        [
            {"tool_calls": [_call("a1", "ask_parent", question="which colour?")]},
            {"text": "painted it blue", "expect": {"last_message_contains": "blue"}},
        ],
    )
    return heron.script(
        "parent.yaml",
        [
            {
                "tool_calls": [
                    _spawn("c_over", "overrun", "async", budget={"model_calls": 1}),
                    _spawn("c_mgr", "manager", "async", budget={"model_calls": 20}),
                    _spawn("c_fmt", "formatter", "async", output_schema=SCHEMA),
                    _spawn("c_ask", "asker", "sync"),
                ],
                "expect": {"last_message_contains": "run experiment 4-4"},
            },
            {
                "tool_calls": [
                    _call("c_answer", "send_message_to_subagent", id="c_ask", text="blue")
                ],
                # (the question is in the spawn's result; children's results that arrived
                # meanwhile may follow it, taken in at the safe point after the tools)
            },
            {"text": "four sub-agents started"},
            *({"text": "noted"} for _ in range(12)),
        ],
    )


def _serve(heron: Heron, model: str) -> Running:
    return heron.start(
        "serve",
        "--model",
        model,
        "--session",
        SESSION,
        "--poll-interval",
        "0.1",
        "--autonomy",
        "full",
    )


def _publish_request(heron: Heron, text: str = "run experiment 4-4") -> None:
    bus = SqliteBusStore.open(heron.state_dir)
    try:
        event = BusEvent(
            kind="user.input",
            source="user",
            channel="cli",
            session=SESSION,
            content=EventContent(text=text),
        )
        assert asyncio.run(bus.publish(event)) is True
    finally:
        bus.close()


def _tree(heron: Heron) -> list[dict[str, Any]]:
    listed = heron.run("agents", "tree", "--json")
    assert listed.code == 0, listed.stderr
    roots: list[dict[str, Any]] = json.loads(listed.stdout)
    return roots


def _by_agent(roots: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}

    def walk(node: dict[str, Any]) -> None:
        found[node["agent"]] = node
        for child in node["children"]:
            walk(child)

    for root in roots:
        walk(root)
    return found


def _wait(heron: Heron, condition: Any, what: str) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        nodes = _by_agent(_tree(heron))  # each check is a `heron agents tree` process
        if condition(nodes):
            return nodes
        assert time.monotonic() < deadline, f"never: {what}; last tree: {nodes}"


def _history(state_dir: Path) -> list[Any]:
    bus = SqliteBusStore.open(state_dir)
    try:
        return bus.sessions.load(SESSION)
    finally:
        bus.close()


def _pending(state_dir: Path) -> int:
    """Events of the parent's session not yet consumed into its history."""
    bus = SqliteBusStore.open(state_dir)
    try:
        return len(asyncio.run(bus.pending(SESSION)))
    finally:
        bus.close()


def _once_each(history: list[Any], nodes: dict[str, dict[str, Any]], agents: list[str]) -> None:
    """Each child's final report is in the parent's history exactly once."""
    texts = [m.content for m in history if isinstance(m, UserMessage | ToolResultMessage)]
    for agent in agents:
        node = nodes[agent]
        marker = f"[SUBAGENT_REPORT {node['id']} agent={agent} status={node['status']}"
        assert sum(t.count(marker) for t in texts) == 1, (agent, texts)


def test_experiment_4_4_budget_cancel_tree_schema_and_a_question(heron: Heron) -> None:
    parent = _setup(heron, slow_formatter=False)
    _publish_request(heron)
    server = _serve(heron, parent)
    server.wait_for_event("serve_started")
    nodes = _wait(
        heron,
        lambda n: (
            n.get("helper", {}).get("status") == "input_required"
            and n.get("asker", {}).get("status") == "completed"
            # the running manager's usage so far, its own calls and its helper's
            and n["manager"]["usage"]["model_calls"] >= 3
        ),
        "the grandchild waiting on its question, the sync child done",
    )
    cancelled = heron.run("agents", "cancel", nodes["manager"]["id"])
    assert cancelled.code == 0, cancelled.stderr
    assert cancelled.stdout.strip().endswith("cancelled")
    nodes = _wait(
        heron,
        lambda n: (
            all(
                node["status"] not in ("queued", "working", "input_required") for node in n.values()
            )
            and n["formatter"]["delivered"]
            and n["overrun"]["delivered"]
            and n["manager"]["delivered"]
        ),
        "every child ended and its result delivered",
    )
    server.wait_for_event("final")
    while _pending(heron.state_dir):
        server.wait_for_event("final")  # the parent takes in the last results
    server.proc.terminate()
    finished = server.finish()
    assert finished.code == 0, finished.stderr

    nodes = _by_agent(_tree(heron))
    statuses = {name: (n["status"], n["outcome"]) for name, n in nodes.items()}
    assert statuses == {
        "overrun": ("completed", "budget_exhausted"),
        "manager": ("cancelled", None),
        "helper": ("cancelled", None),
        "formatter": ("completed", None),
        "asker": ("completed", None),
    }
    assert nodes["formatter"]["result"] == '{"answer": 42}'
    assert nodes["helper"]["parent"] == nodes["manager"]["id"]
    assert nodes["overrun"]["usage"]["model_calls"] == 2  # its one call and the summary
    history = _history(heron.state_dir)
    _once_each(history, nodes, ["overrun", "manager", "formatter", "asker"])
    answer = [m for m in history if isinstance(m, ToolResultMessage) and m.call_id == "c_answer"]
    assert len(answer) == 1 and "painted it blue" in answer[0].content


def test_a_killed_server_reports_its_running_children_lost_and_delivers_nothing_twice(
    heron: Heron,
) -> None:
    parent = _setup(heron, slow_formatter=True)
    _publish_request(heron)
    one = _serve(heron, parent)
    one.wait_for_event("serve_started")
    before = _wait(
        heron,
        lambda n: (
            n.get("helper", {}).get("status") == "input_required"
            and n.get("asker", {}).get("status") == "completed"
            and n.get("overrun", {}).get("delivered") is True
            and n.get("formatter", {}).get("status") == "working"
        ),
        "three children running (manager, helper, formatter), two done",
    )
    one.proc.kill()  # SIGKILL: no cleanup of any kind
    one.proc.wait(timeout=TIMEOUT_S)
    heron.script("after.yaml", [{"text": "noted"} for _ in range(12)])
    two = _serve(heron, "scripted:after.yaml")
    two.wait_for_event("serve_started")
    nodes = _wait(
        heron,
        lambda n: (
            all(n[a]["status"] == "lost" for a in ("manager", "helper", "formatter"))
            and n["manager"]["delivered"]
            and n["formatter"]["delivered"]
        ),
        "the three running children reported lost",
    )
    while _pending(heron.state_dir):
        two.wait_for_event("final")
    two.proc.terminate()
    finished = two.finish()
    assert finished.code == 0, finished.stderr

    assert {a: before[a]["id"] for a in before} == {a: nodes[a]["id"] for a in nodes}
    statuses = {name: n["status"] for name, n in _by_agent(_tree(heron)).items()}
    assert statuses == {
        "overrun": "completed",
        "manager": "lost",
        "helper": "lost",
        "formatter": "lost",
        "asker": "completed",
    }
    history = _history(heron.state_dir)
    _once_each(history, nodes, ["overrun", "manager", "formatter"])


def _clerk(heron: Heron) -> tuple[Running, dict[str, Any], dict[str, Any]]:
    """A parent spawns `clerk`, whose payment needs approval; the server runs until the
    clerk's request is in the store. Returns the server, the clerk's node and its request."""
    heron.write("pay.py", PAY_TOOL)
    heron.write(
        "heron.toml",
        '[approvals.approvers]\nconsole = ["alice"]\n\n'
        '[agents.clerk]\ndescription = "Pays invoices."\nmodel = "scripted:clerk.yaml"\n',
    )
    heron.script(
        "clerk.yaml",
        [
            {"tool_calls": [_call("k_pay", "pay", to="ACME", amount=120)]},
            {"text": "waiting for the approval"},
            {"text": "paid ACME 120", "expect": {"last_message_contains": "paid 120 to ACME"}},
        ],
    )
    parent = heron.script(
        "parent.yaml",
        [
            {
                "tool_calls": [_spawn("c_clerk", "clerk", "async", write=True)],
                "expect": {"last_message_contains": "pay the invoice"},
            },
            {"text": "the clerk is on it"},
            {"text": "the clerk paid", "expect": {"last_message_contains": "paid ACME 120"}},
            *({"text": "noted"} for _ in range(4)),
        ],
    )
    _publish_request(heron, "pay the invoice of ACME")
    server = _serve_with_pay(heron, parent)
    server.wait_for_event("serve_started")
    clerk = _wait(heron, lambda n: "clerk" in n, "the clerk spawned")["clerk"]
    deadline = time.monotonic() + TIMEOUT_S
    while not (pending := [r for r in requests(heron) if r["status"] == "input_required"]):
        assert time.monotonic() < deadline, "the clerk's approval never reached the store"
    (request,) = pending
    return server, clerk, request


def _serve_with_pay(heron: Heron, model: str) -> Running:
    return heron.start(
        "serve",
        "--model",
        model,
        "--session",
        SESSION,
        "--poll-interval",
        "0.1",
        "--tools",
        "pay.py",
    )


def test_a_childs_approval_waits_in_the_store_labelled_and_its_result_reaches_the_parent_once(
    heron: Heron,
) -> None:
    server, clerk, request = _clerk(heron)
    # On the parent's human channels, labelled with the child and its parent.
    assert (request["tool"], request["session"]) == ("pay", f"{SESSION}/agent/{clerk['id']}")
    assert request["approvers"] == ["console:alice"]
    assert f"sub-agent clerk {clerk['id']} (spawned by {SESSION})" in request["question"]
    assert not (heron.root / "payments.log").exists()

    approved = heron.run("approvals", "approve", request["id"], "--as", "alice")
    assert approved.code == 0, approved.stderr
    nodes = _wait(
        heron,
        lambda n: n["clerk"]["status"] == "completed" and n["clerk"]["delivered"],
        "the clerk done and its result delivered",
    )
    server.wait_for_event("final", text="the clerk paid")
    server.proc.terminate()
    finished = server.finish()
    assert finished.code == 0, finished.stderr

    assert nodes["clerk"]["result"] == "paid ACME 120"
    assert (heron.root / "payments.log").read_text(encoding="utf-8") == "ACME 120\n"
    (done,) = requests(heron)
    assert (done["status"], done["outcome"], done["answered_by"]) == (
        "completed",
        "approved",
        "console:alice",
    )
    _once_each(_history(heron.state_dir), nodes, ["clerk"])


def test_a_child_killed_while_its_approval_waits_is_lost_and_its_request_withdrawn(
    heron: Heron,
) -> None:
    one, clerk, request = _clerk(heron)
    one.proc.kill()  # SIGKILL while the clerk waits for its approval
    one.proc.wait(timeout=TIMEOUT_S)
    heron.script("after.yaml", [{"text": "noted"} for _ in range(4)])
    two = _serve_with_pay(heron, "scripted:after.yaml")
    two.wait_for_event("serve_started")
    nodes = _wait(
        heron,
        lambda n: n["clerk"]["status"] == "lost" and n["clerk"]["delivered"],
        "the clerk reported lost",
    )
    while _pending(heron.state_dir):
        two.wait_for_event("final")
    (withdrawn,) = requests(heron)
    assert (withdrawn["id"], withdrawn["status"], withdrawn["answered_by"]) == (
        request["id"],
        "cancelled",
        "policy",
    )
    late = heron.run("approvals", "approve", request["id"], "--as", "alice")
    assert late.code != 0  # nobody can approve a call that can no longer run
    two.proc.terminate()
    finished = two.finish()
    assert finished.code == 0, finished.stderr
    assert not (heron.root / "payments.log").exists()
    assert nodes["clerk"]["id"] == clerk["id"]
    _once_each(_history(heron.state_dir), nodes, ["clerk"])
