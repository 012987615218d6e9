"""Permission prompts of `heron acp`, answered by the Agent Client Protocol SDK's own client
side over the pipes of a real `heron acp` — or from a terminal — on heron's durable request
store: the same requests `heron approvals` lists, answers, verifies and audits."""

from __future__ import annotations

import asyncio
import json
import re
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from heron.humans.sqlite_store import SqliteRequestStore
from support.acp_client import heron_acp
from support.cli import Heron
from support.waiting import poll_until

MAKE_TURNS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": "m1", "name": "make_file", "arguments": {"name": "made.txt"}}]},
    {"text": "Finished.", "expect": {"last_role": "tool"}},
]


def _approval(heron: Heron, request_id: str) -> dict[str, Any]:
    shown = heron.run("approvals", "show", request_id, "--json")
    assert shown.code == 0, shown.stderr
    data: dict[str, Any] = json.loads(shown.stdout)
    return data


@pytest.mark.parametrize(
    ("option", "status", "outcome", "made"),
    [
        ("allow_once", "completed", "approved", True),
        ("reject_once", "failed", "denied", False),
    ],
)
async def test_a_permission_answered_in_the_editor_is_a_signed_decision_on_the_durable_store(
    heron: Heron, workspace: Path, option: str, status: str, outcome: str, made: bool
) -> None:
    model = heron.script("script.yaml", MAKE_TURNS)
    args = ("--model", model, "--tools", heron.tools(), "--as", "tester")

    async with heron_acp(heron, *args) as agent:
        session = await agent.new_session(workspace)
        turn = asyncio.ensure_future(agent.prompt(session, "make the file"))
        asked = await agent.editor.next_question()
        # The call's card reached the editor before the question, and the question names it.
        assert agent.editor.status(session, "m1") == "pending"
        assert asked.tool_call.tool_call_id == "m1"
        assert [o.kind for o in asked.options] == [
            "allow_once",
            "allow_always",
            "reject_once",
            "reject_always",
        ]
        # While the editor asks, the request waits on the store every terminal sees.
        listed = await asyncio.to_thread(heron.run, "approvals", "list", "--json")
        [pending] = json.loads(listed.stdout)
        assert pending["id"] == asked.request_id
        assert (pending["session"], pending["tool"], pending["call_ids"]) == (
            session,
            "make_file",
            ["m1"],
        )
        assert pending["arguments"] == {"name": "made.txt"}
        assert pending["approvers"] == ["console:*", "acp:tester"]

        asked.answer(option)
        assert await turn == "end_turn"

        assert agent.editor.status(session, "m1") == status
    assert (heron.root / "made.txt").exists() is made
    ended = await asyncio.to_thread(_approval, heron, asked.request_id)
    assert (ended["status"], ended["outcome"], ended["answered_by"]) == (
        "completed",
        outcome,
        "acp:tester",
    )
    verified = await asyncio.to_thread(heron.run, "approvals", "verify", asked.request_id)
    assert verified.code == 0, verified.stdout + verified.stderr
    # The engine's approval trail records the editor's answer as any other.
    audit = await asyncio.to_thread(heron.run, "audit", "--approvals", "--json")
    [record] = [json.loads(line) for line in audit.stdout.splitlines()]
    decision = "yes" if option == "allow_once" else "no"
    assert (record["tool"], record["decision"], record["decided_by"]) == (
        "make_file",
        decision,
        "acp:tester",
    )


