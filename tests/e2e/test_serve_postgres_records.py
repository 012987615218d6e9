"""What `heron serve --store` keeps beside the bus on the shared PostgreSQL store: requests to a
human, their ledger and both audit trails, and sub-agent tasks.

An approval raised on worker A is listed and answered by `heron approvals --store` from a
terminal with a state directory of its own; A is killed -9 before the answer, so worker B takes
the session over and runs the approved call exactly once; the decision and the executions are
in the shared audit trails (`heron audit --store`). A parent on a PostgreSQL-backed worker
spawns an async sub-agent and takes its result into its history exactly once, as
`heron agents tree --store` shows; when the worker running a child is killed -9, another
worker ends the child `lost` and its parent, taken over there, is told once.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from test_serve_approvals import PAY_TOOL

from heron.always_on.bus.model import BusEvent, EventContent
from heron.always_on.bus.postgres_store import PostgresBusStore
from heron.messages import ToolResultMessage, UserMessage
from heron.models.history_rules import HistoryChecker
from support.cli import Heron, Running
from support.postgres import postgres_server, postgres_url
from support.waiting import poll_until

__all__ = ["postgres_server", "postgres_url"]  # fixtures, found by pytest here

SESSION = "main"


def worker(heron: Heron, name: str, url: str, script: str, *extra: str) -> Running:
    root = heron.root / name
    (root / "ws").mkdir(parents=True)
    return heron.start(
        "serve",
        "--store",
        url,
        "--lease",
        "1",
        "--state-dir",
        str(root / "state"),
        "--workspace",
        str(root / "ws"),
        "--session",
        name,
        "--model",
        script,
        "--poll-interval",
        "0.1",
        *extra,
    )


def ask(url: str, text: str) -> None:
    """The user's message to session `main`, straight into the shared bus."""
    bus = PostgresBusStore.open(url)
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


def heron_json(heron: Heron, *args: str) -> Any:
    """A state-reading command from a terminal of its own (no worker's state directory)."""
    done = heron.run(*args, "--state-dir", str(heron.root / "terminal"))
    assert done.code == 0, done.stderr
    return json.loads(done.stdout)


def heron_lines(heron: Heron, *args: str) -> list[dict[str, Any]]:
    done = heron.run(*args, "--state-dir", str(heron.root / "terminal"))
    assert done.code == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def history(url: str) -> list[Any]:
    bus = PostgresBusStore.open(url)
    try:
        return bus.sessions.load(SESSION)
    finally:
        bus.close()


def handover_scripts(
    heron: Heron, first: tuple[dict[str, Any], str, str], second: tuple[str, str]
) -> tuple[str, str]:
    """Worker a's script (`first`: a call made on the user's words, then its reply) and
    worker b's (`second`: the reply it gives once it sees the words it expects)."""
    call, asked, said = first
    answer, seen = second
    return (
        heron.script(
            "a.yaml",
            [
                {"tool_calls": [call], "expect": {"last_message_contains": asked}},
                {"text": said},
            ],
        ),
        heron.script("b.yaml", [{"text": answer, "expect": {"last_message_contains": seen}}]),
    )


def wait(condition: Any, what: str) -> None:
    asyncio.run(poll_until(condition, what, within_s=60, every_s=0.2))


def test_an_approval_raised_on_one_worker_is_answered_from_a_terminal_and_run_once_by_another(
    heron: Heron, postgres_url: str
) -> None:
    heron.write("pay.py", PAY_TOOL)
    heron.write("heron.toml", '[approvals.approvers]\nconsole = ["alice"]\n')
    pay = {"id": "c_pay", "name": "pay", "arguments": {"to": "ACME", "amount": 120}}
    first, second = handover_scripts(
        heron,
        (pay, "pay ACME", "I asked for approval to pay ACME."),
        ("Paid ACME 120.", "paid 120 to ACME"),
    )
    a = worker(heron, "worker-a", postgres_url, first, "--tools", "pay.py")
    a.wait_for_event("serve_started")
    ask(postgres_url, "please pay ACME 120")
    assert a.wait_for_event("tool_result", id="c_pay")["status"] == "awaiting_approval"
    a.wait_for_event("final", text="I asked for approval to pay ACME.")
    b = worker(heron, "worker-b", postgres_url, second, "--tools", "pay.py")
    b.wait_for_event("serve_started")

    store = ("--store", postgres_url)
    [pending] = heron_json(heron, "approvals", "list", "--json", *store)
    assert (pending["session"], pending["tool"], pending["status"]) == (
        SESSION,
        "pay",
        "input_required",
    )
    a.proc.kill()  # the worker that asked dies; the request waits in the shared store
    a.proc.wait()
    approved = heron.run(
        "approvals", "approve", pending["id"], "--as", "alice", *store,
        "--state-dir", str(heron.root / "terminal"),
    )  # fmt: skip
    assert approved.code == 0, approved.stderr
    # Worker B takes `main` over once A's lease expired, runs the call and takes in its result.
    ran = b.wait_for_event("tool_result", id="c_pay")
    assert ran["status"] == "ok" and "paid 120 to ACME" in ran["output"]
    b.wait_for_event("final", text="Paid ACME 120.")
    b.proc.terminate()
    assert b.finish().code == 0

    payments = (heron.root / "payments.log").read_text(encoding="utf-8").splitlines()
    assert payments == ["ACME 120"]  # exactly once
    [done] = heron_json(heron, "approvals", "list", "--status", "all", "--json", *store)
    assert (done["outcome"], done["answered_by"]) == ("approved", "console:alice")
    [decision] = heron_lines(heron, "audit", "--approvals", "--json", *store)
    assert (decision["tool"], decision["decision"], decision["request_id"]) == (
        "pay",
        "yes",
        pending["id"],
    )
    assert decision["decided_by"] == "console:alice"
    executions = heron_lines(heron, "audit", "--tool", "pay", "--json", *store)
    assert [e["status"] for e in executions][-1] == "ok"  # the run on worker B
    log = history(postgres_url)
    HistoryChecker().check(log)
    results = [m for m in log if isinstance(m, ToolResultMessage) and m.call_id == "c_pay"]
    assert len(results) == 1  # the placeholder; the real result came as one event
    told = [m for m in log if isinstance(m, UserMessage) and "paid 120 to ACME" in m.content]
    assert len(told) == 1


