"""The execution audit trail: who ran which tool call, in what context, why, and how it ended."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from heron import Agent, RecordingObserver, ScriptedModel, ToolContext, tool
from heron._support.state import open_db
from heron.audit.executions import Execution, ExecutionAuditTrail
from heron.audit.sqlite_store import SqliteExecutionStore
from heron.errors import StoreError
from heron.sessions.session import CliSession
from heron.turn.approval import ApprovalAnswer, ApprovalRequest
from heron.turn.cancel import CancelScope
from heron.turn.observer import ToolCallRecord, ToolCallStartRecord
from support.killed_turn import kill_mid_call


@tool(read_only=True)
def look(place: str) -> str:
    """Look at a place.

    Args:
        place: Where to look.
    """
    return f"a tree at {place}"


@tool(requires_approval=True)
def cut(what: str) -> str:
    """Cut something down.

    Args:
        what: What to cut.
    """
    return f"cut {what}"


@tool(requires_approval=True)
def burn(what: str) -> str:
    """Burn something.

    Args:
        what: What to burn.
    """
    return f"burnt {what}"


@tool(read_only=True)
async def survey(ctx: ToolContext) -> str:
    """Look at two places through the engine."""
    assert ctx.call_tool is not None
    north = await ctx.call_tool("look", {"place": "north"})
    return f"survey: {north.output}"


class Operator:
    """Says yes to `cut`, no to everything else."""

    async def ask(self, request: ApprovalRequest) -> ApprovalAnswer:
        decision = "yes" if request.tool == "cut" else "no"
        return ApprovalAnswer(decision=decision, decided_by="operator:test")


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    db = open_db(tmp_path)
    yield db
    db.close()


def query_executions(conn: sqlite3.Connection) -> list[Execution]:
    return SqliteExecutionStore(conn).query()


def turn(*calls: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


async def run_in_session(tmp_path: Path, agent: Agent, prompt: str = "go") -> None:
    session = CliSession.open(tmp_path, "s1", operator="alice")
    session.attach(agent)
    try:
        outcome = await session.run_turn(
            agent, prompt, sink=lambda _: None, cancel=CancelScope(), channel="cli"
        )
        assert outcome.status == "final", outcome.error
    finally:
        session.close()


async def test_an_executed_call_is_recorded_with_who_context_why_and_outcome(
    tmp_path: Path, conn: sqlite3.Connection
) -> None:
    model = ScriptedModel(
        [
            turn({"id": "k1", "name": "look", "arguments": {"place": "garden"}}, text="Checking."),
            {"text": "There is a tree."},
        ]
    )
    await run_in_session(tmp_path, Agent(model=model, tools=[look], name="gardener"))

    [row] = query_executions(conn)
    assert (row.tool, row.call_id, row.session, row.channel) == ("look", "k1", "s1", "cli")
    assert (row.agent, row.operator, row.approved_by, row.owner) == (
        "gardener",
        "alice",
        None,
        "user",
    )
    assert row.why == "Checking."
    assert row.arguments == '{"place":"garden"}'
    assert (row.status, row.success, row.result) == ("ok", True, "a tree at garden")
    assert row.duration_ms is not None and row.duration_ms >= 0
    assert row.ended is not None and row.ended >= row.started
    assert len(row.turn_id) == 12


async def test_approved_calls_name_the_approver_and_denied_calls_are_not_recorded(
    tmp_path: Path, conn: sqlite3.Connection
) -> None:
    model = ScriptedModel(
        [
            turn(
                {"id": "c1", "name": "cut", "arguments": {"what": "hedge"}},
                {"id": "b1", "name": "burn", "arguments": {"what": "hedge"}},
                text="Cutting, then burning.",
            ),
            {"text": "Cut; burning was refused."},
        ]
    )
    agent = Agent(model=model, tools=[cut, burn], approver=Operator(), name="gardener")
    await run_in_session(tmp_path, agent)

    rows = query_executions(conn)
    assert [(r.tool, r.status, r.approved_by, r.why) for r in rows] == [
        ("cut", "ok", "operator:test", "Cutting, then burning.")
    ]


async def test_a_call_made_by_a_tool_inherits_the_reason_of_the_call_that_made_it(
    tmp_path: Path, conn: sqlite3.Connection
) -> None:
    model = ScriptedModel(
        [turn({"id": "s1", "name": "survey"}, text="Surveying."), {"text": "Done."}]
    )
    await run_in_session(tmp_path, Agent(model=model, tools=[survey, look], autonomy="full"))

    rows = query_executions(conn)
    assert [(r.tool, r.call_id, r.why) for r in rows] == [
        ("survey", "s1", "Surveying."),
        ("look", "s1.1", "Surveying."),
    ]
    assert rows[0].agent == "default"  # an unnamed agent


async def test_credentials_in_the_reason_are_masked(
    tmp_path: Path, conn: sqlite3.Connection
) -> None:
    secret = "sk-" + "a1b2c3d4e5f6g7h8i9j0k1l2"
    model = ScriptedModel(
        [
            turn({"id": "k1", "name": "look", "arguments": {"place": "x"}}, text=f"Using {secret}"),
            {"text": "ok"},
        ]
    )
    await run_in_session(tmp_path, Agent(model=model, tools=[look]))

    [row] = query_executions(conn)
    assert row.why is not None and row.why.startswith("Using sk-")
    assert secret not in row.why


async def test_a_call_whose_process_died_stays_running_until_resume_marks_it_lost(
    tmp_path: Path, conn: sqlite3.Connection
) -> None:
    await kill_mid_call(tmp_path, "s1", turn({"id": "h1", "name": "hang"}), autonomy="supervised")
    assert [(r.call_id, r.status, r.ended) for r in query_executions(conn)] == [
        ("h1", "running", None)
    ]

    CliSession.open(tmp_path, "s1").close()

    assert [(r.call_id, r.status, r.success) for r in query_executions(conn)] == [
        ("h1", "lost", False)
    ]


def test_attaching_a_session_keeps_the_agents_observer_beside_the_trail(tmp_path: Path) -> None:
    previous = RecordingObserver()
    agent = Agent(model=ScriptedModel([]), observer=previous)
    session = CliSession.open(tmp_path, "s")
    try:
        session.attach(agent)
        session.attach(agent)  # attaching twice records each call once
        start = ToolCallStartRecord(tool="t", call_id="c", arguments="{}", turn_id="u", owner="o")
        end = ToolCallRecord.ending(
            start, duration_ms=1.0, success=False, status="error", result="x"
        )
        agent.observer.tool_call_start(start)
        agent.observer.tool_call_end(end)
        assert previous.records == [start, end]
        [row] = query_executions(session.store.conn)
        assert (row.status, row.success, row.why, row.agent) == ("error", False, None, "default")
    finally:
        session.close()


class BrokenStore(SqliteExecutionStore):
    """An execution store whose back end fails on every write."""

    def start(self, execution: Execution) -> int:
        raise StoreError("disk full")

    def end(self, row: int, **_: Any) -> None:  # type: ignore[override]
        raise StoreError("disk full")


def test_a_store_failure_is_logged_and_never_breaks_the_call(
    conn: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    trail = ExecutionAuditTrail(BrokenStore(conn), session="s")
    start = ToolCallStartRecord(tool="look", call_id="c1", arguments="{}", turn_id="u", owner="o")
    trail.tool_call_start(start)
    trail.tool_call_end(
        ToolCallRecord.ending(start, duration_ms=1, success=True, status="ok", result="")
    )
    assert "cannot record the start of look: disk full" in caplog.text
    assert query_executions(conn) == []