def _make(call_id: str, name: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": "make_file", "arguments": {"name": name}}]}


async def test_allow_always_is_a_stored_rule_that_answers_the_session_after_a_restart(
    heron: Heron,
    workspace: Path,
) -> None:
    first = heron.script("first.yaml", [_make("m1", "a.txt"), {"text": "Made a."}])
    again = heron.script("again.yaml", [_make("m2", "b.txt"), {"text": "Made b."}])
    tools = heron.tools()

    async with heron_acp(heron, "--model", first, "--tools", tools, "--as", "tester") as agent:
        session = await agent.new_session(workspace)
        turn = asyncio.ensure_future(agent.prompt(session, "make a"))
        asked = await agent.editor.next_question()
        asked.answer("allow_always")
        assert await turn == "end_turn"
    rules = await asyncio.to_thread(heron.run, "approvals", "rules", "--json")
    [rule] = json.loads(rules.stdout)
    assert (rule["tool"], rule["scope"], rule["session"]) == ("make_file", "session", session)
    assert (rule["created_by"], rule["request_id"]) == ("acp:tester", asked.request_id)

    # Another `heron acp` loads the session: the stored rule approves without asking.
    args = ("--model", again, "--tools", tools, "--as", "tester")
    async with heron_acp(heron, *args, log="again.log") as agent:
        await agent.conn.load_session(cwd=str(workspace), session_id=session, mcp_servers=[])
        assert await agent.prompt(session, "make b") == "end_turn"
        assert agent.editor.status(session, "m2") == "completed"
        assert agent.editor.asked.empty()
    assert (heron.root / "b.txt").exists()


async def test_reject_always_refuses_later_calls_of_the_tool_without_asking(
    heron: Heron, workspace: Path
) -> None:
    turns = [_make("m1", "a.txt"), _make("m2", "b.txt"), {"text": "Both refused."}]
    model = heron.script("script.yaml", turns)

    async with heron_acp(heron, "--model", model, "--tools", heron.tools(), "--as", "t") as agent:
        session = await agent.new_session(workspace)
        turn = asyncio.ensure_future(agent.prompt(session, "make both"))
        asked = await agent.editor.next_question()
        asked.answer("reject_always")
        assert await turn == "end_turn"

        editor = agent.editor
        assert (editor.status(session, "m1"), editor.status(session, "m2")) == ("failed", "failed")
        assert editor.asked.empty()
        assert editor.text(session) == "Both refused."
    assert not (heron.root / "a.txt").exists()
    assert not (heron.root / "b.txt").exists()
    ended = await asyncio.to_thread(_approval, heron, asked.request_id)
    assert (ended["outcome"], ended["answered_by"]) == ("denied", "acp:t")


async def test_an_answer_from_a_terminal_wins_and_the_editors_late_answer_is_refused(
    heron: Heron,
    workspace: Path,
) -> None:
    model = heron.script("script.yaml", MAKE_TURNS)

    async with heron_acp(heron, "--model", model, "--tools", heron.tools(), "--as", "t") as agent:
        session = await agent.new_session(workspace)
        turn = asyncio.ensure_future(agent.prompt(session, "make the file"))
        asked = await agent.editor.next_question()
        # The waiting turn consumes the answer: stored as reported from the start, so the
        # watcher of a `heron serve` on this state directory never hands it to the session.
        with closing(SqliteRequestStore.open_dir(heron.state_dir)) as store:
            request = store.get(asked.request_id)
            assert request is not None and request.active and request.reported
        approved = await asyncio.to_thread(heron.run, "approvals", "approve", asked.request_id)
        assert approved.code == 0, approved.stderr
        assert await turn == "end_turn"
        assert agent.editor.status(session, "m1") == "completed"

        asked.answer("reject_once")  # too late: the terminal answered first
        await poll_until(lambda: "was refused" in agent.log(), "the late answer's refusal")
    assert (heron.root / "made.txt").exists()
    ended = await asyncio.to_thread(_approval, heron, asked.request_id)
    assert ended["outcome"] == "approved"
    assert ended["answered_by"].startswith("console:")


async def test_cancel_while_the_editor_asks_ends_the_request_and_the_call_never_runs(
    heron: Heron,
    workspace: Path,
) -> None:
    model = heron.script("script.yaml", MAKE_TURNS)

    async with heron_acp(heron, "--model", model, "--tools", heron.tools(), "--as", "t") as agent:
        session = await agent.new_session(workspace)
        turn = asyncio.ensure_future(agent.prompt(session, "make the file"))
        asked = await agent.editor.next_question()
        await agent.conn.cancel(session_id=session)
        asked.withdraw()
        assert await turn == "cancelled"
        [*_, ended] = agent.editor.calls(session)["m1"]
        assert ended.status == "failed"
        assert "waited for approval; it did not run" in ended.content[0].content.text
    assert not (heron.root / "made.txt").exists()
    request = await asyncio.to_thread(_approval, heron, asked.request_id)
    assert (request["status"], request["reason"]) == ("cancelled", "the prompt turn was cancelled")


async def test_an_editor_user_who_is_not_an_approver_is_told_whom_the_call_waits_for(
    heron: Heron, workspace: Path
) -> None:
    heron.write("heron.toml", '[approvals.approvers]\nconsole = ["alice"]\n')
    model = heron.script("script.yaml", MAKE_TURNS)

    async with heron_acp(heron, "--model", model, "--tools", heron.tools(), "--as", "bob") as agent:
        session = await agent.new_session(workspace)
        turn = asyncio.ensure_future(agent.prompt(session, "make the file"))
        editor = agent.editor

        def waiting_note() -> str | None:
            for step in editor.calls(session).get("m1", []):
                for content in step.content or []:
                    if "is not one of its approvers" in content.content.text:
                        return str(content.content.text)
            return None

        note = await editor.wait_for("the waiting note", waiting_note)
        assert "from console:alice" in note and "acp:bob" in note
        [request_id] = re.findall(r"approval (apr-[0-9a-f]+)", note)
        approved = await asyncio.to_thread(
            heron.run, "approvals", "approve", request_id, "--as", "alice"
        )
        assert approved.code == 0, approved.stderr
        assert await turn == "end_turn"
        assert editor.asked.empty()  # the editor was never asked
        assert editor.status(session, "m1") == "completed"