def test_a_parent_on_a_shared_store_spawns_a_sub_agent_and_gets_its_result_once(
    heron: Heron, postgres_url: str
) -> None:
    heron.write(
        "heron.toml",
        '[agents.helper]\ndescription = "Looks things up."\nmodel = "scripted:helper.yaml"\n',
    )
    heron.script("helper.yaml", [{"text": "the answer is 42"}])
    spawn = {
        "id": "c_spawn",
        "name": "spawn_subagent",
        "arguments": {"task": "find the answer", "agent": "helper", "mode": "async"},
    }
    parent = heron.script(
        "parent.yaml",
        [
            {"tool_calls": [spawn], "expect": {"last_message_contains": "ask the helper"}},
            {"text": "The helper is on it."},
            {"text": "It says 42.", "expect": {"last_message_contains": "the answer is 42"}},
        ],
    )
    one = worker(heron, "worker-a", postgres_url, parent, "--autonomy", "full")
    one.wait_for_event("serve_started")
    ask(postgres_url, "ask the helper")
    one.wait_for_event("final", text="It says 42.")
    store = ("--store", postgres_url, "--state-dir", str(heron.root / "terminal"))

    def delivered() -> bool:
        listed = heron.run("agents", "tree", "--json", *store)
        assert listed.code == 0, listed.stderr
        return bool(json.loads(listed.stdout)[0]["delivered"])

    wait(delivered, "the child's result marked delivered")
    one.proc.terminate()
    assert one.finish().code == 0
    [node] = json.loads(heron.run("agents", "tree", "--json", *store).stdout)
    assert (node["agent"], node["status"], node["result"]) == (
        "helper",
        "completed",
        "the answer is 42",
    )
    log = history(postgres_url)
    HistoryChecker().check(log)
    marker = f"[SUBAGENT_REPORT {node['id']} agent=helper status=completed"
    texts = [m.content for m in log if isinstance(m, UserMessage | ToolResultMessage)]
    assert sum(t.count(marker) for t in texts) == 1


def test_a_child_of_a_killed_worker_ends_lost_and_its_parent_is_told_once_elsewhere(
    heron: Heron, postgres_url: str
) -> None:
    heron.write(
        "heron.toml",
        '[agents.helper]\ndescription = "Takes its time."\nmodel = "scripted:helper.yaml"\n',
    )
    heron.script("helper.yaml", [{"text": "too late", "delay_ms": 600_000}])
    spawn = {
        "id": "c_spawn",
        "name": "spawn_subagent",
        "arguments": {"task": "take your time", "agent": "helper", "mode": "async"},
    }
    first, second = handover_scripts(
        heron,
        (spawn, "ask the helper", "The helper is on it."),
        ("The helper was lost.", "status=lost"),
    )
    a = worker(heron, "worker-a", postgres_url, first, "--autonomy", "full")
    a.wait_for_event("serve_started")
    ask(postgres_url, "ask the helper")
    a.wait_for_event("final", text="The helper is on it.")
    b = worker(heron, "worker-b", postgres_url, second, "--autonomy", "full")
    b.wait_for_event("serve_started")
    store = ("--store", postgres_url)
    [running] = heron_json(heron, "agents", "tree", "--json", *store)
    assert running["status"] == "working"
    a.proc.kill()  # the child dies with the worker that ran it
    a.proc.wait()
    b.wait_for_event("final", text="The helper was lost.")
    b.proc.terminate()
    assert b.finish().code == 0
    [node] = heron_json(heron, "agents", "tree", "--json", *store)
    assert (node["status"], node["delivered"]) == ("lost", True)
    log = history(postgres_url)
    HistoryChecker().check(log)
    marker = f"[SUBAGENT_REPORT {node['id']} agent=helper status=lost"
    texts = [m.content for m in log if isinstance(m, UserMessage | ToolResultMessage)]
    assert sum(t.count(marker) for t in texts) == 1
